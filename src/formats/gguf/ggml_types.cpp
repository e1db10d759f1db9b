#include "formats/gguf/ggml_types.h"

#include <array>

namespace trove::gguf {
namespace {

constexpr std::array kGgmlTypes = {
    GgmlType{0, "F32", DType::kFloat32},
    GgmlType{1, "F16", DType::kFloat16},
    GgmlType{2, "Q4_0", DType::kGgmlQ4_0},
    GgmlType{3, "Q4_1", DType::kGgmlQ4_1},
    GgmlType{6, "Q5_0", DType::kGgmlQ5_0},
    GgmlType{7, "Q5_1", DType::kGgmlQ5_1},
    GgmlType{8, "Q8_0", DType::kGgmlQ8_0},
    GgmlType{9, "Q8_1", DType::kGgmlQ8_1},
    GgmlType{10, "Q2_K", DType::kGgmlQ2_K},
    GgmlType{11, "Q3_K", DType::kGgmlQ3_K},
    GgmlType{12, "Q4_K", DType::kGgmlQ4_K},
    GgmlType{13, "Q5_K", DType::kGgmlQ5_K},
    GgmlType{14, "Q6_K", DType::kGgmlQ6_K},
    GgmlType{15, "Q8_K", DType::kGgmlQ8_K},
    GgmlType{16, "IQ2_XXS", DType::kGgmlIQ2_XXS},
    GgmlType{17, "IQ2_XS", DType::kGgmlIQ2_XS},
    GgmlType{18, "IQ3_XXS", DType::kGgmlIQ3_XXS},
    GgmlType{19, "IQ1_S", DType::kGgmlIQ1_S},
    GgmlType{20, "IQ4_NL", DType::kGgmlIQ4_NL},
    GgmlType{21, "IQ3_S", DType::kGgmlIQ3_S},
    GgmlType{22, "IQ2_S", DType::kGgmlIQ2_S},
    GgmlType{23, "IQ4_XS", DType::kGgmlIQ4_XS},
    GgmlType{24, "I8", DType::kInt8},
    GgmlType{25, "I16", DType::kInt16},
    GgmlType{26, "I32", DType::kInt32},
    GgmlType{27, "I64", DType::kInt64},
    GgmlType{28, "F64", DType::kFloat64},
    GgmlType{29, "IQ1_M", DType::kGgmlIQ1_M},
    GgmlType{30, "BF16", DType::kBFloat16},
    GgmlType{34, "TQ1_0", DType::kGgmlTQ1_0},
    GgmlType{35, "TQ2_0", DType::kGgmlTQ2_0},
    GgmlType{39, "MXFP4", DType::kGgmlMXFP4},
};

}  // namespace

const GgmlType* FindGgmlType(uint32_t id) {
  for (const GgmlType& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

const GgmlType* GgmlTypeOf(DType dtype) {
  for (const GgmlType& t : kGgmlTypes)
    if (t.dtype == dtype) return &t;
  return nullptr;
}

}  // namespace trove::gguf
