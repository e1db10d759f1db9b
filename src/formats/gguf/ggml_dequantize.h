// formats/gguf/ggml_dequantize.h: ggml's block-quantized tensors as float32 values, computed as
// ggml's reference dequantizers (dequantize_row_*) compute them: the same float operations in
// the same order, so that every value is bit for bit ggml's. Q4_0, Q8_0, Q4_K and Q6_K for now.
//
// Blocks are read from the view's bytes (ReadGguf's raw-block views, little-endian), window by
// window: memory is bounded by the chunk size whatever the tensor's. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <functional>

#include "trove/dtype.h"
#include "trove/tensor.h"

namespace trove::gguf {

// Whether DequantizeBlocks knows `dtype`.
bool CanDequantize(DType dtype);

// `n_blocks` blocks of `dtype` at `blocks` into n_blocks x values-per-block floats at `out`.
// Throws Error(kUnsupported) for a type it does not know.
void DequantizeBlocks(DType dtype, const uint8_t* blocks, uint64_t n_blocks, float* out);

// Every value of `view` (a raw-block view ReadGguf made) in row-major order, handed to fn in
// chunks of whole blocks (at most about chunk_values values each). Throws Error(kUnsupported)
// for a type DequantizeBlocks does not know or a big-endian file's blocks.
void ForEachDequantizedChunk(const TensorView& view, const std::function<void(const float*, size_t)>& fn,
                             size_t chunk_values = size_t{1} << 16);

}  // namespace trove::gguf
