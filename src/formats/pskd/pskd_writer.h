// formats/pskd/pskd_writer.h: a trove Document written as a .psk.d file (trove convert).
//
// The document's tensors, all with the same leading dimension (the sample count), become the
// leaves of a tuple type, in the document's key order: reals as ℝ[...] stored f64/f32/bf16 by
// dtype (float64/float32/bfloat16), integers as idx[N][...] with N from the options or max + 1,
// bools as bool[...]. Any other dtype is an error naming the key. The file is written through an
// AtomicFile: a failure leaves nothing. Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trove/atomic_file.h"
#include "trove/document.h"
#include "trove/write_options.h"

namespace trove {

struct PskdWriteOptions : WriteOptions {
  // The bound N of every integer leaf; unset: each leaf's max + 1.
  std::optional<uint64_t> vocab;
};

void WritePskd(const Document& doc, const std::string& path, const PskdWriteOptions& opts);

}  // namespace trove
