// zip/zip_compress.h: streaming compressors for the zip writer (deflate, bzip2, lzma).
//
// Each holds one codec stream and a bounded output buffer: input of any size goes through in
// steps, and compressed bytes are handed to a sink as they come, so memory does not grow with
// the entry. The output is what Python's zipfile writes for the method (raw deflate at the
// default level, a bzip2 stream at level 9, the zip LZMA header then raw LZMA1 with an
// end-of-stream marker). Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "trove/zip_reader.h"

namespace trove {

class ZipCompressor {
 public:
  using Sink = std::function<void(const uint8_t* data, uint64_t size)>;
  // nullptr for kStored.
  static std::unique_ptr<ZipCompressor> Make(ZipMethod method);
  virtual ~ZipCompressor() = default;
  virtual void Push(const uint8_t* data, uint64_t size, const Sink& sink) = 0;
  virtual void Finish(const Sink& sink) = 0;
};

}  // namespace trove
