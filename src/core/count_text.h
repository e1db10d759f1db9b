// core/count_text.h: counts, byte sizes and lists of names as people read them, in messages and
// tables. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trove {

// 1048576 -> "1,048,576".
std::string Thousands(uint64_t n);
// "12.7 KiB": binary units, three significant digits ("512 B" below a KiB).
std::string HumanBytes(uint64_t n);

// How many names a message lists before it says how many more there are: enough to recognise
// them, few enough that a message about a million keys stays a line.
constexpr size_t kNamesListed = 8;
// {"'a'", "'b'", "'c'"}, 2 -> "'a', 'b' and 1 more": the items as given (quote them first).
// `total`, when larger than items.size(), is how many there are in all: a caller listing a few
// of many passes only the few.
std::string FirstFew(const std::vector<std::string>& items, size_t shown = kNamesListed, uint64_t total = 0);

}  // namespace trove
