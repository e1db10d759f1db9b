// trove stats: per-tensor figures (min, max, mean, std, zeros, NaN, Inf...), histograms and the
// --check-finite gate, over any file trove reads.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>

#include "cli/commands.h"
#include "core/tensor_role.h"
#include "core/count_text.h"
#include "cli/escaped_output.h"
#include "cli/json_output.h"
#include "cli/pager.h"
#include "cli/progress.h"
#include "cli/stats_report.h"
#include "cli/suggest.h"
#include "cli/table.h"
#include "core/display_escape.h"
#include "core/float_text.h"
#include "trove/convert.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/shared_bytes.h"
#include "trove/tensor_stats.h"

namespace trove::cli {
namespace {

// Two keys naming one view (tied weights) share their figures.
// (The storage's identity, not its data(): that would inflate a compressed leaf whole.)
using ViewIdentity = std::tuple<std::pair<const void*, uint64_t>, uint64_t, DType, ByteOrder, int64_t,
                                std::vector<int64_t>, std::vector<int64_t>>;

ViewIdentity IdentityOf(const TensorView& v) {
  return {v.storage.identity(), v.storage.size(), v.dtype, v.byte_order, v.storage_offset, v.shape, v.strides};
}

// `keys` as cat takes them: an exact key first, else a glob (* ** ?) that must match a tensor;
// `globs` (--keys) filter together and must select one tensor at least.
std::vector<const NamedTensor*> Select(const Document& doc, const std::vector<std::string>& keys,
                                       const std::vector<std::string>& globs) {
  std::vector<const NamedTensor*> out;
  std::vector<std::string> patterns;  // positional keys that name no tensor but hold * or ?
  for (const auto& k : keys) {
    if (const NamedTensor* t = doc.FindTensor(k)) {
      if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
      continue;
    }
    if (k.find_first_of("*?") == std::string::npos) {
      std::vector<std::string> names;
      for (const auto& t : doc.tensors) names.push_back(t.key);
      const std::string hint = DidYouMean(Suggest(k, names));
      Fail(ErrorCode::kNotFound, doc.path + ": no tensor '" + EscapeForDisplay(k) + "'" +
                                     (hint.empty() ? " (trove info lists the keys)" : hint));
    }
    bool any = false;
    for (const auto& t : doc.tensors) {
      if (!KeyMatches(k, t.key)) continue;
      any = true;
      if (std::find(out.begin(), out.end(), &t) == out.end()) out.push_back(&t);
    }
    if (!any) Fail(ErrorCode::kNotFound, doc.path + ": no tensor matching '" + EscapeForDisplay(k) + "' (trove info lists the keys)");
  }
  const size_t named = out.size();
  for (const auto& t : doc.tensors) {
    bool match = keys.empty() && globs.empty() && !doc.IsOptIn(t.key);  // opt-in tensors when asked for
    for (const auto& g : globs) match = match || KeyMatches(g, t.key);
    if (match && std::find(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(named), &t) == out.begin() + static_cast<std::ptrdiff_t>(named))
      out.push_back(&t);  // a key also named explicitly is listed once
  }
  if (out.empty() && !globs.empty()) Fail(ErrorCode::kUsage, NothingSelectedText(globs, {}, doc.tensors.size()));
  return out;
}

}  // namespace

StatsReport ComputeStatsReport(const Document& doc, const std::vector<const NamedTensor*>& selected,
                               const StatsOptions& options) {
  StatsReport r;
  r.path = doc.path;
  r.format = doc.format;
  std::map<ViewIdentity, size_t> seen;  // -> index into views (the same for every key of one view)
  std::vector<const TensorView*> views;
  // Names are unique over the whole document (VerbatimNames), not only over the selected keys.
  std::unordered_map<const NamedTensor*, std::string> names_of;
  {
    std::vector<std::string> keys;
    keys.reserve(doc.tensors.size());
    for (const auto& t : doc.tensors) keys.push_back(t.key);
    std::vector<std::string> verbatim = VerbatimNames(keys);
    for (size_t i = 0; i < doc.tensors.size(); ++i) names_of.emplace(&doc.tensors[i], std::move(verbatim[i]));
  }
  for (const NamedTensor* t : selected) {
    StatsRow row;
    row.key = t->key;
    const auto named = names_of.find(t);
    row.name = named != names_of.end() ? named->second : t->key;
    row.view = t->view;
    row.skipped = StatsUnsupportedReason(*t->view);
    auto [it, inserted] = seen.emplace(IdentityOf(*t->view), views.size());
    row.first = inserted;
    if (inserted) {
      // Parameters as info counts them: not optimizer state, RNG state or integers (core/tensor_role.h).
      if (RoleOf(t->key, *t->view) == TensorRole::kParameter) r.parameters += static_cast<uint64_t>(t->view->numel());
      r.bytes_by_dtype[std::string(Name(t->view->dtype))] += t->view->nbytes();
      if (!row.skipped) views.push_back(t->view);
    }
    row.stats = it->second;
    r.rows.push_back(std::move(row));
  }
  r.distinct = seen.size();
  std::vector<std::string> names;
  for (const auto& row : r.rows)
    if (row.first && !row.skipped) names.push_back(row.name.empty() ? "\"\"" : row.name);
  try {
    r.stats = ComputeStats(std::span<const TensorView* const>(views), options, names);
  } catch (Error& e) {
    e.SetFile(doc.path);  // a truncation names the file already; SetFile keeps it
    throw;
  }
  for (const auto& row : r.rows) {
    if (row.skipped) continue;
    const TensorStats& s = r.stats[row.stats];
    if (s.nan + s.pos_inf + s.neg_inf > 0) r.non_finite.push_back(row.key);
    if (s.count > 0 && s.zeros == s.count) r.all_zero.push_back(row.key);
  }
  return r;
}

namespace {

Json Optional(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

Json HistogramJson(const Histogram& h) {
  if (h.edges.empty()) return nullptr;
  return {{"edges", h.edges}, {"counts", h.counts}};
}

}  // namespace

namespace {

// The shape of the values the figures describe: a ggml block view's in values (its stored last
// dimension counts bytes of blocks).
std::vector<int64_t> ValuesShape(const TensorView& v) {
  return IsBlockDType(v.dtype) && Dequantizable(v) ? CastView(v, DType::kFloat32).shape : v.shape;
}

}  // namespace

Json StatsReportJson(const StatsReport& r, bool histograms) {
  Json tensors = Json::array();
  for (const auto& row : r.rows) {
    const TensorView& v = *row.view;
    Json t{{"key", row.key}, {"name", row.name}, {"dtype", Name(v.dtype)}, {"shape", ValuesShape(v)}};
    if (row.skipped) {
      t["skipped"] = *row.skipped;
      tensors.push_back(std::move(t));
      continue;
    }
    const TensorStats& s = r.stats[row.stats];
    t["count"] = s.count;
    t["finite"] = s.finite;
    t["min"] = Optional(s.min);
    t["max"] = Optional(s.max);
    t["mean"] = Optional(s.mean);
    t["std"] = Optional(s.std);
    t["mean_abs"] = Optional(s.mean_abs);
    t["zeros"] = s.zeros;
    t["nan"] = s.nan;
    t["pos_inf"] = s.pos_inf;
    t["neg_inf"] = s.neg_inf;
    t["subnormal"] = s.subnormal ? Json(*s.subnormal) : Json(nullptr);
    if (histograms) {
      t["histogram"] = HistogramJson(s.histogram);
      t["log10_abs_histogram"] = HistogramJson(s.log10_abs_histogram);
    }
    tensors.push_back(std::move(t));
  }
  Json skipped = Json::array();
  for (const auto& row : r.rows)
    if (row.skipped) skipped.push_back({{"key", row.key}, {"reason", *row.skipped}});
  Json summary{{"tensors", r.rows.size()}, {"distinct_tensors", r.distinct}, {"parameters", r.parameters},
               {"bytes_by_dtype", r.bytes_by_dtype}, {"non_finite", r.non_finite}, {"all_zero", r.all_zero},
               {"skipped", skipped}};
  Json j = Envelope("stats");
  j["path"] = r.path;
  j["format"] = r.format;
  j["summary"] = std::move(summary);
  j["tensors"] = std::move(tensors);
  return j;
}

namespace {

// --precision's top: every digit a float64 needs to read back.
constexpr int kEveryDigit = 17;

// How the table writes a figure: `precision` significant digits (17: the shortest text that reads
// back to the same float64, as --tsv and --json write it).
std::string Number(const std::optional<double>& v, int precision) {
  if (!v) return "-";
  return precision >= kEveryDigit ? FloatText(*v) : RoundedFloatText(*v, precision);
}

// One row of block characters, each bin's height relative to the fullest bin (an empty bin is a
// space, any other at least the lowest block).
std::string Sparkline(const std::vector<uint64_t>& counts) {
  static const char* const kLevels[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  uint64_t top = 0;
  for (uint64_t c : counts) top = std::max(top, c);
  std::string s;
  for (uint64_t c : counts) {
    if (c == 0) { s += ' '; continue; }
    const auto level = static_cast<size_t>(std::min<double>(7, std::floor(static_cast<double>(c) * 8 / static_cast<double>(top + 1))));
    s += kLevels[level];
  }
  return s;
}

// A row's name for people: as the file spells it, "" shown as a pair of quotes.
const std::string& Shown(const StatsRow& row) {
  static const std::string kEmpty = "\"\"";
  return row.name.empty() ? kEmpty : row.name;
}

// One table for people, on a terminal and in a pipe alike (4 significant digits unless asked);
// `tsv`: tab-separated and exact, for scripts.
void PrintReport(const StatsReport& r, bool histograms, int precision, bool tsv) {
  const bool aligned = !tsv;
  if (tsv) precision = kEveryDigit;
  std::cout << EscapeForDisplay(r.path) << ": " << EscapeForDisplay(r.format) << ", " << r.rows.size() << " tensor(s)\n";
  // For people, the nan and inf columns only when a tensor holds one (the summary's non-finite
  // line says so either way): a healthy checkpoint's table then fits 80 columns. --tsv keeps both.
  bool nan_column = tsv, inf_column = tsv;
  for (const auto& row : r.rows) {
    if (row.skipped) continue;
    nan_column |= r.stats[row.stats].nan > 0;
    inf_column |= r.stats[row.stats].pos_inf + r.stats[row.stats].neg_inf > 0;
  }
  std::vector<std::string> header{"key", "dtype", "shape", "min", "max", "mean", "std", "zeros"};
  if (nan_column) header.push_back("nan");
  if (inf_column) header.push_back("inf");
  Table table(std::move(header));
  for (const auto& row : r.rows) {
    const TensorView& v = *row.view;
    const std::string key = Shown(row);
    if (row.skipped) {
      table.Add({key, std::string(Name(v.dtype)), ShapeString(v.shape), "skipped: " + *row.skipped});
      continue;
    }
    const TensorStats& s = r.stats[row.stats];
    std::vector<std::string> cells{key, std::string(Name(v.dtype)), ShapeString(ValuesShape(v)), Number(s.min, precision),
                                   Number(s.max, precision), Number(s.mean, precision), Number(s.std, precision),
                                   std::to_string(s.zeros)};
    if (nan_column) cells.push_back(std::to_string(s.nan));
    if (inf_column) cells.push_back(std::to_string(s.pos_inf + s.neg_inf));
    table.Add(std::move(cells));
  }
  table.Print(std::cout, aligned, aligned ? "  " : "");
  if (histograms) {
    std::cout << "histograms (linear between min and max; log10|x| of the nonzero values)\n";
    Table hist({"key", "linear", "range", "log10|x|", "range"});
    for (const auto& row : r.rows) {
      if (row.skipped || !row.first) continue;
      const TensorStats& s = r.stats[row.stats];
      auto range = [precision](const Histogram& h) {
        return h.edges.empty() ? std::string("-")
                               : "[" + Number(h.edges.front(), precision) + ", " + Number(h.edges.back(), precision) + "]";
      };
      hist.Add({Shown(row), Sparkline(s.histogram.counts), range(s.histogram),
                Sparkline(s.log10_abs_histogram.counts), range(s.log10_abs_histogram)});
    }
    hist.Print(std::cout, aligned, aligned ? "  " : "");
  }
  std::cout << "summary\n";
  auto line = [](const std::string& label, const std::string& value) {
    std::cout << "  " << fmt::format("{:<12} ", label) << value << '\n';
  };
  size_t skipped = 0;
  for (const auto& row : r.rows) skipped += row.skipped.has_value();
  line("tensors", fmt::format("{} ({} distinct{})", r.rows.size(), r.distinct,
                              skipped ? fmt::format(", {} skipped", skipped) : std::string()));
  line("parameters", Thousands(r.parameters));
  // The bytes of each dtype; on a terminal wrapped under the first, at the items' commas.
  const size_t columns = TerminalColumns();
  std::string bytes;
  size_t line_width = 15;  // indent and label
  for (const auto& [dtype, n] : r.bytes_by_dtype) {
    const std::string item = dtype + " " + Thousands(n);
    if (!bytes.empty()) {
      bytes += ",";
      ++line_width;
      if (columns > 0 && line_width + 1 + DisplayWidth(item) + 1 > columns) {
        bytes += "\n" + std::string(15, ' ');
        line_width = 15;
      } else {
        bytes += " ";
        ++line_width;
      }
    }
    bytes += item;
    line_width += DisplayWidth(item);
  }
  line("bytes", bytes.empty() ? "0" : bytes);
  std::map<std::string_view, std::string_view> name_of;  // key path -> name shown
  for (const auto& row : r.rows) name_of.emplace(row.key, Shown(row));
  // At most ten names; on a terminal only as many as fit the line (what follows the 15 columns of
  // indent and label), so that a checkpoint of many zero biases does not print a 500-column line.
  auto keys = [&name_of, columns](const std::vector<std::string>& v) {
    std::string s = std::to_string(v.size());
    size_t shown = 0;
    for (; shown < v.size() && shown < 10; ++shown) {
      const std::string name = (shown ? ", " : ": ") + EscapeForDisplay(std::string(name_of.at(v[shown])));
      const std::string_view more = ", ...";
      const bool last = shown + 1 == v.size();
      if (columns > 0 && 15 + DisplayWidth(s) + DisplayWidth(name) + (last ? 0 : more.size()) > columns && shown > 0) break;
      s += name;
    }
    if (shown < v.size()) s += ", ...";
    return s;
  };
  line("non-finite", keys(r.non_finite));
  line("all zero", keys(r.all_zero));
}

// --check-finite without --json: only what a CI log needs.
void PrintFiniteCheck(const StatsReport& r) {
  for (const auto& row : r.rows) {
    if (row.skipped) continue;
    const TensorStats& s = r.stats[row.stats];
    if (s.nan + s.pos_inf + s.neg_inf == 0) continue;
    std::cout << EscapeForDisplay(r.path) << ": " << EscapeForDisplay(Shown(row)) << ": " << s.nan << " NaN, " << s.pos_inf
              << " +Inf, " << s.neg_inf << " -Inf of " << Thousands(s.count) << " values\n";
  }
  std::cout << EscapeForDisplay(r.path) << ": "
            << (r.non_finite.empty() ? "all " + std::to_string(r.rows.size()) + " tensor(s) finite"
                                     : std::to_string(r.non_finite.size()) + " of " + std::to_string(r.rows.size()) +
                                           " tensor(s) hold NaN or Inf")
            << '\n';
}

}  // namespace

void AddStatsCommands(CLI::App& app, int* exit_code) {
  static std::string path;
  static std::vector<std::string> keys, globs;
  static bool json = false, check_finite = false, tsv = false, no_pager = false;
  static int precision = 4;
  static PolicyFlags policy;
  static uint32_t bins = 0, threads = 0;

  auto* stats = app.add_subcommand("stats", "Per-tensor min, max, mean, std, zeros, NaN and Inf counts; --check-finite");
  stats->add_option("path", path, "File or tensordict directory")->required();
  stats->add_option("keys", keys, "Only these tensors: key paths as `trove info` lists them, or globs (* one component, ** any, ?)");
  stats->add_option("--keys", globs, "Only tensors whose key path matches (glob: * ** ?; repeatable)")->allow_extra_args(false);
  auto* json_flag = stats->add_flag("--json", json, "One JSON object for scripts (schema_version 1)");
  auto* tsv_flag = stats->add_flag("--tsv", tsv, "The table tab-separated, numbers exact, for scripts")->excludes(json_flag);
  stats->add_option("--precision", precision, "Significant digits of the table's numbers (default 4; 17: every digit)")
      ->check(CLI::Range(1, kEveryDigit))
      ->excludes(json_flag)
      ->excludes(tsv_flag);
  stats->add_flag("--check-finite", check_finite, "Exit 1 when any tensor holds NaN or Inf (they are listed)");
  stats->add_option("--hist", bins, "Also N-bin histograms: linear between min and max, and of log10|x|")
      ->check(CLI::Range(1u, static_cast<uint32_t>(kMaxStatsHistogramBins)));
  stats->add_option("--threads", threads, "Threads to use (default 0: every core)")->check(ThreadCountCheck());
  AddIoOption(stats);
  AddPolicyFlags(stats, policy);
  AddNoPagerFlag(stats, no_pager);
  stats->footer(
      "Figures are float64 over the finite values (complex: magnitudes; bool: 0/1) and match numpy's; "
      "NaN and Inf are counted, never averaged. Tensors shared by several keys are read once.\n"
      "Examples:\n"
      "  trove stats model.pt\n"
      "  trove stats model.pt --keys 'encoder/**' --hist 20\n"
      "  trove stats model.pt 'blocks.*.attn.*' --precision 6\n"
      "  trove stats model.pt --tsv > stats.tsv   (every digit, for scripts)\n"
      "  trove stats model.pt --json | jq '.summary.non_finite'\n"
      "  trove stats ckpt.pt --check-finite || echo 'NaN in the checkpoint'\n"
      "Exit status: 0, 1 with --check-finite when a tensor holds NaN or Inf, 2 error.");
  stats->callback([exit_code] {
    ReadOptions read;
    read.pickle_policy = policy.policy();
    StatsOptions options;
    options.histogram_bins = bins;
    options.threads = threads;
    options.guard_truncation = true;
    Document doc;  // the rows' views live in it
    StatsReport r;
    {
      Progress progress(!json);  // erased before the table
      options.progress = progress.Callback();
      // A file truncated by another program while we read it: an error, not a SIGBUS death.
      RunGuardingTruncation([&] {
        doc = OpenWarning(path, read);
        r = ComputeStatsReport(doc, Select(doc, keys, globs), options);
      });
    }
    OutputPager pager(!json && !no_pager);
    if (json) PrintJson(ExactStdout(), StatsReportJson(r, bins > 0));
    else if (check_finite) PrintFiniteCheck(r);
    else PrintReport(r, bins > 0, precision, tsv);
    *exit_code = check_finite && !r.non_finite.empty() ? kExitFindings : kExitOk;
  });
}

}  // namespace trove::cli
