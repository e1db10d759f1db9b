// trove/element_codec.h: the numeric value of one stored element, for every readable dtype.
//
// Used to print tensors (`trove cat --json`), compare them (diff) and cast them. Elements are
// given as little-endian bytes (TensorView::ForEachChunk's output). Pure functions, thread-safe.
#pragma once

#include <cstdint>

#include "trove/dtype.h"

namespace trove {

struct ElementValue {
  enum class Kind : uint8_t { kFloat, kInt, kUInt, kBool, kComplex, kFloatPair } kind = Kind::kFloat;
  double re = 0, im = 0;  // kFloat: re; kComplex and kFloatPair (float4 x2: low nibble first): re, im
  int64_t i = 0;          // kInt
  uint64_t u = 0;         // kUInt (also bits types)
  bool b = false;         // kBool (any nonzero byte is true)
};

// Throws Error(kUnsupported) for quantized dtypes.
ElementValue DecodeElement(DType dtype, const uint8_t* little_endian);

double HalfToDouble(uint16_t bits);
double BFloat16ToDouble(uint16_t bits);
// Round-to-nearest-even conversion used when casting to bfloat16.
uint16_t FloatToBFloat16(float value);
uint16_t FloatToHalf(float value);

}  // namespace trove
