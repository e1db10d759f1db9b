// trove report: one self-contained HTML page about a file (or what changed between two): the
// summary, a treemap of bytes by module, every tensor's figures and histogram, the value tree.
//
// The C++ side computes every figure (ComputeStats, Diff) and embeds them as JSON in the page;
// the page's script (src/cli/report/, embedded at build time) only draws. Keys and values come
// from hostile files: the JSON is written so that no text in it can end its script element, and
// the script puts file text into the page as text, never as markup.
#include <CLI/CLI.hpp>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/report_page.h"
#include "cli/stats_report.h"
#include "cli/json_output.h"
#include "core/count_text.h"
#include "core/display_escape.h"
#include "trove/diff.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/shared_bytes.h"
#include "trove/tensor_stats.h"
#include "trove/version.h"

namespace trove::cli {
namespace {


// Histogram bins per tensor on the page: enough to see a distribution's shape in a small chart,
// and 2,000 tensors' histograms stay a few hundred KB of page.
constexpr uint32_t kReportHistogramBins = 32;
// Value-tree nodes put on the page: a config or optimizer state is far smaller; a hostile or
// huge tree is cut (shown as "...") rather than making a page no browser opens.
constexpr size_t kMaxReportValueNodes = 20000;
// Differing non-tensor values listed for two files; the rest are counted.
constexpr size_t kMaxReportValueDiffs = 2000;

// A histogram as the page draws it: the range and the counts (its edges are numpy's linspace
// between them, which the page recomputes), far smaller than the edges written out.
Json CompactHistogram(const Histogram& h) {
  if (h.edges.empty()) return nullptr;
  return {{"range", {h.edges.front(), h.edges.back()}}, {"counts", h.counts}};
}

Json FileJson(const Document& doc, const StatsReport& r) {
  Json j = StatsReportJson(r, false);
  j["file_size"] = doc.file_size;
  Json& tensors = j["tensors"];
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const StatsRow& row = r.rows[i];
    Json& t = tensors[i];
    t["nbytes"] = row.view->nbytes();
    t["tied"] = !row.first;  // bytes already counted under an earlier key
    if (row.skipped) continue;
    const TensorStats& s = r.stats[row.stats];
    t["histogram"] = CompactHistogram(s.histogram);
    t["log10_abs_histogram"] = CompactHistogram(s.log10_abs_histogram);
  }
  j["values"] = ValueJson(doc.root, {kMaxReportValueNodes, kMaxBoundedJsonBytes});
  return j;
}

Json DiffJson(const Document& b, const DiffReport& d) {
  Json tensors = Json::array();
  for (const TensorDiff& t : d.tensors) {
    Json tj{{"key", t.key}};
    if (!t.comparable) {
      tj["changed"] = t.a_dtype != t.b_dtype ? "dtype " + t.a_dtype + " -> " + t.b_dtype : "shape " + ShapeString(t.a_shape) + " -> " + ShapeString(t.b_shape);
    } else {
      // ||a-b||_2 / ||a||_2 as `trove diff` reports it; a change of an all-zero tensor is infinite.
      const double relative = t.identical || t.l2 == 0 ? 0 : t.l2_a > 0 ? t.l2 / t.l2_a : INFINITY;
      tj["relative"] = relative;
      tj["max_abs"] = t.max_abs;
      tj["l2"] = t.l2;  // ranks the tensors that were all zeros, as `trove diff` does
      tj["identical"] = t.identical;
    }
    tensors.push_back(std::move(tj));
  }
  Json values = Json::array();
  for (size_t i = 0; i < d.values.size() && i < kMaxReportValueDiffs; ++i)
    values.push_back({{"key", d.values[i].key}, {"a", d.values[i].a_text}, {"b", d.values[i].b_text}});
  return {{"path", b.path}, {"format", b.format}, {"file_size", b.file_size}, {"tensors", tensors},
          {"only_in_a", d.only_in_a}, {"only_in_b", d.only_in_b}, {"values", values},
          {"values_total", d.values.size()}};
}

// JSON text that can sit inside <script type="application/json">: every '<' and '>' escaped (no
// "</script" or "<!--" can appear, whatever a key says) and U+2028/U+2029 escaped too (line
// terminators to older JavaScript). Invalid UTF-8 in file text becomes U+FFFD.
std::string ScriptSafeJson(const Json& j) {
  const std::string text = DumpJson(j, -1);
  std::string out;
  out.reserve(text.size() + text.size() / 64);
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '\xE2' && i + 2 < text.size() && text[i + 1] == '\x80' && (text[i + 2] == '\xA8' || text[i + 2] == '\xA9')) {
      out += text[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void AddReportCommands(CLI::App& app, int* exit_code) {
  static std::string a_path, b_path, output;
  static bool sync = false;
  static PolicyFlags policy;
  static uint32_t threads = 0;

  auto* report = app.add_subcommand("report", "One self-contained HTML page: summary, treemap, every tensor's figures "
                                              "and histogram, values; with B, what changed");
  report->add_option("path", a_path, "File or tensordict directory")->required();
  report->add_option("b", b_path, "A second file: per-tensor relative change, keys only in one");
  report->add_option("-o,--output", output, "The HTML file to write")->required();
  report->add_option("--threads", threads, "Threads to use (default 0: every core)");
  AddPolicyFlags(report, policy);
  report->add_flag("--sync", sync, kSyncFlagHelp);
  report->footer(
      "The page needs no network and no other file: open it from disk in any browser.\n"
      "Examples:\n"
      "  trove report model.pt -o model.html\n"
      "  trove report base.pt finetuned.pt -o change.html\n"
      "Exit status: 0, 2 error.");
  report->callback([exit_code] {
    // The page never replaces what it describes (`-o model.pt` for `-o model.html`), nor anything
    // that is not a file trove would write there; refused before any tensor is read.
    SourceGuard source_a(a_path);
    std::optional<SourceGuard> source_b;
    if (!b_path.empty()) source_b.emplace(b_path);
    AtomicFile out(output, DurabilityFromSyncFlag(sync));
    ReadOptions read;
    read.pickle_policy = policy.policy();
    StatsOptions options;
    options.histogram_bins = kReportHistogramBins;
    // The page's bars come from the statistics' one sweep (docs/report.md: exact counts are
    // `trove stats --hist`'s); every other figure on it is exact.
    options.exact_histograms = false;
    options.threads = threads;
    options.guard_truncation = true;
    Json data{{"schema_version", 1}, {"generator", std::string("trove ") + kVersion}};
    Progress progress;  // erased before the closing line
    options.progress = progress.Callback();
    size_t tensors = 0;
    uint64_t bytes = 0;
    RunGuardingTruncation([&] {
      Document a = OpenWarning(a_path, read);
      std::vector<const NamedTensor*> all;
      for (const auto& t : a.tensors) all.push_back(&t);
      const StatsReport stats = ComputeStatsReport(a, all, options);
      tensors = a.tensors.size();
      for (const auto& [dtype, n] : stats.bytes_by_dtype) bytes += n;
      data["a"] = FileJson(a, stats);
      if (!b_path.empty()) {
        Document b = OpenWarning(b_path, read);
        DiffOptions diff;
        diff.read = read;
        diff.progress = progress.Callback();
        data["diff"] = DiffJson(b, Diff(a, b, diff));
      }
    });
    const std::string_view page = kReportPage;
    const size_t mark = page.find(kReportDataMark);
    const std::string json = ScriptSafeJson(data);
    out.Write(page.data(), mark);
    out.Write(json.data(), json.size());
    const size_t rest = mark + kReportDataMark.size();
    out.Write(page.data() + rest, page.size() - rest);
    out.Commit();
    progress.End();
    PrintClosingLine("wrote " + EscapeForDisplay(output) + ": " + Thousands(tensors) + (tensors == 1 ? " tensor, " : " tensors, ") +
                         HumanBytes(bytes) + (b_path.empty() ? "" : " compared with " + EscapeForDisplay(b_path)),
                     progress.Seconds());
    *exit_code = kExitOk;
  });
}

}  // namespace trove::cli
