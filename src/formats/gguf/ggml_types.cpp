#include "formats/gguf/ggml_types.h"

#include <array>

namespace trove::gguf {
namespace {

// Block sizes as ggml's type traits define them (ggml-common.h's block structs); QK_K = 256.
constexpr std::array kGgmlTypes = {
    GgmlType{0, "F32", 1, 4, DType::kFloat32, false},
    GgmlType{1, "F16", 1, 2, DType::kFloat16, false},
    GgmlType{2, "Q4_0", 32, 18, DType::kGgmlQ4_0, true},
    GgmlType{3, "Q4_1", 32, 20, DType::kGgmlQ4_1, true},
    GgmlType{6, "Q5_0", 32, 22, DType::kGgmlQ5_0, true},
    GgmlType{7, "Q5_1", 32, 24, DType::kGgmlQ5_1, true},
    GgmlType{8, "Q8_0", 32, 34, DType::kGgmlQ8_0, true},
    GgmlType{9, "Q8_1", 32, 36, DType::kGgmlQ8_1, true},
    GgmlType{10, "Q2_K", 256, 84, DType::kGgmlQ2_K, true},
    GgmlType{11, "Q3_K", 256, 110, DType::kGgmlQ3_K, true},
    GgmlType{12, "Q4_K", 256, 144, DType::kGgmlQ4_K, true},
    GgmlType{13, "Q5_K", 256, 176, DType::kGgmlQ5_K, true},
    GgmlType{14, "Q6_K", 256, 210, DType::kGgmlQ6_K, true},
    GgmlType{15, "Q8_K", 256, 292, DType::kGgmlQ8_K, true},
    GgmlType{16, "IQ2_XXS", 256, 66, DType::kGgmlIQ2_XXS, true},
    GgmlType{17, "IQ2_XS", 256, 74, DType::kGgmlIQ2_XS, true},
    GgmlType{18, "IQ3_XXS", 256, 98, DType::kGgmlIQ3_XXS, true},
    GgmlType{19, "IQ1_S", 256, 50, DType::kGgmlIQ1_S, true},
    GgmlType{20, "IQ4_NL", 32, 18, DType::kGgmlIQ4_NL, true},
    GgmlType{21, "IQ3_S", 256, 110, DType::kGgmlIQ3_S, true},
    GgmlType{22, "IQ2_S", 256, 82, DType::kGgmlIQ2_S, true},
    GgmlType{23, "IQ4_XS", 256, 136, DType::kGgmlIQ4_XS, true},
    GgmlType{24, "I8", 1, 1, DType::kInt8, false},
    GgmlType{25, "I16", 1, 2, DType::kInt16, false},
    GgmlType{26, "I32", 1, 4, DType::kInt32, false},
    GgmlType{27, "I64", 1, 8, DType::kInt64, false},
    GgmlType{28, "F64", 1, 8, DType::kFloat64, false},
    GgmlType{29, "IQ1_M", 256, 56, DType::kGgmlIQ1_M, true},
    GgmlType{30, "BF16", 1, 2, DType::kBFloat16, false},
    GgmlType{34, "TQ1_0", 256, 54, DType::kGgmlTQ1_0, true},
    GgmlType{35, "TQ2_0", 256, 66, DType::kGgmlTQ2_0, true},
    GgmlType{39, "MXFP4", 32, 17, DType::kGgmlMXFP4, true},
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
