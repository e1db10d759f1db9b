// core/ggml_blocks.h: the values of ggml's block-quantized dtypes (trove/dtype.h's kGgml* rows),
// computed as ggml's reference dequantizers (dequantize_row_* in ggml-quants.c) compute them:
// the same float operations in the same order, so that every value is bit for bit ggml's.
//
// CastView (trove/tensor.h) is how every command reaches them: a block view converted to a
// floating dtype streams its values whole blocks at a time. The common types (Q4_0, Q8_0, Q4_K,
// Q6_K) also have AVX2 kernels chosen at run time, bit for bit the portable ones. Pure
// functions: thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "trove/dtype.h"

namespace trove {

// The largest block, in values and in bytes (Q8_K: 256 values in 292 bytes), for callers that
// hold one block on the stack.
inline constexpr uint32_t kMaxBlockValues = 256;
inline constexpr uint32_t kMaxBlockBytes = 292;

// Whether DequantizeBlocks knows `dtype`.
bool CanDequantizeBlocks(DType dtype);

// The block types DequantizeBlocks knows, for messages: "Q4_0, Q4_1, ...".
std::string DequantizedBlockTypes();

// `n_blocks` little-endian blocks of `dtype` at `blocks` into n_blocks x block_values floats at
// `out`. Throws Error(kUnsupported) for a type it does not know.
void DequantizeBlocks(DType dtype, const uint8_t* blocks, uint64_t n_blocks, float* out);

// The same with the portable scalar code only, whatever the CPU: the reference the vectorised
// kernels are tested against.
void DequantizeBlocksPortable(DType dtype, const uint8_t* blocks, uint64_t n_blocks, float* out);

// An fp16 scale as float, exactly as static_cast<float>(HalfToDouble(bits)) (every NaN the
// default quiet NaN), without its ldexp.
float HalfScale(uint16_t bits);

}  // namespace trove
