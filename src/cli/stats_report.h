// cli/stats_report.h: one file's statistics as `trove stats` and `trove report` show them.
//
// ComputeStatsReport runs ComputeStats over the selected tensors of a document (tied weights,
// several keys naming one view, read once) and gathers the summary (parameters, bytes by dtype,
// non-finite and all-zero tensors, by key path); StatsReportJson is the `stats --json` object (docs/json.md).
// The report's rows point into the document's views: the document must outlive the report.
// Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trove/document.h"
#include "trove/tensor_stats.h"

namespace trove::cli {

struct StatsRow {
  std::string key;
  std::string name;  // the key as the file spells it (VerbatimNames in trove/document.h): what people see
  const TensorView* view = nullptr;
  std::optional<std::string> skipped;  // why there are no figures
  size_t stats = 0;                    // index into the distinct views' results
  bool first = true;                   // the first key of its distinct view (tied weights count once)
};

struct StatsReport {
  std::string path, format;
  std::vector<StatsRow> rows;
  std::vector<TensorStats> stats;
  uint64_t parameters = 0;
  std::map<std::string, uint64_t> bytes_by_dtype;
  std::vector<std::string> non_finite, all_zero;
  size_t distinct = 0;
};

StatsReport ComputeStatsReport(const Document& doc, const std::vector<const NamedTensor*>& selected,
                               const StatsOptions& options);

// The `stats --json` object; with `histograms`, each tensor's two histograms.
nlohmann::ordered_json StatsReportJson(const StatsReport& r, bool histograms);

}  // namespace trove::cli
