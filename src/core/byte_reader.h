// core/byte_reader.h: the "bytes remaining" reader every binary parser goes through.
//
// Each primitive checks that enough bytes remain before it reads, and a short read throws
// Error(kCorrupt) naming the absolute offset, so parsers never index raw pointers themselves.
// A ByteReader does not own its bytes; it is a cursor, cheap to copy, not thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/little_endian.h"
#include "trove/error.h"

namespace trove {

class ByteReader {
 public:
  ByteReader() = default;
  // `base` is the absolute offset of data[0] in its file, used in error messages.
  ByteReader(const uint8_t* data, uint64_t size, uint64_t base = 0) : data_(data), size_(size), base_(base) {}

  uint64_t remaining() const { return size_ - pos_; }
  uint64_t position() const { return pos_; }           // relative to data[0]
  uint64_t offset() const { return base_ + pos_; }     // absolute in the file
  bool at_end() const { return pos_ == size_; }
  const uint8_t* cursor() const { return data_ + pos_; }

  void Need(uint64_t n) const {
    if (n > remaining()) {
      Fail(ErrorCode::kCorrupt, "truncated at offset " + std::to_string(offset()) + ": need " + std::to_string(n) +
                                    " bytes, " + std::to_string(remaining()) + " remain");
    }
  }
  void Seek(uint64_t position) {
    if (position > size_) Fail(ErrorCode::kCorrupt, "offset " + std::to_string(base_ + position) + " is past the end");
    pos_ = position;
  }
  void Skip(uint64_t n) { Need(n); pos_ += n; }

  uint8_t U8() { Need(1); return data_[pos_++]; }
  uint16_t U16() { return static_cast<uint16_t>(Le(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Le(4)); }
  uint64_t U64() { return Le(8); }
  int32_t I32() { return static_cast<int32_t>(U32()); }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  double F64BigEndian() {
    Need(8);
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u = (u << 8) | data_[pos_ + i];
    pos_ += 8;
    double d;
    std::memcpy(&d, &u, 8);
    return d;
  }
  // n bytes as a view into the underlying data.
  std::string_view Bytes(uint64_t n) {
    Need(n);
    std::string_view v(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return v;
  }
  // A reader over the next n bytes, which this one skips: it ends where they end, and its
  // offsets (and so its error messages) stay absolute. For records nested in records, such as a
  // zip extra field and its blocks.
  ByteReader Sub(uint64_t n) {
    Need(n);
    ByteReader sub(data_ + pos_, n, offset());
    pos_ += n;
    return sub;
  }
  // The bytes not yet read, as a view, without consuming them.
  std::string_view Rest() const {
    return std::string_view(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(remaining()));
  }
  // Up to (not including) the next '\n', which is consumed; throws if there is none.
  std::string_view Line() {
    const void* nl = std::memchr(data_ + pos_, '\n', static_cast<size_t>(remaining()));
    if (nl == nullptr) Fail(ErrorCode::kCorrupt, "unterminated line at offset " + std::to_string(offset()));
    uint64_t n = static_cast<const uint8_t*>(nl) - (data_ + pos_);
    std::string_view v = Bytes(n);
    pos_ += 1;
    return v;
  }

 private:
  uint64_t Le(int n) {
    Need(static_cast<uint64_t>(n));
    const uint64_t v = LoadLe(data_ + pos_, static_cast<unsigned>(n));
    pos_ += static_cast<uint64_t>(n);
    return v;
  }

  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t pos_ = 0;
  uint64_t base_ = 0;
};

}  // namespace trove
