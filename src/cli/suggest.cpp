#include "cli/suggest.h"

#include <algorithm>
#include <limits>

#include "core/display_escape.h"

namespace trove::cli {

size_t EditDistance(std::string_view a, std::string_view b, size_t limit) {
  if (a.size() > b.size() + limit || b.size() > a.size() + limit) return limit + 1;
  // Three rows of the optimal-string-alignment table; linear memory in the shorter name.
  const size_t m = b.size();
  std::vector<size_t> prev2(m + 1), prev(m + 1), row(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    size_t best = row[0];
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) row[j] = std::min(row[j], prev2[j - 2] + 1);
      best = std::min(best, row[j]);
    }
    if (best > limit) return limit + 1;
    std::swap(prev2, prev);
    std::swap(prev, row);
  }
  return std::min(prev[m], limit + 1);
}

std::vector<std::string> Suggest(std::string_view typed, const std::vector<std::string>& candidates, size_t most) {
  if (typed.empty()) return {};
  // A third of the name, at least one edit and at most four: "inof" finds "info", "hepl" "help",
  // and a long key its one-character typo, without "cat" suggesting "diff".
  const size_t limit = std::clamp<size_t>(typed.size() / 3, 1, 4);
  struct Ranked {
    size_t rank;
    const std::string* name;
  };
  std::vector<Ranked> ranked;
  for (const std::string& c : candidates) {
    if (c == typed) continue;
    // What was typed is the end of the candidate at a component boundary: a missing prefix.
    if (c.size() > typed.size() && c.ends_with(typed)) {
      const char before = c[c.size() - typed.size() - 1];
      if (before == '/' || before == '.' || before == '_' || before == '-') {
        ranked.push_back({0, &c});
        continue;
      }
    }
    const size_t d = EditDistance(typed, c, limit);
    if (d <= limit) ranked.push_back({d, &c});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& x, const Ranked& y) { return x.rank < y.rank; });
  std::vector<std::string> out;
  for (const Ranked& r : ranked) {
    if (out.size() == most) break;
    out.push_back(*r.name);
  }
  return out;
}

std::string DidYouMean(const std::vector<std::string>& suggestions) {
  if (suggestions.empty()) return "";
  std::string s = " (did you mean ";
  for (size_t i = 0; i < suggestions.size(); ++i) {
    if (i) s += i + 1 == suggestions.size() ? " or " : ", ";
    s += "'" + EscapeForDisplay(suggestions[i]) + "'";
  }
  return s + "?)";
}

}  // namespace trove::cli
