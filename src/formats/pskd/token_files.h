// formats/pskd/token_files.h: token ids read from the files a tokenizer leaves, for lm-windows and tokens.
//
// A BPE tokenizer's output is kept as a numpy array (.npy: uint16, uint32, int32, int64, 1-D) or
// as raw little-endian ids (.bin of uint16 or uint32, as nanoGPT's prepare scripts write it); any
// other file is whitespace-separated decimal ids (presk data encode's output). Several files are
// one stream, concatenated in the order given. Binary files are mapped and read in chunks, text
// files streamed: memory stays bounded whatever the inputs' size. Not thread-safe; one object per
// command, living as long as the command reads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trove/dtype.h"
#include "trove/shared_bytes.h"

namespace trove::pskd {

// The element types a raw .bin of token ids may hold (--token-dtype).
std::optional<DType> TokenDTypeFromName(std::string_view name);  // "uint16", "uint32"

class TokenFiles {
 public:
  // Opens every input and checks what can be checked without reading ids: a .npy's header (a 1-D
  // little-endian integer array, all its bytes present), a .bin's dtype (`bin_dtype`, required
  // for .bin, else a usage error) and a size that is a multiple of its item size. Errors name the file.
  TokenFiles(const std::vector<std::string>& paths, std::optional<DType> bin_dtype);
  ~TokenFiles();
  TokenFiles(const TokenFiles&) = delete;
  TokenFiles& operator=(const TokenFiles&) = delete;

  // Calls sink(ids, n) with the ids of every file in order, in chunks. When `vocab` is given an
  // id at or above it is E9004 naming the file and where (text: the line; binary: the element);
  // a negative id of a signed .npy is E9004 too.
  void ForEach(std::optional<uint64_t> vocab, const std::function<void(const uint64_t*, size_t)>& sink) const;
  // The largest id (one pass); E9004 naming the inputs when they hold no token.
  uint64_t MaxId() const;

 private:
  struct Input;
  std::vector<std::unique_ptr<Input>> inputs_;
};

}  // namespace trove::pskd
