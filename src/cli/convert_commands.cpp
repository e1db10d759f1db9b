// trove convert / diff.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/value_printer.h"
#include "trove/convert.h"
#include "trove/open.h"
#include "trove/safetensors.h"
#include "trove/diff.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"

namespace trove::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string DoubleText(double d) { return fmt::format("{:.6g}", d); }

}  // namespace

void AddConvertCommands(CLI::App& app, int* exit_code) {
  static std::string src, dst, to, dtype, compression = "stored", a_path, b_path, max_shard_size;
  static std::vector<std::string> keys, exclude, cast_keys, metadata;
  static uint64_t vocab = 0;
  static bool json = false, permissive = false, sync = false, force = false, allow_expand = false, drop_values = false;
  static double rtol = 0, atol = 0;

  auto* convert = app.add_subcommand("convert", "Convert between .pt, tensordict directories, .tdz, .psk.d and .safetensors");
  convert->add_option("src", src, "Any file or directory trove reads")->required();
  convert->add_option("dst", dst, "Output; its format comes from its name unless --to is given")->required();
  convert->add_option("--to", to, "pt | tensordict | tdz | pskd | safetensors")
      ->check(CLI::IsMember({"pt", "tensordict", "tdz", "pskd", "safetensors"}));
  convert->add_option("--keys", keys, "Keep only tensors whose key path matches (glob; repeatable)");
  convert->add_option("--exclude", exclude, "Drop the tensors whose key path matches (glob; repeatable)");
  convert->add_option("--dtype", dtype, "Cast floating weights to float16 (half, fp16), bfloat16 (bf16), float32 or float64");
  convert->add_option("--cast-keys", cast_keys,
                      "The floating tensors --dtype casts (glob; repeatable). Default: all but optimizer state and step counters");
  convert->add_option("--vocab", vocab, ".psk.d: N of idx[N] for integer leaves (default: max + 1)");
  convert->add_option("--compression", compression, ".tdz: stored (default), deflate, bzip2, lzma")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kZipMethodNames), std::end(kZipMethodNames))));
  convert->add_flag("--permissive", permissive, "Read unknown pickle globals as inert objects (they are not written)");
  convert->add_flag("--sync", sync, kSyncFlagHelp);
  convert->add_flag("--force", force, kForceFlagHelp);
  convert->add_flag("--allow-expand", allow_expand,
                    "Write views that expand far beyond their stored bytes (stride 0) whole into .tdz, tensordict or .psk.d");
  convert->add_option("--metadata", metadata, ".safetensors: KEY=VALUE for the header's __metadata__ (repeatable)");
  convert->add_option("--max-shard-size", max_shard_size,
                      "Write DST as a directory of shards and an index (--to safetensors or pt), e.g. 5GB, 500MiB");
  convert->add_flag("--drop-values", drop_values, ".safetensors: leave out values other than tensors (else an error lists them)");
  convert->footer("The output appears only when complete. An existing output is replaced (atomically) only when\n"
                  "it is what convert writes there: a file for a file format, a tensordict directory (or an empty\n"
                  "one) for --to tensordict; anything else is refused unless --force. Examples:\n"
                  "  trove convert model.pt model.tdz\n"
                  "  trove convert model.pt out --to tensordict --keys 'encoder/**'\n"
                  "  trove convert model.pt half.pt --dtype bfloat16");
  convert->callback([exit_code] {
    ConvertOptions opts;
    opts.keys = keys;
    opts.exclude = exclude;
    opts.cast_keys = cast_keys;
    opts.compression = ZipMethodFromName(compression);
    opts.read.permissive = permissive;
    opts.durability = DurabilityFromSyncFlag(sync);
    opts.replace = ReplaceFromForceFlag(force);
    opts.allow_expand = allow_expand;
    if (vocab) opts.vocab = vocab;
    opts.drop_values = drop_values;
    if (!max_shard_size.empty()) {
      if (to != "safetensors" && to != "pt") Fail(ErrorCode::kUsage, "--max-shard-size needs --to safetensors or --to pt");
      opts.max_shard_bytes = ParseShardSize(max_shard_size);
    }
    for (const std::string& m : metadata) {
      const size_t eq = m.find('=');
      if (eq == std::string::npos || eq == 0) Fail(ErrorCode::kUsage, "--metadata takes KEY=VALUE (not '" + m + "')");
      opts.metadata.emplace_back(m.substr(0, eq), m.substr(eq + 1));
    }
    opts.note = [](const std::string& text) { std::cerr << "trove: note: " << dst << ": " << text << '\n'; };
    if (!dtype.empty()) {
      auto d = DTypeFromName(dtype);
      if (!d) {
        Fail(ErrorCode::kUsage, "unknown dtype '" + dtype + "' (--dtype takes float16/half/fp16, bfloat16/bf16, "
                                "float32/float/fp32 or float64/double/fp64)");
      }
      opts.floating_dtype = *d;
    }
    Format target = TargetFormat(dst, to);
    // Refused before anything is read (the writer checks again when it starts).
    {
      SourceGuard source(src);
      const bool directory = target == Format::kTensordictDir || opts.max_shard_bytes.has_value();
      CheckDestination(dst, directory ? OutputKind::kDirectory : OutputKind::kFile, opts.replace);
    }
    // A source truncated by another program while we copy it: an error (the output never
    // appears, as for any failed write), not a SIGBUS death.
    RunGuardingTruncation([&] {
      Document doc = Open(src, opts.read);
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
      Progress progress;
      opts.progress = progress.Callback();
      ConvertDocument(doc, dst, target, opts);
    });
    *exit_code = kExitOk;
  });

  auto* diff = app.add_subcommand("diff", "Compare two files in any formats (exit 1 when they differ)");
  diff->add_option("a", a_path, "First file")->required();
  diff->add_option("b", b_path, "Second file")->required();
  diff->add_flag("--json", json, "One JSON object for scripts");
  diff->add_option("--rtol", rtol, "Relative tolerance: |a-b| <= atol + rtol*|b| counts as equal");
  diff->add_option("--atol", atol, "Absolute tolerance");
  diff->footer("Exit status: 0 equal (within tolerances), 1 different, 2 error.\nExample:\n  trove diff run1.pt run2.tdz --rtol 1e-6");
  diff->callback([exit_code] {
    DiffOptions o;
    o.rtol = rtol;
    o.atol = atol;
    DiffReport r;
    RunGuardingTruncation([&] {
      Document a = Open(a_path, o.read), b = Open(b_path, o.read);
      r = Diff(a, b, o);
    });
    if (json) {
      Json j{{"a", a_path}, {"b", b_path}, {"equal", r.equal()}, {"only_in_a", r.only_in_a}, {"only_in_b", r.only_in_b}};
      Json ts = Json::array();
      for (const auto& t : r.tensors) {
        Json tj{{"key", t.key}};
        if (!t.comparable) {
          tj["a"] = {{"dtype", t.a_dtype}, {"shape", t.a_shape}};
          tj["b"] = {{"dtype", t.b_dtype}, {"shape", t.b_shape}};
        } else {
          tj["identical"] = t.identical;
          tj["within_tolerance"] = t.within_tolerance;
          if (!t.identical) {
            tj["max_abs"] = DoubleJson(t.max_abs);
            tj["l2"] = DoubleJson(t.l2);
            tj["relative_l2"] = t.l2_a > 0 ? DoubleJson(t.l2 / t.l2_a) : Json(nullptr);
            tj["elements_differing"] = t.elements_differing;
          }
        }
        ts.push_back(std::move(tj));
      }
      j["tensors"] = ts;
      Json vs = Json::array();
      for (const auto& v : r.values) vs.push_back({{"key", v.key}, {"a", v.a}, {"b", v.b}});
      j["values"] = vs;
      std::cout << j.dump(2) << '\n';
    } else {
      for (const auto& k : r.only_in_a) std::cout << "only in A: " << k << '\n';
      for (const auto& k : r.only_in_b) std::cout << "only in B: " << k << '\n';
      size_t identical = 0;
      for (const auto& t : r.tensors) {
        if (!t.comparable) {
          std::cout << "changed:   " << t.key << ": " << t.a_dtype << ShapeString(t.a_shape) << " -> " << t.b_dtype
                    << ShapeString(t.b_shape) << '\n';
        } else if (t.identical) {
          ++identical;
        } else {
          std::cout << (t.within_tolerance ? "close:     " : "differs:   ") << t.key << ": max|a-b| " << DoubleText(t.max_abs)
                    << ", ||a-b|| " << DoubleText(t.l2) << ", ||a-b||/||a|| "
                    << (t.l2_a > 0 ? DoubleText(t.l2 / t.l2_a) : std::string("n/a")) << " (" << t.elements_differing
                    << " elements)\n";
        }
      }
      for (const auto& v : r.values)
        std::cout << "value:     " << v.key << ": " << (v.a.empty() ? "(absent)" : v.a) << " -> " << (v.b.empty() ? "(absent)" : v.b) << '\n';
      std::cout << (r.equal() ? "equal" : "different") << ": " << r.tensors.size() << " common tensors (" << identical
                << " identical), " << r.only_in_a.size() << " only in A, " << r.only_in_b.size() << " only in B, "
                << r.values.size() << " value difference(s)\n";
    }
    *exit_code = r.equal() ? kExitOk : kExitFindings;
  });
}

}  // namespace trove::cli
