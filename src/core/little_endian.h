// core/little_endian.h: the one home of little-endian loads and stores of unsigned integers.
//
// Every format trove reads (zip, safetensors, .psk.d, tensordict's shape files, torch's legacy
// storages) stores integers little-endian; these are the only hand-written byte loops for them.
// Loads read raw pointers: callers check the bounds first (or read through ByteReader, which
// does and uses LoadLe itself). Header-only, constexpr, independent of the host's byte order.
#pragma once

#include <cstdint>

namespace trove {

// The n bytes (0..8) at p as a little-endian unsigned integer.
constexpr uint64_t LoadLe(const uint8_t* p, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}
constexpr uint16_t LoadLe16(const uint8_t* p) { return static_cast<uint16_t>(LoadLe(p, 2)); }
constexpr uint32_t LoadLe32(const uint8_t* p) { return static_cast<uint32_t>(LoadLe(p, 4)); }
constexpr uint64_t LoadLe64(const uint8_t* p) { return LoadLe(p, 8); }

// Writes the low n bytes (0..8) of v at p, little-endian.
constexpr void StoreLe(uint8_t* p, uint64_t v, unsigned n) {
  for (unsigned i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
// The same into a char buffer (std::string's bytes).
constexpr void StoreLe(char* p, uint64_t v, unsigned n) {
  for (unsigned i = 0; i < n; ++i) p[i] = static_cast<char>(static_cast<uint8_t>(v >> (8 * i)));
}

// Appends the low n bytes (0..8) of v, little-endian, to a byte container (std::string,
// std::vector<uint8_t>, std::vector<char>).
template <class Bytes>
void AppendLe(Bytes& out, uint64_t v, unsigned n) {
  using Byte = typename Bytes::value_type;
  for (unsigned i = 0; i < n; ++i) out.push_back(static_cast<Byte>(static_cast<uint8_t>(v >> (8 * i))));
}

}  // namespace trove
