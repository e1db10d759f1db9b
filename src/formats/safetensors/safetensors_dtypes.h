// formats/safetensors/safetensors_dtypes.h: the safetensors dtype table.
//
// Rows in the reference implementation's Dtype declaration order: its writer sorts tensors by
// that order, descending, so `rank` is what the writer sorts by. Pure lookups; thread-safe.
#pragma once

#include <optional>
#include <string_view>

#include "trove/dtype.h"

namespace trove {

struct SafetensorsDType {
  std::string_view name;       // "F32"
  int rank;                    // position in the reference's Dtype enum
  unsigned bits;               // bits per element as the header's shape counts elements
  std::optional<DType> dtype;  // trove's type (F4: float4_e2m1fn_x2, two elements a byte); none for F6
};

const SafetensorsDType* SafetensorsDTypeByName(std::string_view name);
const SafetensorsDType* SafetensorsDTypeOf(DType dtype);

}  // namespace trove
