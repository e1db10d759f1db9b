// formats/npy/npy_header.h: the .npy preamble and header, parsed strictly and bounds-checked.
//
// The header is a Python dict literal; ParseNpyHeader reads exactly the literals numpy writes
// (str, int, bool, tuple, list, dict) with a small recursive-descent parser whose depth and input
// are capped, never evaluating anything. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trove/dtype.h"
#include "trove/shared_bytes.h"
#include "trove/tensor.h"

namespace trove {

// The longest header trove reads: numpy.load's own default (format.py's _MAX_HEADER_SIZE, 10000
// characters), which it keeps low because ast.literal_eval is slow and can crash on long input.
// trove's parser is linear, but a longer header comes only from a structured dtype with many
// fields (refused anyway) or a crafted file, and numpy itself refuses it without allow_pickle.
inline constexpr uint64_t kMaxNpyHeaderBytes = 10000;
// Brackets nested in a header: numpy nests them only for structured dtypes (a field of a
// structured type, a field's shape), a few levels deep; the parser recurses, so this bounds its
// stack.
inline constexpr int kMaxNpyLiteralDepth = 32;
// Bytes of magic, version and the longest length field: enough to know where the header ends.
inline constexpr uint64_t kNpyPreambleBytes = 12;

struct NpyPreamble {
  int major = 0, minor = 0;
  uint64_t header_offset = 0;  // 10 (1.0) or 12 (2.0, 3.0)
  uint64_t header_length = 0;
  uint64_t data_offset() const { return header_offset + header_length; }
};

// From the first min(total_size, kNpyPreambleBytes) bytes of a file or member of `total_size`
// bytes: the magic, a version trove reads, a header length under kMaxNpyHeaderBytes that fits.
NpyPreamble ReadNpyPreamble(const uint8_t* first, uint64_t available, uint64_t total_size);

// kText: numpy's fixed-width strings, 'U<n>' (n UCS-4 characters) and 'S<n>' (n bytes): read as
// values (str, bytes), not tensors.
enum class NpyKind : uint8_t { kArray, kObject, kUnicode, kBytes };

// The most elements of a string array read as values: each becomes a value node (~200 bytes), so
// this keeps one at ~200 MB; string arrays in real files are labels and vocabularies.
inline constexpr uint64_t kMaxNpyTextElements = uint64_t{1} << 20;
// The most bytes of a string array read (and, for a deflated member, inflated) at open: its text
// is held as values.
inline constexpr uint64_t kMaxNpyTextBytes = uint64_t{64} << 20;

struct NpyHeader {
  NpyPreamble preamble;
  std::string descr;            // as the header spells it ("<f4")
  NpyKind kind = NpyKind::kArray;
  DType dtype = DType::kUInt8;  // kArray
  ByteOrder byte_order = ByteOrder::kLittle;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  uint64_t item_bytes = 0;      // kArray, kUnicode, kBytes: bytes per element
  uint64_t elements = 0;
  uint64_t data_bytes = 0;      // elements * item_bytes (overflow-checked); 0 for kObject
};

// `header` is the header's bytes (preamble.header_length of them). Throws Error(kCorrupt) with
// "header @ <offset>: ..." for a malformed literal, Error(kUnsupported) for a dtype trove has no
// type for (a structured dtype names its fields).
NpyHeader ParseNpyHeader(const NpyPreamble& preamble, std::string_view header);

// The header of a whole file or member (bytes.size() bytes). Deferred bytes (a deflated member)
// are read through a SharedBytes::Reader: only the preamble and the header are inflated.
NpyHeader ReadNpyHeader(const SharedBytes& bytes);

// The header bytes numpy writes for a C-order little-endian array (preamble included), padded
// with spaces and a newline so that the data starts at a multiple of 64.
std::string FormatNpyHeader(std::string_view descr, const std::vector<int64_t>& shape);

// numpy's descr for a dtype ("<f4", "|b1"), or nullopt when numpy has no such type.
std::optional<std::string> NpyDescrOf(DType dtype);

}  // namespace trove
