// cli/report_page.h: the page `trove report` writes, embedded at build time.
//
// kReportPage is src/cli/report/report.html with report.css and report.js put in place (CMake
// generates the definition); the report's JSON replaces kReportDataMark, which appears once,
// inside <script type="application/json">. Constants; thread-safe.
#pragma once

#include <string_view>

namespace trove::cli {

extern const std::string_view kReportPage;
inline constexpr std::string_view kReportDataMark = "TROVE_REPORT_DATA_JSON";

}  // namespace trove::cli
