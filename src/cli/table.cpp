#include "cli/table.h"

#include <algorithm>

#include "core/display_escape.h"

namespace trove::cli {

void Table::Add(std::vector<std::string> row) {
  for (std::string& cell : row) cell = EscapeForDisplay(cell);
  rows_.push_back(std::move(row));
}

size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

void Table::Print(std::ostream& out, bool aligned, const std::string& indent) const {
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
  auto line = [&](const std::vector<std::string>& r) {
    std::string s = indent;
    for (size_t i = 0; i < r.size(); ++i) {
      s += r[i];
      if (i + 1 < r.size()) s.append(width[i] - DisplayWidth(r[i]) + 2, ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << '\n';
  };
  line(header_);
  for (const auto& r : rows_) line(r);
}

}  // namespace trove::cli
