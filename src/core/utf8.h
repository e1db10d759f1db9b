// core/utf8.h: UTF-8 as Python's pickle uses it ("utf-8" with "surrogatepass"), for the pickle
// layer's str values, for the display rule (core/display_escape.h), which shows a surrogate
// escaped as Python's repr of such a str does, and for cutting a name shown in a message.
//
// Python str may hold lone surrogates; pickle writes them as the 3-byte UTF-8 form of the code
// point (ED A0 80..ED BF BF) and torch reads with surrogatepass, so trove's str values accept them.
// Everything else is strict UTF-8: no overlong forms, nothing above U+10FFFF. Stateless inline
// functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trove::utf8 {

inline constexpr size_t kValid = static_cast<size_t>(-1);

// Decodes the code point at s[i] and advances i; returns false (i unchanged) on a bad sequence.
inline bool Next(std::string_view s, size_t& i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  uint8_t c = b(i);
  if (c < 0x80) { cp = c; ++i; return true; }
  size_t n;
  uint32_t min;
  if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
  else return false;
  if (s.size() - i < n) return false;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF) return false;
  i += n;
  return true;
}

// kValid, or the index of the first byte that does not start a valid sequence.
inline size_t FirstInvalid(std::string_view s) {
  size_t i = 0;
  uint32_t cp;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) { ++i; continue; }
    if (!Next(s, i, cp)) return i;
  }
  return kValid;
}

// The longest prefix of s no longer than n bytes that ends between sequences: a text cut there
// for a message never shows half a character (at most 3 bytes shorter than n).
inline size_t CutLength(std::string_view s, size_t n) {
  if (n >= s.size()) return s.size();
  size_t cut = n;
  while (cut > 0 && n - cut < 3 && (static_cast<uint8_t>(s[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

// Appends cp (surrogates included, as their 3-byte form).
inline void Append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace trove::utf8
