// formats/gguf/ggml_types.h: ggml's tensor types as GGUF files number them, with their block
// ggml id and the trove dtype a tensor of the type is read as (whose row in trove/dtype.h has the
// block layout).
//
// Ids 4, 5 (Q4_2, Q4_3), 31-33 (Q4_0_4_4 and its kin) and 36-38 (the IQ4_NL repacks) were removed
// from ggml and never appear in files written since; they are unknown here, as ggml treats them.
// A plain type (F32 ... I64) is one value per "block" of its own size; a block type's values come
// only through its blocks. Static table: thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "trove/dtype.h"

namespace trove::gguf {

struct GgmlType {
  uint32_t id;
  std::string_view name;    // ggml's own spelling: "F32", "Q4_K", "IQ2_XXS"
  DType dtype;              // plain types: their dtype; block types: the raw-block dtype (trove/dtype.h)

  // A block type (its layout is the dtype's: trove/dtype.h's block_values, block_bytes).
  bool quantized() const { return IsBlockDType(dtype); }
  // Values per block (1 for the plain types) and bytes per block.
  uint32_t block_values() const { return quantized() ? Info(dtype).block_values : 1; }
  uint32_t block_bytes() const { return quantized() ? Info(dtype).block_bytes : static_cast<uint32_t>(ElementSize(dtype)); }
};

// The type with ggml id `id`, or null for an id no ggml of today reads.
const GgmlType* FindGgmlType(uint32_t id);
// The type read as `dtype`, or null.
const GgmlType* GgmlTypeOf(DType dtype);

}  // namespace trove::gguf
