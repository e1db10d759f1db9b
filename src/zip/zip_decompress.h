// zip/zip_decompress.h: bounded decompression of one zip entry (deflate, bzip2, lzma).
//
// The output never grows past the declared uncompressed size: a stream that would produce more
// (a bomb, or a size lie) stops there with an error, and memory grows with the bytes actually
// produced, not with the declared size, so a lie cannot make trove allocate gigabytes up front.
// The compressed stream must end exactly at the end of the entry's compressed bytes.
// Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "trove/shared_bytes.h"

namespace trove::zip {

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
// entries are returned as they are. `compressed` must stay valid: it is kept.
SharedBytes DeferredDecompress(SharedBytes compressed, uint16_t method, uint64_t uncompressed_size, std::string where);

}  // namespace trove::zip
