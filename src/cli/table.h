// cli/table.h: rows of text columns, printed aligned for a terminal or tab-separated for a pipe.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace trove::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t size() const { return rows_.size(); }
  // aligned: padded columns under a header (terminal). Otherwise: header and rows tab-separated.
  void Print(std::ostream& out, bool aligned, const std::string& indent = "  ") const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Display width of UTF-8 text (code points; enough for keys and numbers).
size_t DisplayWidth(const std::string& s);

}  // namespace trove::cli
