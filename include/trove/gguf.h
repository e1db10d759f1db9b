// trove/gguf.h: a GGUF file's metadata read whole and typed, and edited (`trove gguf set` /
// `trove gguf del`, docs/gguf.md). Reading and writing GGUF go through trove::Open and trove::Convert like every
// format; this is what only GGUF has. Functions are thread-safe (no shared state); two edits of
// one file at once race as two renames do (the last one wins, each file whole).
#pragma once

#include <string>
#include <vector>

#include "trove/write_options.h"

namespace trove {

// One change to a GGUF file's metadata.
struct GgufMetadataEdit {
  std::string key;
  bool remove = false;  // delete the key (it must exist)
  // Setting: the value as text and its GGUF type's name ("string", "u8" ... "u64", "i8" ...
  // "i64", "f32", "f64", "bool"). An empty type is the key's present type, else "string".
  std::string type;
  std::string value;
};

// Rewrites the GGUF file `path` with `edits` applied in order: every other key kept byte for
// byte with its type, the tensors kept as they are (their bytes copied; offsets laid out anew,
// each at a multiple of the alignment). Written to a temporary beside it and renamed over it
// (never edited in place: a failure or a kill leaves the file as it was). general.alignment may
// be set (a u32 power of two up to 1 MiB) or deleted (32): the tensors are laid out by it.
// Throws Error(kNotFound) deleting a key the file lacks, Error(kUsage) for a value that does not
// parse as its type or an unknown type, Error(kUnsupported) setting a key that holds an array,
// and what reading and WriteGguf throw (a v1, big-endian or draft file's metadata is refused).
// One metadata value as the file holds it: its type and, by the type, one of the fields below.
struct GgufValue {
  std::string type;               // "u8" ... "u64", "i8" ... "i64", "f32", "f64", "bool", "string", "array", "object"
  uint64_t unsigned_integer = 0;  // u8-u64
  int64_t integer = 0;            // i8-i64
  double real = 0;                // f32 (exactly) and f64
  bool boolean = false;
  std::string text;               // string
  std::string element_type;       // array (and gguf-py's object experiment: its members' names)
  std::vector<GgufValue> items;   // array: every item (none when the experiment held them as keys)
};

struct GgufMetadataEntry {
  std::string key;
  GgufValue value;
};

// Every metadata entry of the GGUF file `path` in the file's order, arrays whole (`trove info`
// shows a summary). The file is checked as reading checks it; beyond that, Error(kLimit) when
// its arrays hold more than 2 Mi items in all (gguf::kMaxWholeArrayItems: memory).
std::vector<GgufMetadataEntry> ReadGgufMetadata(const std::string& path);

void EditGgufMetadata(const std::string& path, const std::vector<GgufMetadataEdit>& edits, const WriteOptions& options = {});

}  // namespace trove
