#include "core/count_text.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

namespace trove {

std::string Thousands(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string FirstFew(const std::vector<std::string>& items, size_t shown, uint64_t total) {
  std::string text;
  const size_t listed = std::min(items.size(), shown);
  for (size_t i = 0; i < listed; ++i) text += (i ? ", " : "") + items[i];
  total = std::max<uint64_t>(total, items.size());
  if (total > listed) text += " and " + std::to_string(total - listed) + " more";
  return text;
}

std::string HumanBytes(uint64_t n) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return std::to_string(n) + " B";
  const int digits = v < 10 ? 2 : v < 100 ? 1 : 0;
  char text[32];
  std::snprintf(text, sizeof text, "%.*f %s", digits, v, kUnits[u]);
  return text;
}

}  // namespace trove
