// cli/value_printer.h: shows a value tree to people (short indented text; JSON is cli/json_output.h).
//
// The rendering is bounded whatever the file holds: depth beyond kMaxPrintDepth and nodes
// beyond the caller's budget print as "...", and shared or cyclic subtrees are printed once per
// path up to those bounds. Every text from the file (keys, class names, strings) is shown escaped
// (core/display_escape.h: strings as Python's repr in that notation), so each line stays one line
// of plain text. Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "trove/value.h"

namespace trove::cli {

// Deeper values than this are elided: deeper trees come only from hostile or generated files.
inline constexpr int kMaxPrintDepth = 32;

// One-line Python-like text of a scalar or small container ("0.001", "'adam'", "(0.9, 0.999)").
// precision > 0: floats to that many significant digits (for people; 0: every digit).
std::string ScalarText(const Value& v, size_t max_chars = 80, int precision = 0);

// Indented lines describing the non-tensor structure: containers with their type and size,
// scalars with their value, tensors summarised as counts. At most max_lines lines. With
// `summarize_lists` (an overview: `trove info`), a list or tuple of scalars longer than a line
// holds is one line of its first and last items and its length (`params: [0, 1, 2, 3, 4, ...,
// 75] (76 items)`); without (`trove cat` of a value), one item per line.
// `precision` as ScalarText's. `max_depth` > 0: containers deeper than that many levels below
// the root are one line each (their type and size), their contents not shown.
std::vector<std::string> DescribeValues(const Value* root, size_t max_lines, bool summarize_lists = false,
                                        int precision = 0, int max_depth = 0);

}  // namespace trove::cli
