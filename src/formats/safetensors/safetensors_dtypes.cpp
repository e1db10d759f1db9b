#include "formats/safetensors/safetensors_dtypes.h"

#include <array>

#include "trove/safetensors.h"

namespace trove {
namespace {

constexpr std::array<SafetensorsDType, 22> kDTypes = {{
    {"BOOL", 0, 8, DType::kBool},
    {"F4", 1, 4, DType::kFloat4E2M1FNx2},
    {"F6_E2M3", 2, 6, std::nullopt},
    {"F6_E3M2", 3, 6, std::nullopt},
    {"U8", 4, 8, DType::kUInt8},
    {"I8", 5, 8, DType::kInt8},
    {"F8_E5M2", 6, 8, DType::kFloat8E5M2},
    {"F8_E4M3", 7, 8, DType::kFloat8E4M3FN},
    {"F8_E8M0", 8, 8, DType::kFloat8E8M0FNU},
    {"F8_E4M3FNUZ", 9, 8, DType::kFloat8E4M3FNUZ},
    {"F8_E5M2FNUZ", 10, 8, DType::kFloat8E5M2FNUZ},
    {"I16", 11, 16, DType::kInt16},
    {"U16", 12, 16, DType::kUInt16},
    {"F16", 13, 16, DType::kFloat16},
    {"BF16", 14, 16, DType::kBFloat16},
    {"I32", 15, 32, DType::kInt32},
    {"U32", 16, 32, DType::kUInt32},
    {"F32", 17, 32, DType::kFloat32},
    {"C64", 18, 64, DType::kComplex64},
    {"F64", 19, 64, DType::kFloat64},
    {"I64", 20, 64, DType::kInt64},
    {"U64", 21, 64, DType::kUInt64},
}};

}  // namespace

const SafetensorsDType* SafetensorsDTypeByName(std::string_view name) {
  for (const auto& row : kDTypes)
    if (row.name == name) return &row;
  return nullptr;
}

const SafetensorsDType* SafetensorsDTypeOf(DType dtype) {
  for (const auto& row : kDTypes)
    if (row.dtype == dtype) return &row;
  return nullptr;
}

std::string_view SafetensorsDTypeName(DType dtype) {
  const SafetensorsDType* row = SafetensorsDTypeOf(dtype);
  return row ? row->name : std::string_view();
}

}  // namespace trove
