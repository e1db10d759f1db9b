// zip/zip_decompress.h: bounded decompression of one zip entry (deflate, bzip2, lzma).
//
// The output never grows past the declared uncompressed size: a stream that would produce more
// (a bomb, or a size lie) stops there with an error, and memory grows with the bytes actually
// produced, not with the declared size, so a lie cannot make trove allocate gigabytes up front.
// The compressed stream must end exactly at the end of the entry's compressed bytes.
// Every function here is an Inflater underneath, so they all check the same things.
// Thread-safe: no shared state (one Inflater is used by one thread at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "trove/shared_bytes.h"

namespace trove::zip {

// Pull-style decompression: each Read produces the next bytes of the entry straight into the
// caller's buffer, so that two entries can be inflated side by side, window by window (trove
// diff of two compressed .tdz leaves), holding only the codecs' own state (at most the entry's
// size of LZMA dictionary, 900 kB for bzip2, 32 kB for deflate).
class Inflater {
 public:
  // Over the compressed bytes [src, +compressed_size), which must stay valid while it lives.
  // Throws at once what the entry's header alone shows: Error(kLimit) for a declared size beyond
  // kMaxInflatedEntryBytes, Error(kUnsupported) for other methods, Error(kCorrupt) for a bad
  // LZMA header. `where` prefixes error messages ("entry 'a/b' @ 1234").
  Inflater(uint16_t method, const uint8_t* src, uint64_t compressed_size, uint64_t uncompressed_size,
           std::string where);
  ~Inflater();
  Inflater(Inflater&&) noexcept;
  Inflater& operator=(Inflater&&) noexcept;

  // Fills out[0, n) with the next bytes and returns how many: n, or fewer only at the declared
  // end. The call that produces the last byte also checks that the stream ends exactly there
  // (Finish). Throws Error(kCorrupt) naming `where` for invalid data, a stream that ends early
  // or stalls, and for what Finish checks; the Inflater is not usable after an error.
  size_t Read(uint8_t* out, size_t n);
  // Inflates the next n bytes (at most remaining()) and drops them.
  void Skip(uint64_t n);
  // Checks that the compressed stream ends here, every compressed byte used: nothing more
  // decompresses (a bomb), no bytes follow it. Needs every byte read (Error(kUsage) otherwise);
  // does nothing the second time. A reader that stops early never calls it.
  void Finish();

  uint64_t produced() const;   // bytes read or skipped so far
  uint64_t remaining() const;  // bytes left before the declared end

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// `where` prefixes error messages ("entry 'a/b' @ 1234"). Throws Error(kCorrupt) on bad data,
// size mismatches and trailing bytes, Error(kUnsupported) for other methods.
SharedBytes Decompress(uint16_t method, const uint8_t* src, uint64_t compressed_size, uint64_t uncompressed_size,
                       std::string_view where);
// The same checks, the output handed to fn in bounded windows instead of held (memory stays
// bounded whatever the entry's size). fn may throw to stop early.
void DecompressStream(uint16_t method, const uint8_t* src, uint64_t compressed_size, uint64_t uncompressed_size,
                      std::string_view where, const std::function<void(const uint8_t*, size_t)>& fn);
// The entry's payload as deferred bytes (SharedBytes::Deferred): nothing is inflated until the
// bytes are streamed (DecompressStream, each time) or asked for whole (Decompress, once). Stored
// entries are returned as they are. `compressed` must stay valid: it is kept. `file` (the
// archive's path, "" when unknown) is named by the errors of the inflating, which happens later,
// inside whatever pass reads the bytes: a writer's errors would otherwise name its output.
SharedBytes DeferredDecompress(SharedBytes compressed, uint16_t method, uint64_t uncompressed_size, std::string where,
                               std::string file = {});

}  // namespace trove::zip
