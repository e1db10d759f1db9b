// core/count_text.h: counts and byte sizes as people read them, in messages and tables.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace trove {

// 1048576 -> "1,048,576".
std::string Thousands(uint64_t n);
// "12.7 KiB": binary units, three significant digits ("512 B" below a KiB).
std::string HumanBytes(uint64_t n);

}  // namespace trove
