// trove/tensor_copy.h: a tensor's bytes written into a buffer the caller owns (Python's
// File.dequantize(out=), say), for when the caller has one and ForEachChunk's window and copy
// would be a second pass over the output. Holds nothing; thread-safe as the view's reads are.
#pragma once

#include <cstdint>

#include "trove/tensor.h"

namespace trove {

// The bytes view.ForEachChunk streams, written into `out` (room for view.nbytes()): a
// block-quantized source converted by CastView is dequantized straight into it on the worker
// threads; other views are streamed and copied.
void CopyTensorBytes(const TensorView& view, uint8_t* out);

}  // namespace trove
