// formats/gguf/gguf_layout.h: a GGUF file's header, metadata and tensor infos, parsed and checked
// (docs/gguf.md). The byte layout, as this parser reads it (all integers in the file's byte order):
//
//   magic      4 bytes "GGUF" (GGUF v1 files of August 2023 also wrote "FUGG")
//   version    u32: 1, 2 or 3. Read as little-endian first: a big-endian file's version then has
//              its low 16 bits zero, and its bytes swapped it is 1..3 (how ggml tells them apart)
//   n_tensors  u64 (v1: u32)
//   n_kv       u64 (v1: u32)
//   n_kv times:    key: string; type: u32 (0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool,
//                  8 string, 9 array, 10 u64, 11 i64, 12 f64; 13, an object, see ValueType); the value:
//                    string = length u64 (v1: u32) + that many bytes, no terminator
//                    array  = element type u32 + count u64 (v1: u32) + the elements (arrays nest)
//                    bool   = one byte, 0 or 1
//   n_tensors times: name: string; n_dims: u32 (<= 4); ne: n_dims x u64 (v1: u32), ne[0] the
//                  fastest-varying dimension; type: u32 (a ggml type, ggml_types.h);
//                  offset: u64, from the data section's start, a multiple of the alignment
//   padding    to `general.alignment` (a u32 power of two; 32 when absent)
//   data       the tensors' bytes; a block type's row of ne[0] values is ne[0] / block_values
//              blocks of block_bytes
//
// The draft of July 2023 (llama.cpp's first example.gguf: magic "FUGG", version 1) wrote every
// key and tensor-info field as a typed value (a u32 type before it) and padded each tensor info
// to the alignment; it is read too (GgufLayout::draft).
//
// Everything is checked before anything is allocated from it: counts against the bytes left,
// every product and sum for overflow, lengths and depths against the named caps below. Errors
// are Error(kCorrupt) (or kLimit for a cap, kUnsupported for an unknown version or type) naming
// the field, its offset and the limit. The parse keeps views into the caller's bytes, which must
// outlive it; values are plain, thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf/ggml_types.h"

namespace trove::gguf {

// Caps (reasons):
// A key is "lower_snake_case dotted" text, at most 65535 bytes by the specification.
inline constexpr uint64_t kMaxKeyBytes = 65535;
// ggml's own cap on any string and on an array's bytes (64 MiB, ggml PR 1516): the longest real
// values (chat templates, merges) are well under a megabyte, a gigabyte one is an attack.
inline constexpr uint64_t kMaxStringBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxArrayElements = uint64_t{64} << 20;  // 256k-token vocabularies fit 256 times
// Arrays of arrays: the specification allows them, no writer nests more than two levels; the cap
// bounds the parser's recursion (gguf-py's RecursionError on deep nests).
inline constexpr uint32_t kMaxArrayDepth = 8;
// ggml caps tensors' names at GGML_MAX_NAME - 1 bytes (its name buffers hold 64 with the NUL).
inline constexpr uint64_t kMaxTensorNameBytes = 63;
// GGML_MAX_DIMS: ggml's tensors have four dimensions (more overran ne[4]: ggml PR 709).
inline constexpr uint32_t kMaxDims = 4;
// The alignment must be a power of two; ggml caps it at 1 MiB (larger ones aborted or read out of
// bounds, llama.cpp PR 24997).
inline constexpr uint32_t kMaxAlignment = uint32_t{1} << 20;
inline constexpr uint32_t kDefaultAlignment = 32;
// Counts: far above any model (the largest MoE files hold a few thousand tensors and a hundred
// keys); each is also checked against the bytes left, at the smallest size an entry can have,
// before a vector is sized from it.
inline constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
inline constexpr uint64_t kMaxMetadataEntries = uint64_t{1} << 20;

// A split model's parts (split.count, a u16 in llama.cpp's gguf-split): each is mapped at once;
// real sets have tens of parts, the cap keeps a forged count from opening thousands of files.
inline constexpr uint64_t kMaxSplitParts = 1024;

enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
  // An experiment of gguf-py's writer in early 2024 (llama.cpp's models/test_writer.gguf holds
  // it), in no specification and refused by ggml: an object, written as an array of its members'
  // names (each member a key of its own, `.<key>.<member>`). An array of objects or arrays then
  // held no elements: each was a key of its own, `.<key>[<i>]`, after the array (told from the
  // specification's nested arrays by that key's name coming next). Read so; verify says so.
  kObject = 13,
};
std::string_view ValueTypeName(ValueType type);  // "u32", "string", "array"

// One metadata value. Scalars are decoded; a string is a view of the file's bytes; an array keeps
// its element type and count, its first kKeptArrayItems items as values (nested arrays as their
// summary) and where it starts.
struct MetadataValue {
  ValueType type = ValueType::kU8;
  uint64_t u = 0;        // unsigned types and bool
  int64_t i = 0;         // signed types
  double f = 0;          // f32, f64
  std::string_view text; // string
  // array
  ValueType element_type = ValueType::kU8;
  uint64_t count = 0;
  std::vector<MetadataValue> items;  // the first kKeptArrayItems
  uint64_t offset = 0;               // where the value starts in the file
  bool elements_as_keys = false;     // the object experiment's array (see ValueType::kObject)
  std::string_view key;              // the key it belongs to
};
inline constexpr size_t kKeptArrayItems = 16;
// ParseGguf with every_item keeps every array item (trove::ReadGgufMetadata): at most this many
// items in all, nested ones counted. The largest vocabularies hold about a million (tokens, scores,
// types and merges of a 262k-token model); the cap bounds memory (an item is about 150 bytes) for a
// file of many small arrays, which the file's size alone would not.
inline constexpr uint64_t kMaxWholeArrayItems = uint64_t{1} << 21;

struct MetadataEntry {
  std::string_view key;
  uint64_t offset = 0;  // of the key's length field
  MetadataValue value;
};

struct TensorInfo {
  std::string_view name;
  uint64_t info_offset = 0;     // where its info starts
  uint32_t n_dims = 0;
  uint64_t ne[kMaxDims] = {1, 1, 1, 1};
  const GgmlType* type = nullptr;
  uint64_t offset = 0;          // from the data section
  uint64_t values = 0;          // product of ne
  uint64_t bytes = 0;           // its data's size
};

struct GgufLayout {
  uint32_t version = 0;
  bool big_endian = false;
  bool draft = false;           // the typed-field draft of July 2023
  std::string_view magic;
  std::vector<MetadataEntry> metadata;
  std::vector<TensorInfo> tensors;
  uint32_t alignment = kDefaultAlignment;
  bool alignment_given = false;
  uint64_t infos_end = 0;       // where the tensor infos end
  uint64_t data_offset = 0;     // the data section's start (infos_end aligned up)
  uint64_t data_end = 0;        // the end of the last tensor's bytes (data_offset when none)

  const MetadataEntry* Find(std::string_view key) const;
};

// True when `head` starts like a GGUF file ("GGUF", or "FUGG" with version 1).
bool LooksLikeGguf(std::string_view head);

// Parses and checks `size` bytes at `data` (a whole file): every rule above, every tensor's bytes
// inside the file and no two tensors overlapping. every_item: arrays keep every item, not the
// first kKeptArrayItems (Error(kLimit) beyond kMaxWholeArrayItems in all).
GgufLayout ParseGguf(const uint8_t* data, uint64_t size, bool every_item = false);

// A value as people read it: numbers in decimal, strings as they are, an array as its items
// ("[1, 2, 3]") when it has at most kShownArrayItems, else "32,000 strings".
inline constexpr size_t kShownArrayItems = 8;
std::string ValueText(const MetadataValue& value);
// "32,000": counts as info shows them.
std::string Thousands(uint64_t n);

}  // namespace trove::gguf
