#include "cli/table.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "cli/pager.h"
#include "core/display_escape.h"

namespace trove::cli {
namespace {

// A column is never squeezed below this: a key cut shorter says nothing.
constexpr size_t kMinSqueezedWidth = 20;
// The floor when narrowing the gaps was not enough either.
constexpr size_t kLastResortSqueezedWidth = 12;
// Spaces between columns: two read best; one when the table would not fit the terminal otherwise.
constexpr size_t kColumnGap = 2;
constexpr size_t kNarrowColumnGap = 1;

// `s` cut to `width` code points by dropping its middle: a key's start (its module) and end
// (the parameter) are what tell keys apart.
std::string ElideMiddle(const std::string& s, size_t width) {
  std::vector<size_t> starts;  // byte offset of each code point
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  if (starts.size() <= width || width < 3) return s;
  const size_t head = (width - 1) / 2, tail = width - 1 - head;
  return s.substr(0, starts[head]) + "\u2026" + s.substr(starts[starts.size() - tail]);
}

}  // namespace

size_t TerminalColumns() {
  struct winsize size {};
  if (::isatty(StdoutTerminalFd()) && ::ioctl(StdoutTerminalFd(), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(columns, &end, 10);
    if (end != columns && *end == '\0' && n > 0 && n < 100000) return n;
  }
  return 0;
}

bool StdoutTakesColour() {
  if (!::isatty(StdoutTerminalFd())) return false;
  const char* no_colour = std::getenv("NO_COLOR");
  if (no_colour != nullptr && *no_colour != '\0') return false;
  const char* term = std::getenv("TERM");
  return term == nullptr || std::string_view(term) != "dumb";
}

void Table::Add(std::vector<std::string> row, std::string sgr) {
  for (std::string& cell : row) cell = EscapeForDisplay(cell);
  rows_.push_back(std::move(row));
  sgr_.push_back(std::move(sgr));
}

size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

void Table::Print(std::ostream& out, bool aligned, const std::string& indent, bool colour) const {
  if (!aligned) {
    auto line = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < r.size(); ++i) out << (i ? "\t" : "") << r[i];
      out << '\n';
    };
    line(header_);
    for (const auto& r : rows_) line(r);
    return;
  }
  std::vector<size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], DisplayWidth(r[i]));
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  // Wider than the terminal: the widest column (a key, mostly) gives up the difference, its long
  // cells cut in the middle, so that each row stays one line; if that is not enough (a table of
  // many numeric columns, as stats' at 80 columns), the gaps between columns narrow to one space.
  size_t squeezed = width.size();
  size_t gap = kColumnGap;
  if (const size_t columns = TerminalColumns(); columns > 0 && !width.empty()) {
    auto total_width = [&] {
      size_t total = DisplayWidth(indent);
      for (size_t w : width) total += w + gap;
      return total - gap;
    };
    const size_t widest = static_cast<size_t>(std::max_element(width.begin(), width.end()) - width.begin());
    if (const size_t total = total_width(); total > columns && width[widest] > kMinSqueezedWidth) {
      width[widest] = std::max(kMinSqueezedWidth, width[widest] - std::min(width[widest], total - columns));
      squeezed = widest;
    }
    if (total_width() > columns) gap = kNarrowColumnGap;
    // Still too wide by a few columns (stats' eight columns of short keys at 80): the widest
    // column gives up more, down to a floor that still shows a key's two ends.
    if (const size_t total = total_width(); total > columns && width[widest] > kLastResortSqueezedWidth) {
      width[widest] = std::max(kLastResortSqueezedWidth, width[widest] - std::min(width[widest], total - columns));
      squeezed = widest;
    }
  }
  auto line = [&](const std::vector<std::string>& r, const std::string& sgr) {
    std::string s = indent;
    for (size_t i = 0; i < r.size(); ++i) {
      const std::string cell = i == squeezed ? ElideMiddle(r[i], width[i]) : r[i];
      s += cell;
      if (i + 1 < r.size()) s.append(width[i] - std::min(width[i], DisplayWidth(cell)) + gap, ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    if (colour && !sgr.empty()) {
      const size_t at = indent.size();
      s = s.substr(0, at) + "\x1b[" + sgr + "m" + s.substr(at) + "\x1b[0m";
    }
    out << s << '\n';
  };
  line(header_, {});
  for (size_t i = 0; i < rows_.size(); ++i) line(rows_[i], sgr_[i]);
}

}  // namespace trove::cli
