// formats/pskd/pskd_reader.h: a .psk.d file as a trove Document (trove info/cat/convert).
//
// Leaf k of the sample type is the tensor under key "k" (nested tuples "k/j"), of shape
// [count, dims...], dtype uint8..uint64 for indices and float64/float32/bfloat16 for reals. Each is
// a zero-copy strided view into the mapping (samples interleave their leaves, so the leading
// stride steps over a whole sample); when a sample's size is not a multiple of the leaf's element
// size the leaf is gathered into an owned copy instead. Thread-safe: no shared state; the
// Document keeps the mapping alive.
#pragma once

#include <memory>

#include "trove/document.h"
#include "trove/shared_bytes.h"

namespace trove {

// E9001 for a params file (its layout needs the program); the header errors of pskd::ParseHeader.
Document ReadPskd(std::shared_ptr<MappedFile> file, const ReadOptions& options);

}  // namespace trove
