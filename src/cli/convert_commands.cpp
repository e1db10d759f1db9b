// trove convert / diff.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/count_text.h"
#include "formats/format_registry.h"
#include "cli/escaped_output.h"
#include "cli/json_output.h"
#include "cli/pager.h"
#include "cli/progress.h"
#include "cli/table.h"
#include "core/display_escape.h"
#include "core/float_text.h"
#include "trove/convert.h"
#include "trove/open.h"
#include "trove/safetensors.h"
#include "trove/diff.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"

namespace trove::cli {
namespace {

std::string DoubleText(double d) { return FloatText(d); }

// What --dtype did to the values: counted as the cast streamed them (trove/tensor.h CastLosses).
struct CastSummary {
  uint64_t overflowed = 0, underflowed = 0, sign_lost = 0;
  Json tensors = Json::array();  // one row per cast tensor that lost anything
};

CastSummary SummariseCasts(const Document& doc) {
  CastSummary s;
  std::set<const CastLosses*> seen;  // a tied weight is one cast
  for (const NamedTensor& t : doc.tensors) {
    const CastLosses* l = t.view->cast_losses.get();
    if (l == nullptr || !l->counted || !seen.insert(l).second) continue;
    s.overflowed += l->overflowed;
    s.underflowed += l->underflowed;
    s.sign_lost += l->sign_lost;
    if (l->overflowed + l->underflowed + l->sign_lost > 0) {
      s.tensors.push_back({{"key", t.key}, {"dtype", Name(t.view->cast_source->dtype)}, {"to", Name(t.view->dtype)},
                           {"overflowed", l->overflowed.load()}, {"underflowed", l->underflowed.load()},
                           {"sign_lost", l->sign_lost.load()}});
    }
  }
  return s;
}

// The warning on stderr (always) and the --json report on stdout. On a terminal (stderr), a
// closing line says what was done once the progress line is erased: "wrote out.safetensors: 291 tensors, 4.2 GiB in 3.1 s". In a pipe or with --json nothing: scripts
// read the exit status and --json.
void ReportConversion(const Document& doc, const std::string& src, const std::string& dst, Format target,
                      std::optional<DType> dtype, size_t cast, const std::vector<std::string>& notes, bool json,
                      std::chrono::steady_clock::time_point started) {
  const CastSummary s = SummariseCasts(doc);
  uint64_t bytes = 0;
  for (const NamedTensor& t : doc.tensors) bytes += t.view->nbytes();
  std::vector<std::string> parts;
  if (s.overflowed) parts.push_back(Thousands(s.overflowed) + " overflowed to inf");
  if (s.underflowed) parts.push_back(Thousands(s.underflowed) + " underflowed to zero");
  if (s.sign_lost) parts.push_back(Thousands(s.sign_lost) + " lost their sign");
  std::string warning;
  if (!parts.empty()) {
    std::string where;
    for (size_t i = 0; i < s.tensors.size() && i < 3; ++i) where += (i ? ", " : "") + s.tensors[i]["key"].get<std::string>();
    if (s.tensors.size() > 3) where += fmt::format(" and {} more", s.tensors.size() - 3);
    warning = "--dtype " + std::string(dtype ? Name(*dtype) : "") + ": " + fmt::format("{}", fmt::join(parts, ", ")) + " (in " + std::to_string(s.tensors.size()) +
              (s.tensors.size() == 1 ? " tensor: " : " tensors: ") + where + ")";
    std::cerr << "trove: warning: " << EscapeForDisplay(dst) << ": " << EscapeForDisplay(warning, DisplayEscape::kLine) << '\n';
  }
  if (!json && ::isatty(STDERR_FILENO)) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::cerr << "wrote " << EscapeForDisplay(dst) << ": " << Thousands(doc.tensors.size())
              << (doc.tensors.size() == 1 ? " tensor, " : " tensors, ") << HumanBytes(bytes) << " in "
              << fmt::format("{:.1f} s", seconds) << '\n';
  }
  if (!json) return;
  Json j = Envelope("convert");
  j["source"] = src;
  j["destination"] = dst;
  j["format"] = FormatName(target);
  j["tensors"] = doc.tensors.size();
  j["tensor_bytes"] = bytes;
  j["cast"] = {{"dtype", dtype ? Json(std::string(Name(*dtype))) : Json(nullptr)},
               {"tensors", cast},
               {"overflowed", s.overflowed},
               {"underflowed", s.underflowed},
               {"sign_lost", s.sign_lost},
               {"lossy_tensors", s.tensors}};
  j["warnings"] = warning.empty() ? Json::array() : Json::array({warning});
  j["notes"] = notes;
  PrintJson(ExactStdout(), j);
}

}  // namespace

void AddConvertCommands(CLI::App& app, int* exit_code) {
  static std::string src, dst, to, dtype, compression = "stored", a_path, b_path, max_shard_size;
  static std::vector<std::string> keys, exclude, cast_keys, metadata, renames;
  static bool dedupe_tied = false;
  static uint64_t vocab = 0;
  static bool json = false, sync = false, allow_expand = false, drop_values = false;
  static bool keep_unknown = false, drop_unknown = false, dequantize = false;
  static PolicyFlags convert_policy, diff_policy;
  static double rtol = 0, atol = 0;

  auto* convert = app.add_subcommand("convert", "Convert between formats: .pt, tensordict, .tdz, .psk.d, .safetensors, .npy, .npz, .gguf (--to)");
  convert->add_option("src", src, "Any file or directory trove reads")->required();
  convert->add_option("dst", dst, "Output; its format comes from its name unless --to is given")->required();
  std::vector<std::string> writable;
  for (const FormatDriver* driver : FormatDrivers()) {
    if (driver->write != nullptr) writable.emplace_back(driver->format.name());
  }
  convert->add_option("--to", to, "Output format (default: told by DST's name)")->check(CLI::IsMember(writable));
  convert->add_option("--keys", keys, "Keep only tensors whose key path matches (glob; repeatable)");
  convert->add_option("--exclude", exclude, "Drop the tensors whose key path matches (glob; repeatable)");
  convert->add_option("--rename", renames,
                      "FROM=TO: rename tensors whose key path starts with FROM, or matches FROM with one '*' (TO's '*' "
                      "takes what it matched); the first rule that matches applies (repeatable)");
  convert->add_flag("--dedupe-tied", dedupe_tied,
                    "Write tied tensors (views of the same bytes, as tied embeddings) once, as save_model does: the "
                    "first is kept, the others dropped and listed (.safetensors metadata: dropped_tied)");
  convert->add_option("--dtype", dtype, "Cast floating weights to float16 (half, fp16), bfloat16 (bf16), float32 or float64")
      ->check(NonEmptyCheck());
  convert->add_option("--cast-keys", cast_keys,
                      "The floating tensors --dtype casts (glob; repeatable). Default: all but optimizer state and step counters");
  convert->add_option("--vocab", vocab, ".psk.d: N of idx[N] for integer leaves (default: max + 1)")
      ->check(WholeNumberCheck(1, std::numeric_limits<uint64_t>::max()));
  convert->add_option("--compression", compression, ".tdz: stored (default), deflate, bzip2, lzma")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kZipMethodNames), std::end(kZipMethodNames))));
  AddPolicyFlags(convert, convert_policy);
  auto* keep_flag = convert->add_flag("--keep-unknown", keep_unknown,
                                      ".pt: write objects of classes trove does not know back as they were read (else an "
                                      "error lists them)");
  convert->add_flag("--drop-unknown", drop_unknown,
                    "Leave out objects of classes trove does not know, and what they hold (a note lists them)")
      ->excludes(keep_flag);
  convert->add_flag("--dequantize", dequantize,
                    "Quantized tensors become float32 tensors of their values (else only .pt takes them, quantized)");
  convert->add_flag("--sync", sync, kSyncFlagHelp);
  convert->add_flag("--allow-expand", allow_expand,
                    "Write what expands far beyond its stored bytes anyway: stride-0 views and storages shared by many keys, written whole into .tdz, tensordict, .safetensors or .psk.d; compressed storages inflating like a decompression bomb (kMaxInflateRatio)");
  convert->add_option("--metadata", metadata, ".safetensors: KEY=VALUE for the header's __metadata__ (repeatable)");
  convert->add_option("--max-shard-size,--shard-size", max_shard_size,
                      "Write DST as a directory of shards and an index, e.g. 5GB, 500MiB: safetensors shards, or .pt "
                      "shards with --to pt; for DST.gguf, a split model DST-00001-of-0000N.gguf... as llama.cpp's "
                      "gguf-split; for DST.psk.d, shards DST-00000.psk.d... and a manifest DST.json, as presk data's "
                      "--shard-size")
      ->check(NonEmptyCheck());
  convert->add_flag("--drop-values", drop_values, ".safetensors .gguf .npy .npz .psk.d: leave out values other than tensors (else an error lists them)");
  static bool convert_json = false;
  convert->add_flag("--json", convert_json, "What was written, as one JSON object on stdout (docs/json.md)");
  AddThreadsOption(convert);
  AddIoOption(convert);
  convert->footer("The output appears only when complete. An existing output is replaced (atomically) only when "
                  "it is what convert writes there: a file for a file format (DST may be SRC: converted in place), "
                  "a directory of a tensordict's files (or an empty one) for --to tensordict. --max-shard-size "
                  "writes its shards and index into DST, with the source's config.json and generation_config.json "
                  "unless DST has its own, and leaves every other file there (tokenizer, README...). "
                  "trove never deletes a file it did not write.\nExamples:\n"
                  "  trove convert model.pt model.tdz\n"
                  "  trove convert model.pt out --to tensordict --keys 'encoder/**'\n"
                  "  trove convert model.pt half.pt --dtype bfloat16\n"
                  "  trove convert ckpt.pt model.safetensors --keys 'state_dict/**' --rename 'state_dict/model.=' --dedupe-tied");
  convert->callback([exit_code] {
    ConvertOptions opts;
    opts.keys = keys;
    opts.exclude = exclude;
    opts.cast_keys = cast_keys;
    opts.compression = ZipMethodFromName(compression);
    opts.read.pickle_policy = convert_policy.policy();
    opts.keep_unknown = keep_unknown;
    opts.drop_unknown = drop_unknown;
    opts.dequantize = dequantize;
    opts.durability = DurabilityFromSyncFlag(sync);
    opts.allow_expand = allow_expand;
    if (vocab) opts.vocab = vocab;
    opts.drop_values = drop_values;
    opts.dedupe_tied = dedupe_tied;
    for (const std::string& r : renames) {
      const size_t eq = r.find('=');
      if (eq == std::string::npos || eq == 0) Fail(ErrorCode::kUsage, "--rename '" + r + "': give FROM=TO (TO may be empty)");
      const std::string from = r.substr(0, eq), to_text = r.substr(eq + 1);
      opts.renames.emplace_back(from, to_text);
    }
    // Shards are safetensors unless --to says pt: what a model directory on the Hub holds. A
    // format that writes its own parts (GGUF's split models) is chosen by --to or the name.
    bool own_parts_by_name = false;
    if (to.empty() && !max_shard_size.empty()) {
      for (const FormatDriver* driver : FormatDrivers()) {
        for (std::string_view ext : driver->extensions) own_parts_by_name |= driver->writes_own_parts && dst.ends_with(ext);
      }
    }
    const std::string target_name = !max_shard_size.empty() && to.empty() && !own_parts_by_name ? "safetensors" : to;
    if (!max_shard_size.empty()) {
      const FormatDriver* chosen = FindFormatDriver(TargetFormat(dst, target_name));
      if (target_name != "safetensors" && target_name != "pt" && !(chosen != nullptr && chosen->writes_own_parts)) {
        Fail(ErrorCode::kUsage, "--max-shard-size writes safetensors or pt shards, a split GGUF model or .psk.d shards, "
                                "not --to " + target_name);
      }
      opts.max_shard_bytes = ParseShardSize(max_shard_size);
    }
    for (const std::string& m : metadata) {
      const size_t eq = m.find('=');
      if (eq == std::string::npos || eq == 0) Fail(ErrorCode::kUsage, "--metadata takes KEY=VALUE (not '" + m + "')");
      const std::string key = m.substr(0, eq);
      // Two values for one key: which one the user meant is not for trove to guess.
      for (const auto& given : opts.metadata) {
        if (given.first == key) Fail(ErrorCode::kUsage, "--metadata gives '" + key + "' twice ('" + given.second + "', '" + m.substr(eq + 1) + "')");
      }
      opts.metadata.emplace_back(key, m.substr(eq + 1));
    }
    static std::vector<std::string> notes;
    notes.clear();
    opts.note = [](const std::string& text) {
      notes.push_back(text);
      std::cerr << "trove: note: " << EscapeForDisplay(dst) << ": " << EscapeForDisplay(text, DisplayEscape::kLine) << '\n';
    };
    if (!dtype.empty()) {
      auto d = DTypeFromName(dtype);
      if (!d) {
        Fail(ErrorCode::kUsage, "unknown dtype '" + dtype + "' (--dtype takes float16/half/fp16, bfloat16/bf16, "
                                "float32/float/fp32 or float64/double/fp64)");
      }
      opts.floating_dtype = *d;
    }
    Format target = TargetFormat(dst, target_name);
    // Refused before anything is read (the writer checks again when it starts).
    {
      SourceGuard source(src, InPlace::kAllowed);
      const FormatDriver* driver = FindFormatDriver(target);
      const bool tree = driver != nullptr && driver->writes_directory && !opts.max_shard_bytes;
      const bool own_parts = driver != nullptr && driver->writes_own_parts && opts.max_shard_bytes;
      // Own parts go beside the destination's name, as files of its directory (the writer checks it).
      if (!own_parts) {
        CheckDestination(dst, tree ? OutputKind::kTree : opts.max_shard_bytes ? OutputKind::kFilesInDirectory : OutputKind::kFile,
                         tree ? driver->owns_file : nullptr);
      }
    }
    // A source truncated by another program while we copy it: an error (the output never
    // appears, as for any failed write), not a SIGBUS death.
    const auto started = std::chrono::steady_clock::now();
    RunGuardingTruncation([&] {
      Document doc = OpenWarning(src, opts.read);
      size_t floating = 0;
      for (const auto& t : doc.tensors) {
        const DType d = t.view->dtype;
        floating += d == DType::kFloat16 || d == DType::kBFloat16 || d == DType::kFloat32 || d == DType::kFloat64;
      }
      const size_t cast = ApplyConvertOptions(doc, opts);
      if (opts.floating_dtype && cast < floating && cast_keys.empty()) {
        opts.note(fmt::format("--dtype cast {} of {} floating tensors; optimizer state and step counters keep their "
                              "dtype (--cast-keys GLOB chooses)", cast, floating));
      }
      {
        Progress progress;  // its line is erased before the closing line
        opts.progress = progress.Callback();
        ConvertDocument(doc, dst, target, opts);
      }
      ReportConversion(doc, src, dst, target, opts.floating_dtype, cast, notes, convert_json, started);
    });
    *exit_code = kExitOk;
  });

  static std::string sort = "change";
  static uint64_t top = 0;
  static std::vector<std::string> diff_keys, diff_exclude, strip_both, strip_a, strip_b;
  static bool ignore_dtype = false, diff_stat = false, name_only = false, diff_tsv = false, no_pager = false;
  auto* diff = app.add_subcommand("diff", "Compare two files in any formats (exit 1 when they differ)");
  diff->add_option("a", a_path, "First file")->required();
  diff->add_option("b", b_path, "Second file")->required();
  diff->add_flag("--json", json, "One JSON object for scripts");
  diff->add_option("--rtol", rtol, "Relative tolerance: |a-b| <= atol + rtol*|b| counts as equal")->check(ToleranceCheck());
  diff->add_option("--atol", atol, "Absolute tolerance")->check(ToleranceCheck());
  diff->add_option("--sort", sort,
                   "Order of the rows: change (the default: shape changes, then largest ||a-b||/||a||, then tensors "
                   "that were all zeros), "
                   "file (A's order) or key")
      ->check(CLI::IsMember({"file", "key", "change"}));
  auto* stat_flag = diff->add_flag("--stat", diff_stat,
                                   "One line per changed tensor with a bar of its change (log scale), then the summary");
  auto* names_flag = diff->add_flag("--name-only", name_only, "Only the keys that differ (only in A or B, changed), one per line");
  auto* tsv_flag = diff->add_flag("--tsv", diff_tsv, "The table tab-separated, numbers exact, for scripts");
  stat_flag->excludes(names_flag)->excludes(tsv_flag);
  names_flag->excludes(tsv_flag);
  AddThreadsOption(diff);
  AddIoOption(diff);
  AddNoPagerFlag(diff, no_pager);
  diff->add_option("--top", top, "Show only the first N rows after sorting (and say how many were left out)")
      ->check(WholeNumberCheck(0, std::numeric_limits<uint64_t>::max()));
  diff->add_option("--keys", diff_keys, "Compare only tensors whose key path matches (glob; repeatable)");
  diff->add_option("--exclude", diff_exclude, "Leave out the tensors whose key path matches (glob; repeatable)");
  diff->add_option("--strip-prefix", strip_both,
                   "Remove PREFIX from the start of keys on both sides before matching them ('model' turns "
                   "model/blocks.0.w and model.blocks.0.w into blocks.0.w; repeatable)");
  diff->add_option("--strip-prefix-a", strip_a, "The same, for A's keys only");
  diff->add_option("--strip-prefix-b", strip_b, "The same, for B's keys only");
  AddPolicyFlags(diff, diff_policy);
  diff->add_flag("--ignore-dtype", ignore_dtype,
                 "A dtype change alone is not a difference: equal when the values agree (within the tolerances)");
  diff->footer("Tensors are compared by value in float64, across dtypes too (float32 against its bfloat16 cast: "
               "the error of the cast); only a shape change or real against complex/quantized is not comparable. "
               "Rows are ranked by rel. L2 = ||a-b||/||a||; tensors that were all zeros (a zero-initialised bias "
               "or LoRA B, whose relative change is infinite) come after them, marked 'from 0', by ||b||. "
               "--keys/--exclude see the keys after --strip-prefix.\n"
               "Exit status: 0 equal (within tolerances), 1 different, 2 error.\nExamples:\n"
               "  trove diff run1.pt run2.tdz --rtol 1e-6\n"
               "  trove diff model.pt model-bf16.safetensors --strip-prefix model --sort change --top 10");
  diff->callback([exit_code] {
    DiffOptions o;
    o.rtol = rtol;
    o.atol = atol;
    o.ignore_dtype = ignore_dtype;
    o.read.pickle_policy = diff_policy.policy();
    o.strip_prefix_a = strip_a;
    o.strip_prefix_b = strip_b;
    o.strip_prefix_a.insert(o.strip_prefix_a.end(), strip_both.begin(), strip_both.end());
    o.strip_prefix_b.insert(o.strip_prefix_b.end(), strip_both.begin(), strip_both.end());
    if (!diff_keys.empty() || !diff_exclude.empty()) {
      o.select = [](const std::string& key) {
        if (!diff_keys.empty() && std::none_of(diff_keys.begin(), diff_keys.end(), [&](const auto& g) { return KeyMatches(g, key); }))
          return false;
        return std::none_of(diff_exclude.begin(), diff_exclude.end(), [&](const auto& g) { return KeyMatches(g, key); });
      };
    }
    // Opt-in tensors only when --keys names them (as convert and stats take them), never through
    // --exclude alone.
    if (!diff_keys.empty()) o.opt_in = o.select;
    DiffReport r;
    {
      Progress progress(!json);  // erased before the table
      o.progress = progress.Callback();
      RunGuardingTruncation([&] {
        Document a = OpenWarning(a_path, o.read), b = OpenWarning(b_path, o.read);
        r = Diff(a, b, o);
      });
    }
    if (r.tensors_skipped > 0 && r.tensors.empty() && r.only_in_a.empty() && r.only_in_b.empty())
      Fail(ErrorCode::kUsage, NothingSelectedText(diff_keys, diff_exclude, r.tensors_skipped) + " in either file");
    // Categories, one per common tensor.
    enum Cat { kNotComparable, kDiffers, kClose, kEqualValues, kIdentical };
    auto cat = [](const TensorDiff& t) {
      if (!t.comparable) return kNotComparable;
      if (!t.within_tolerance) return kDiffers;
      if (t.elements_differing > 0) return kClose;
      return t.identical ? kIdentical : kEqualValues;
    };
    size_t counts[5] = {};
    for (const auto& t : r.tensors) ++counts[cat(t)];
    // The ranking (--sort change): shape changes first, then ||a-b||/||a|| largest first, then the
    // tensors that were all zeros (a zero-initialised bias or LoRA B: a relative change is
    // infinite there and would hide every real one), by ||b|| largest first, then the unchanged.
    auto was_zero = [](const TensorDiff& t) { return t.comparable && t.l2 > 0 && t.l2_a == 0; };
    auto change = [](const TensorDiff& t) {
      const double rel = t.relative();
      return std::isnan(rel) ? INFINITY : rel;
    };
    std::vector<const TensorDiff*> rows;
    for (const auto& t : r.tensors)
      if (json || cat(t) != kIdentical) rows.push_back(&t);
    if (sort == "key") {
      std::stable_sort(rows.begin(), rows.end(), [](auto* x, auto* y) { return x->key < y->key; });
    } else if (sort == "change") {
      std::stable_sort(rows.begin(), rows.end(), [&](auto* x, auto* y) {
        // Shape changes, changed tensors, tensors that were all zeros, unchanged ones.
        auto group = [&](const TensorDiff& t) { return !t.comparable ? 0 : t.l2 == 0 ? 3 : was_zero(t) ? 2 : 1; };
        if (group(*x) != group(*y)) return group(*x) < group(*y);
        if (was_zero(*x)) return x->l2 > y->l2;
        return change(*x) > change(*y);
      });
    }
    std::vector<std::string> only_a = r.only_in_a, only_b = r.only_in_b;
    if (sort == "key") {
      std::sort(only_a.begin(), only_a.end());
      std::sort(only_b.begin(), only_b.end());
    }
    auto cut = [](auto& v) -> size_t {
      if (top == 0 || v.size() <= top) return 0;
      const size_t left = v.size() - top;
      v.resize(top);
      return left;
    };
    const size_t rows_left = cut(rows), only_a_left = cut(only_a), only_b_left = cut(only_b);
    // The element with the largest difference, as an index into A's shape.
    auto max_index = [](const TensorDiff& t) {
      std::vector<uint64_t> index(t.a_shape.size());
      uint64_t rest = t.max_abs_index;
      for (size_t d = t.a_shape.size(); d-- > 0;) {
        const uint64_t n = t.a_shape[d] > 0 ? static_cast<uint64_t>(t.a_shape[d]) : 1;
        index[d] = rest % n;
        rest /= n;
      }
      return index;
    };
    auto relative_json = [](const TensorDiff& t) -> Json {
      if (t.l2 == 0) return 0.0;
      return t.l2_a > 0 ? Json(t.l2 / t.l2_a) : Json(nullptr);
    };
    OutputPager pager(!json && !no_pager);
    if (json) {
      Json j = Envelope("diff");
      j["a"] = a_path;
      j["b"] = b_path;
      j["equal"] = r.equal();
      j["only_in_a"] = only_a;
      j["only_in_b"] = only_b;
      Json ts = Json::array();
      for (const TensorDiff* tp : rows) {
        const TensorDiff& t = *tp;
        Json tj{{"key", t.key},
                {"a", {{"dtype", t.a_dtype}, {"shape", t.a_shape}}},
                {"b", {{"dtype", t.b_dtype}, {"shape", t.b_shape}}},
                {"comparable", t.comparable},
                {"dtype_changed", t.dtype_changed()}};
        if (t.comparable) {
          tj["identical"] = t.identical;
          tj["within_tolerance"] = t.within_tolerance;
          tj["elements"] = t.elements;
          if (!t.identical) {
            tj["max_abs"] = t.max_abs;
            tj["l2"] = t.l2;
            tj["relative_l2"] = relative_json(t);
            tj["elements_differing"] = t.elements_differing;
            if (t.elements_differing > 0) tj["max_abs_at"] = max_index(t);
            tj["from_zero"] = was_zero(t);
          }
        }
        ts.push_back(std::move(tj));
      }
      j["tensors"] = ts;
      Json vs = Json::array();
      for (const auto& v : r.values) {
        Json vj{{"key", v.key}, {"change", v.a == nullptr ? "only_in_b" : v.b == nullptr ? "only_in_a" : "changed"}};
        if (v.a) vj["a"] = ValueJson(v.a);
        if (v.b) vj["b"] = ValueJson(v.b);
        vs.push_back(std::move(vj));
      }
      j["values"] = vs;
      j["summary"] = {{"common", r.tensors.size()},          {"differ", counts[kDiffers]},
                      {"within_tolerance", counts[kClose]}, {"equal_values", counts[kEqualValues]},
                      {"not_comparable", counts[kNotComparable]}, {"identical", counts[kIdentical]},
                      {"only_in_a", r.only_in_a.size()},    {"only_in_b", r.only_in_b.size()},
                      {"values", r.values.size()},          {"skipped", r.tensors_skipped}};
      j["left_out"] = {{"tensors", rows_left}, {"only_in_a", only_a_left}, {"only_in_b", only_b_left}};
      PrintJson(ExactStdout(), j);
    } else if (name_only) {
      // What differs, as git diff --name-only lists it: keys in one file only, tensors that are not
      // equal within the tolerances (a dtype change too, unless --ignore-dtype), changed values.
      for (const auto& k : only_a) std::cout << EscapeForDisplay(k) << '\n';
      for (const auto& k : only_b) std::cout << EscapeForDisplay(k) << '\n';
      for (const TensorDiff* tp : rows) {
        const Cat c = cat(*tp);
        if (c == kDiffers || c == kNotComparable || ((c == kEqualValues || c == kClose) && tp->dtype_changed() && !ignore_dtype))
          std::cout << EscapeForDisplay(tp->key) << '\n';
      }
      for (const auto& v : r.values) std::cout << EscapeForDisplay(v.key) << '\n';
    } else {
      auto more = [](size_t left, const char* what) {
        if (left) std::cout << fmt::format("... {} more {} not shown (--top {})\n", Thousands(left), what, top);
      };
      for (const auto& k : only_a) std::cout << "only in A: " << EscapeForDisplay(k) << '\n';
      more(only_a_left, "only in A");
      for (const auto& k : only_b) std::cout << "only in B: " << EscapeForDisplay(k) << '\n';
      more(only_b_left, "only in B");
      // People read 4 significant digits; --tsv gives scripts every digit.
      auto number = [](double v) { return diff_tsv ? DoubleText(v) : RoundedFloatText(v, 4); };
      auto rel_text = [&](const TensorDiff& t) {
        if (was_zero(t)) return std::string("(a = 0)");
        const double c = t.relative();
        return std::isfinite(c) ? number(c) : std::string("inf");
      };
      auto at_text = [&](const TensorDiff& t) {
        if (t.elements_differing == 0) return std::string("-");
        return "[" + fmt::format("{}", fmt::join(max_index(t), ", ")) + "]";
      };
      auto percent_text = [&](const TensorDiff& t) {
        if (t.elements == 0) return std::string("-");
        return number(100.0 * static_cast<double>(t.elements_differing) / static_cast<double>(t.elements)) + "%";
      };
      const bool colour = !diff_tsv && StdoutTakesColour();
      // Coloured rows carry trove's own SGR sequences, which the escaping net under std::cout would
      // show as text: they go to the exact stream (the cells were escaped when added to the table).
      auto PrintTable = [](const Table& table, bool aligned, const std::string& indent, bool coloured) {
        if (!coloured) return table.Print(std::cout, aligned, indent);
        std::cout.flush();
        table.Print(ExactStdout(), aligned, indent, true);
        ExactStdout().flush();
      };
      auto sgr = [](Cat c) -> std::string {
        switch (c) {
          case kDiffers: return "31";        // red
          case kNotComparable: return "35";  // magenta
          case kClose: return "33";          // yellow
          default: return "";
        }
      };
      if (diff_stat) {
        // git diff --stat's shape: a bar per changed tensor, its length the change on a log scale
        // from 1e-7 (a float32 rounding) to 1 (a whole change), so that small and large changes
        // both show.
        const size_t columns = TerminalColumns();
        const size_t bar_width = columns >= 100 ? 40 : 20;
        Table table({"tensor", "rel. L2", "change (log scale, 1e-7 to 1)"});
        for (const TensorDiff* tp : rows) {
          const TensorDiff& t = *tp;
          const Cat c = cat(t);
          if (c == kIdentical) continue;
          std::string bar;
          if (c == kNotComparable) {
            bar = "shape " + ShapeString(t.a_shape) + " -> " + ShapeString(t.b_shape);
          } else if (was_zero(t)) {
            bar = "was all zeros, now ||b|| " + number(t.l2);
          } else {
            const double ch = t.relative();
            size_t n = 0;
            if (ch > 0) {
              const double scaled = std::isfinite(ch) ? (std::log10(std::min(ch, 1.0)) + 7.0) / 7.0 : 1.0;
              n = std::max<size_t>(1, static_cast<size_t>(std::lround(std::clamp(scaled, 0.0, 1.0) * bar_width)));
            }
            for (size_t i = 0; i < n; ++i) bar += "\u2588";
            if (n == 0) bar = t.dtype_changed() ? "(dtype only)" : "";
          }
          table.Add({t.key, c == kNotComparable ? "-" : rel_text(t), bar}, sgr(c));
        }
        if (table.size() > 0) PrintTable(table, true, " ", colour);
      } else {
        Table table({"", "tensor", "dtype", "max|a-b|", "at", "rel. L2", "changed"});
        for (const TensorDiff* tp : rows) {
          const TensorDiff& t = *tp;
          const Cat c = cat(t);
          const std::string dtypes = t.dtype_changed() ? t.a_dtype + " -> " + t.b_dtype : t.a_dtype;
          switch (c) {
            case kIdentical: break;
            case kNotComparable:
              table.Add({"shape", t.key, t.a_dtype + ShapeString(t.a_shape) + " -> " + t.b_dtype + ShapeString(t.b_shape), "-", "-",
                         "-", "-"},
                        sgr(c));
              break;
            case kEqualValues: table.Add({"dtype", t.key, dtypes, "0", "-", "0", "0%"}, sgr(c)); break;
            default:
              table.Add({c == kClose ? "close" : was_zero(t) ? "from 0" : "differs", t.key, dtypes, number(t.max_abs), at_text(t), rel_text(t), percent_text(t)},
                        sgr(c));
          }
        }
        if (table.size() > 0) PrintTable(table, !diff_tsv, diff_tsv ? "" : "  ", colour);
      }
      more(rows_left, "tensor rows");
      for (const auto& v : r.values)
        std::cout << "value:     " << EscapeForDisplay(v.key) << ": " << (v.a ? v.a_text : "(absent)") << " -> "
                  << (v.b ? v.b_text : "(absent)") << '\n';  // the texts are Python-like reprs, escaped (trove/diff.h)
      std::vector<std::string> parts;
      const std::pair<Cat, const char*> names[] = {{kDiffers, "differ"},
                                                   {kClose, "within tolerance"},
                                                   {kEqualValues, "equal in value, another dtype or bytes"},
                                                   {kNotComparable, "not comparable"},
                                                   {kIdentical, "identical"}};
      for (const auto& [c, name] : names)
        if (counts[c]) parts.push_back(Thousands(counts[c]) + " " + name);
      // The counts that are not zero, so that the line fits a terminal.
      std::string summary = std::string(r.equal() ? "equal" : "different") + ": " + Thousands(r.tensors.size()) +
                            " common tensors" + (parts.empty() ? "" : " (" + fmt::format("{}", fmt::join(parts, ", ")) + ")");
      if (!r.only_in_a.empty()) summary += ", " + Thousands(r.only_in_a.size()) + " only in A";
      if (!r.only_in_b.empty()) summary += ", " + Thousands(r.only_in_b.size()) + " only in B";
      if (!r.values.empty()) summary += ", " + Thousands(r.values.size()) + " value difference(s)";
      if (r.tensors_skipped) summary += ", " + Thousands(r.tensors_skipped) + " tensors not selected (--keys/--exclude)";
      std::cout << summary << '\n';
    }
    *exit_code = r.equal() ? kExitOk : kExitFindings;
  });
}

}  // namespace trove::cli
