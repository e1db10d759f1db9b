#include "trove/dtype.h"

#include <array>

namespace trove {
namespace {

using K = DTypeKind;
constexpr std::array kTable = {
    DTypeInfo{DType::kFloat32, "float32", "float32", "FloatStorage", 4, 32, K::kFloat, true},
    DTypeInfo{DType::kFloat64, "float64", "float64", "DoubleStorage", 8, 64, K::kFloat, true},
    DTypeInfo{DType::kFloat16, "float16", "float16", "HalfStorage", 2, 16, K::kFloat, true},
    DTypeInfo{DType::kBFloat16, "bfloat16", "bfloat16", "BFloat16Storage", 2, 16, K::kFloat, true},
    DTypeInfo{DType::kInt64, "int64", "int64", "LongStorage", 8, 64, K::kInt, true},
    DTypeInfo{DType::kInt32, "int32", "int32", "IntStorage", 4, 32, K::kInt, true},
    DTypeInfo{DType::kInt16, "int16", "int16", "ShortStorage", 2, 16, K::kInt, true},
    DTypeInfo{DType::kInt8, "int8", "int8", "CharStorage", 1, 8, K::kInt, true},
    DTypeInfo{DType::kUInt8, "uint8", "uint8", "ByteStorage", 1, 8, K::kUInt, true},
    DTypeInfo{DType::kUInt16, "uint16", "uint16", "", 2, 16, K::kUInt, true},
    DTypeInfo{DType::kUInt32, "uint32", "uint32", "", 4, 32, K::kUInt, true},
    DTypeInfo{DType::kUInt64, "uint64", "uint64", "", 8, 64, K::kUInt, true},
    DTypeInfo{DType::kBool, "bool", "bool", "BoolStorage", 1, 8, K::kBool, true},
    DTypeInfo{DType::kComplex32, "complex32", "complex32", "", 4, 32, K::kComplex, true},
    DTypeInfo{DType::kComplex64, "complex64", "complex64", "ComplexFloatStorage", 8, 64, K::kComplex, true},
    DTypeInfo{DType::kComplex128, "complex128", "complex128", "ComplexDoubleStorage", 16, 128, K::kComplex, true},
    DTypeInfo{DType::kFloat8E4M3FN, "float8_e4m3fn", "float8_e4m3fn", "", 1, 8, K::kFloat, true},
    DTypeInfo{DType::kFloat8E5M2, "float8_e5m2", "float8_e5m2", "", 1, 8, K::kFloat, true},
    DTypeInfo{DType::kFloat8E4M3FNUZ, "float8_e4m3fnuz", "float8_e4m3fnuz", "", 1, 8, K::kFloat, true},
    DTypeInfo{DType::kFloat8E5M2FNUZ, "float8_e5m2fnuz", "float8_e5m2fnuz", "", 1, 8, K::kFloat, true},
    DTypeInfo{DType::kFloat8E8M0FNU, "float8_e8m0fnu", "float8_e8m0fnu", "", 1, 8, K::kFloat, true},
    DTypeInfo{DType::kFloat4E2M1FNx2, "float4_e2m1fn", "float4_e2m1fn_x2", "", 1, 4, K::kFloat, true},
    DTypeInfo{DType::kQInt8, "qint8", "qint8", "QInt8Storage", 1, 8, K::kQuantized, false},
    DTypeInfo{DType::kQUInt8, "quint8", "quint8", "QUInt8Storage", 1, 8, K::kQuantized, false},
    DTypeInfo{DType::kQInt32, "qint32", "qint32", "QInt32Storage", 4, 32, K::kQuantized, false},
    DTypeInfo{DType::kQUInt4x2, "quint4x2", "quint4x2", "QUInt4x2Storage", 1, 4, K::kQuantized, false},
    DTypeInfo{DType::kQUInt2x4, "quint2x4", "quint2x4", "QUInt2x4Storage", 1, 2, K::kQuantized, false},
    DTypeInfo{DType::kBits8, "bits8", "bits8", "", 1, 8, K::kBits, true},
    DTypeInfo{DType::kBits16, "bits16", "bits16", "", 2, 16, K::kBits, true},
    DTypeInfo{DType::kBits1x8, "bits1x8", "bits1x8", "", 1, 1, K::kBits, true},
    DTypeInfo{DType::kBits2x4, "bits2x4", "bits2x4", "", 1, 2, K::kBits, true},
    DTypeInfo{DType::kBits4x2, "bits4x2", "bits4x2", "", 1, 4, K::kBits, true},
    // ggml's block types: raw blocks, one byte per element (trove/dtype.h), then values and bytes
    // per block as ggml's block structs (ggml-common.h, QK_K = 256) make them. torch has no such
    // dtype; the torch name only keeps the table's lookups total (no writer emits it).
    DTypeInfo{DType::kGgmlQ4_0, "ggml_q4_0", "", "", 1, 8, K::kQuantized, false, 32, 18},
    DTypeInfo{DType::kGgmlQ4_1, "ggml_q4_1", "", "", 1, 8, K::kQuantized, false, 32, 20},
    DTypeInfo{DType::kGgmlQ5_0, "ggml_q5_0", "", "", 1, 8, K::kQuantized, false, 32, 22},
    DTypeInfo{DType::kGgmlQ5_1, "ggml_q5_1", "", "", 1, 8, K::kQuantized, false, 32, 24},
    DTypeInfo{DType::kGgmlQ8_0, "ggml_q8_0", "", "", 1, 8, K::kQuantized, false, 32, 34},
    DTypeInfo{DType::kGgmlQ8_1, "ggml_q8_1", "", "", 1, 8, K::kQuantized, false, 32, 36},
    DTypeInfo{DType::kGgmlQ2_K, "ggml_q2_k", "", "", 1, 8, K::kQuantized, false, 256, 84},
    DTypeInfo{DType::kGgmlQ3_K, "ggml_q3_k", "", "", 1, 8, K::kQuantized, false, 256, 110},
    DTypeInfo{DType::kGgmlQ4_K, "ggml_q4_k", "", "", 1, 8, K::kQuantized, false, 256, 144},
    DTypeInfo{DType::kGgmlQ5_K, "ggml_q5_k", "", "", 1, 8, K::kQuantized, false, 256, 176},
    DTypeInfo{DType::kGgmlQ6_K, "ggml_q6_k", "", "", 1, 8, K::kQuantized, false, 256, 210},
    DTypeInfo{DType::kGgmlQ8_K, "ggml_q8_k", "", "", 1, 8, K::kQuantized, false, 256, 292},
    DTypeInfo{DType::kGgmlIQ2_XXS, "ggml_iq2_xxs", "", "", 1, 8, K::kQuantized, false, 256, 66},
    DTypeInfo{DType::kGgmlIQ2_XS, "ggml_iq2_xs", "", "", 1, 8, K::kQuantized, false, 256, 74},
    DTypeInfo{DType::kGgmlIQ3_XXS, "ggml_iq3_xxs", "", "", 1, 8, K::kQuantized, false, 256, 98},
    DTypeInfo{DType::kGgmlIQ1_S, "ggml_iq1_s", "", "", 1, 8, K::kQuantized, false, 256, 50},
    DTypeInfo{DType::kGgmlIQ4_NL, "ggml_iq4_nl", "", "", 1, 8, K::kQuantized, false, 32, 18},
    DTypeInfo{DType::kGgmlIQ3_S, "ggml_iq3_s", "", "", 1, 8, K::kQuantized, false, 256, 110},
    DTypeInfo{DType::kGgmlIQ2_S, "ggml_iq2_s", "", "", 1, 8, K::kQuantized, false, 256, 82},
    DTypeInfo{DType::kGgmlIQ4_XS, "ggml_iq4_xs", "", "", 1, 8, K::kQuantized, false, 256, 136},
    DTypeInfo{DType::kGgmlIQ1_M, "ggml_iq1_m", "", "", 1, 8, K::kQuantized, false, 256, 56},
    DTypeInfo{DType::kGgmlTQ1_0, "ggml_tq1_0", "", "", 1, 8, K::kQuantized, false, 256, 54},
    DTypeInfo{DType::kGgmlTQ2_0, "ggml_tq2_0", "", "", 1, 8, K::kQuantized, false, 256, 66},
    DTypeInfo{DType::kGgmlMXFP4, "ggml_mxfp4", "", "", 1, 8, K::kQuantized, false, 32, 17},
};

}  // namespace

const DTypeInfo& Info(DType dtype) { return kTable[static_cast<size_t>(dtype)]; }

std::span<const DTypeInfo> AllDTypes() { return kTable; }

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const auto& row : kTable)
    if (row.name == name || row.torch_name == name) return row.dtype;
  // torch's aliases that str(dtype) never prints but users type.
  // and the short names of mixed-precision tools (bf16, fp16, ...).
  if (name == "half" || name == "fp16" || name == "f16") return DType::kFloat16;
  if (name == "bf16") return DType::kBFloat16;
  if (name == "fp32" || name == "f32") return DType::kFloat32;
  if (name == "fp64" || name == "f64") return DType::kFloat64;
  if (name == "float") return DType::kFloat32;
  if (name == "double") return DType::kFloat64;
  if (name == "long") return DType::kInt64;
  if (name == "int") return DType::kInt32;
  if (name == "short") return DType::kInt16;
  if (name == "cfloat") return DType::kComplex64;
  if (name == "cdouble") return DType::kComplex128;
  if (name == "chalf") return DType::kComplex32;
  return std::nullopt;
}

namespace {
constexpr std::string_view kTorchDtypePrefix = "torch.";
}  // namespace

std::string TorchDtypeString(DType dtype) { return std::string(kTorchDtypePrefix) + std::string(Info(dtype).torch_name); }

std::optional<DType> DTypeFromTorchString(std::string_view s) {
  if (!s.starts_with(kTorchDtypePrefix)) return std::nullopt;
  s.remove_prefix(kTorchDtypePrefix.size());
  if (s.empty()) return std::nullopt;  // ggml's block types have no torch name: torch has no such dtype
  for (const auto& row : kTable)
    if (row.torch_name == s) return row.dtype;
  return std::nullopt;
}

std::optional<DType> DTypeFromStorageClass(std::string_view class_name) {
  if (class_name.empty()) return std::nullopt;
  for (const auto& row : kTable)
    if (row.storage_class == class_name) return row.dtype;
  return std::nullopt;
}

}  // namespace trove
