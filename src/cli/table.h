// cli/table.h: rows of text columns, printed aligned for a terminal or tab-separated for a pipe.
//
// Cells are given as they are (a key, an entry name from the file) and escaped as names when
// added (core/display_escape.h: control characters, tabs and newlines included), so that a cell
// stays in its column and on its row and widths are measured on what is shown. A value object;
// thread-compatible.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace trove::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  // sgr: the row's colour as an ANSI SGR parameter ("31" red), used only by Print's `colour`.
  void Add(std::vector<std::string> row, std::string sgr = {});
  size_t size() const { return rows_.size(); }
  // aligned: padded columns under a header (terminal), the widest column's long cells cut in the
  // middle ("…") when a row would be wider than the terminal (TerminalColumns), then the gaps
  // narrowed to one space, then that column cut further (down to 12), until rows fit. Otherwise: header
  // and rows tab-separated, whole. colour: rows given an SGR are wrapped in it (aligned only; the
  // caller decides: a terminal, NO_COLOR unset).
  void Print(std::ostream& out, bool aligned, const std::string& indent = "  ", bool colour = false) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<std::string> sgr_;  // one per row
};

// The terminal's width when stdout is one (else $COLUMNS when set, else 0: unknown).
size_t TerminalColumns();

// Whether stdout is a terminal that may be coloured: a terminal, $NO_COLOR unset or empty
// (no-color.org), $TERM not "dumb".
bool StdoutTakesColour();

// Display width of UTF-8 text (code points; enough for keys and numbers).
size_t DisplayWidth(const std::string& s);

}  // namespace trove::cli
