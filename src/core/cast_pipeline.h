// core/cast_pipeline.h: writing tensors one after another while their casts run on every thread.
//
// A writer puts its tensors into one output stream in order. When they are cast on the way
// (convert --dtype), reading and converting each tensor is most of the work, and the write into
// the output is the part that must stay in order. RunOrderedWrites cuts the cast tensors into
// windows of output and the windows into pieces, has every worker thread read and convert pieces
// (each reads its own input: a pread or the mapping), and lets whichever thread finds the next
// window complete, with nobody writing, write it. So the write of one window overlaps the
// conversion of the next ones, across tensors too: the tail of one tensor is written while the
// next is being converted. A bounded ring of windows holds the output (kCastWindowsInFlight x
// kCastWindowBytes, in tensor.cpp) whatever the sizes.
//
// Items that are not such casts (bytes copied as they are, gathered views, quantized sources)
// are written in their turn by the writing thread as they were before. Every callback (an item's
// begin, body and end, and `write`) is called by one thread at a time, in the items' order, but
// not necessarily on the calling thread: they must not rely on thread-local state. Output bytes
// never depend on the thread count. An exception from any callback or read stops the run and is
// rethrown to the caller (the lowest failing piece's, as RunPieces does). Implemented next to the
// casts themselves, in tensor.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "trove/tensor.h"

namespace trove {

struct OrderedWrite {
  std::function<void()> begin;         // run in order before the item's bytes (may be empty)
  const TensorView* view = nullptr;    // the item's bytes (its ForEachChunk bytes), handed to `write`
  std::function<void()> body;          // instead of a view: run in order
  std::function<void()> end;           // run in order after the item's bytes (may be empty)
};

// A checksum the output needs of the bytes written (a zip entry's CRC-32), taken by the threads
// that convert the pieces rather than by the one writing: one thread checksumming every byte in
// order would be the part of a cast that more threads cannot shorten. `of` checksums a piece's
// output bytes, starting from zero; `combine(a, b, n)` is the checksum of bytes whose first part
// has checksum a and whose last n bytes have checksum b. A pipelined window is then handed to
// `write` with its checksum; every other byte still goes through the plain `write`.
struct PieceChecksum {
  std::function<uint32_t(const uint8_t*, size_t)> of;
  std::function<uint32_t(uint32_t, uint32_t, uint64_t)> combine;
  std::function<void(const uint8_t*, size_t, uint32_t)> write;
};

// Runs the items in order as described above; views must outlive the call.
void RunOrderedWrites(const std::vector<OrderedWrite>& items, const std::function<void(const uint8_t*, size_t)>& write,
                      const PieceChecksum* checksum = nullptr);

}  // namespace trove
