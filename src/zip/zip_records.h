// zip/zip_records.h: the byte layout of the zip records trove reads and writes.
//
// All integers are little-endian. Offsets are from the start of each record.
//
// Local file header (30 bytes + name + extra), signature 50 4B 03 04:
//    0 u32 signature 0x04034b50     14 u32 crc-32
//    4 u16 version needed           18 u32 compressed size    (0xFFFFFFFF: see zip64 extra)
//    6 u16 flags                    22 u32 uncompressed size  (0xFFFFFFFF: see zip64 extra)
//    8 u16 method                   26 u16 name length
//   10 u16 DOS time                 28 u16 extra length
//   12 u16 DOS date                 30 name, then extra
// Data descriptor (after the payload when flag bit 3 is set):
//   [u32 signature 0x08074b50] u32 crc-32, then compressed and uncompressed size as u32 each,
//   or as u64 each when the local header carries a zip64 extra.
// Central directory header (46 bytes + name + extra + comment), signature 50 4B 01 02:
//    0 u32 signature 0x02014b50     28 u16 name length
//    4 u16 version made by          30 u16 extra length
//    6 u16 version needed           32 u16 comment length
//    8 u16 flags                    34 u16 disk number start     (0xFFFF: see zip64 extra)
//   10 u16 method                   36 u16 internal attributes
//   12 u16 DOS time                 38 u32 external attributes
//   14 u16 DOS date                 42 u32 local header offset   (0xFFFFFFFF: see zip64 extra)
//   16 u32 crc-32                   46 name, extra, comment
//   20 u32 compressed size   (0xFFFFFFFF: see zip64 extra)
//   24 u32 uncompressed size (0xFFFFFFFF: see zip64 extra)
// Extra field: a sequence of blocks u16 id, u16 data length, data.
//   0x0001 zip64: u64 values, present only for the header fields holding their sentinel, in the
//          order uncompressed size, compressed size, local header offset, u32 disk number. A
//          local header's zip64 block holds both sizes.
//   0x4246 "FB": PyTorch's alignment padding ('Z' bytes). 0x6474 "td": tensordict's (zeros).
// Zip64 end of central directory record (56 bytes + extensible data), signature 50 4B 06 06:
//    0 u32 signature 0x06064b50     24 u64 entries on this disk
//    4 u64 size of the rest (>= 44) 32 u64 entries in total
//   12 u16 version made by          40 u64 central directory size
//   14 u16 version needed           48 u64 central directory offset
//   16 u32 this disk number
//   20 u32 disk holding the central directory
// Zip64 end of central directory locator (20 bytes, right before the end record), 50 4B 06 07:
//    0 u32 signature 0x07064b50      8 u64 offset of the zip64 end record
//    4 u32 disk holding that record 16 u32 total number of disks
// End of central directory record (22 bytes + comment, at most 64 KiB from the end), 50 4B 05 06:
//    0 u32 signature 0x06054b50     12 u32 central directory size    (0xFFFFFFFF: zip64)
//    4 u16 this disk number         16 u32 central directory offset  (0xFFFFFFFF: zip64)
//    6 u16 disk holding the CD      20 u16 comment length
//    8 u16 entries on this disk (0xFFFF: zip64)
//   10 u16 entries in total    (0xFFFF: zip64)
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/display_escape.h"
#include "core/little_endian.h"
#include "core/utf8.h"

namespace trove::zip {

inline constexpr uint32_t kLocalSig = 0x04034b50;
inline constexpr uint32_t kDescriptorSig = 0x08074b50;
inline constexpr uint32_t kCentralSig = 0x02014b50;
inline constexpr uint32_t kZip64EndSig = 0x06064b50;
inline constexpr uint32_t kZip64LocatorSig = 0x07064b50;
inline constexpr uint32_t kEndSig = 0x06054b50;

inline constexpr uint64_t kLocalSize = 30;
inline constexpr uint64_t kCentralSize = 46;
inline constexpr uint64_t kZip64EndSize = 56;
inline constexpr uint64_t kZip64LocatorSize = 20;
inline constexpr uint64_t kEndSize = 22;

// Field offsets patched after the payload is known.
inline constexpr uint64_t kLocalFlagsAt = 6;
inline constexpr uint64_t kLocalCrcAt = 14;
inline constexpr uint64_t kCentralCrcAt = 16;  // not patched by the writer; tensordict's checksum refresh does

inline constexpr uint16_t kExtraZip64 = 0x0001;
inline constexpr uint16_t kExtraPyTorchPad = 0x4246;     // "FB"
inline constexpr uint16_t kExtraTensordictPad = 0x6474;  // "td"

inline constexpr uint16_t kFlagEncrypted = 0x0001;
inline constexpr uint16_t kFlagLzmaEndMarker = 0x0002;
inline constexpr uint16_t kFlagDescriptor = 0x0008;
inline constexpr uint16_t kFlagStrongEncryption = 0x0040;
inline constexpr uint16_t kFlagUtf8 = 0x0800;
inline constexpr uint16_t kFlagMaskedHeaders = 0x2000;  // central directory encryption

inline constexpr uint32_t kMax32 = 0xFFFFFFFF;
inline constexpr uint16_t kMax16 = 0xFFFF;

// A record's fields as the writer appends them (core/little_endian.h does the byte order).
inline void PutU16(std::string& s, uint16_t v) { AppendLe(s, v, 2); }
inline void PutU32(std::string& s, uint32_t v) { AppendLe(s, v, 4); }
inline void PutU64(std::string& s, uint64_t v) { AppendLe(s, v, 8); }
// Overwrites `n` bytes of `s` at `at` with v (little-endian); `s` must already hold them.
inline void SetLe(std::string& s, uint64_t at, uint64_t v, int n) { StoreLe(s.data() + at, v, static_cast<unsigned>(n)); }

// The end-record search, the one loop over the file's tail that every reader of the end record
// goes through. Calls fn(pos) for each end-record signature ("PK\x05\x06") that starts in the
// last `window` bytes of the file, last first; a signature may have fewer than kEndSize bytes
// after it (the caller decides what that means). Stops early when fn returns false.
template <class F>
void ForEachEndSignature(const uint8_t* data, uint64_t size, uint64_t window, F&& fn) {
  if (size < 4) return;
  const uint64_t lowest = size > window ? size - window : 0;
  for (uint64_t pos = size - 4 + 1; pos-- > lowest;) {
    if (std::memcmp(data + pos, "PK\x05\x06", 4) == 0 && !fn(pos)) return;
  }
}
// The variant most readers want: the last signature in the window with a whole end record
// (kEndSize bytes) after it, as torch's reader and Python's zipfile choose; UINT64_MAX when none.
inline uint64_t LastWholeEndRecord(const uint8_t* data, uint64_t size, uint64_t window) {
  uint64_t chosen = UINT64_MAX;
  ForEachEndSignature(data, size, window, [&](uint64_t pos) {
    if (size - pos < kEndSize) return true;
    chosen = pos;
    return false;
  });
  return chosen;
}

// Why a name cannot be an entry name, or nullptr. Such names escape the extraction directory
// (zip-slip) or mean different files to different tools.
inline const char* EntryNameProblem(std::string_view name) {
  if (name.empty()) return "empty name";
  if (name.size() > kMax16) return "name longer than 65535 bytes";
  if (name.front() == '/') return "absolute name (leading '/')";
  if (name.find('\\') != std::string_view::npos) return "backslash in name";
  if (name.find('\0') != std::string_view::npos) return "NUL byte in name";
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    if (name.substr(start, end - start) == "..") return "'..' component in name";
    start = end + 1;
  }
  return nullptr;
}

// A name as it can be shown in a message: quoted and escaped as trove shows names
// (core/display_escape.h), cut after 200 bytes so a hostile 64 KiB name cannot flood a log.
inline std::string QuoteName(std::string_view name) {
  constexpr size_t kShown = 200;
  const size_t cut = utf8::CutLength(name, kShown);
  std::string out = "'";
  AppendEscapedForDisplay(name.substr(0, cut), out, DisplayEscape::kName, '\'');
  if (cut < name.size()) out += "...";
  out.push_back('\'');
  return out;
}

}  // namespace trove::zip
