// trove/dtype.h: the element types trove knows, one table shared by every format.
//
// The table covers every row of the container spec's number-format table plus torch's legacy
// quantized and bit types (known so that they are reported by name and refused for reading).
// ggml's block-quantized types (GGUF files, docs/gguf.md) are rows too, so that a quantized tensor
// keeps its type's name: a view of such a type holds its raw blocks, one byte per element
// (element_size 1; the last dimension counts bytes of blocks, not values), so that every byte
// count (nbytes, bounds, writers) stays right without knowing the block layout; the block layout
// (values and bytes per block) is in the table (block_values, block_bytes); ggml's ids for them
// live with the GGUF reader (formats/gguf/ggml_types.h). They are kQuantized and not readable
// element by element: their values come whole blocks at a time, through CastView (trove/tensor.h)
// for the types core/ggml_blocks.h dequantizes.
// All functions are pure lookups into a static table: thread-safe, no allocation.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace trove {

enum class DType : uint8_t {
  kFloat32, kFloat64, kFloat16, kBFloat16,
  kInt64, kInt32, kInt16, kInt8,
  kUInt8, kUInt16, kUInt32, kUInt64,
  kBool,
  kComplex32, kComplex64, kComplex128,
  kFloat8E4M3FN, kFloat8E5M2, kFloat8E4M3FNUZ, kFloat8E5M2FNUZ, kFloat8E8M0FNU,
  kFloat4E2M1FNx2,
  // Quantized: reported, never read (their meaning needs scale/zero point outside the bytes).
  kQInt8, kQUInt8, kQInt32, kQUInt4x2, kQUInt2x4,
  // Opaque bit containers: readable as raw bytes only.
  kBits8, kBits16, kBits1x8, kBits2x4, kBits4x2,
  // ggml's block-quantized types, as raw blocks (see above).
  kGgmlQ4_0, kGgmlQ4_1, kGgmlQ5_0, kGgmlQ5_1, kGgmlQ8_0, kGgmlQ8_1,
  kGgmlQ2_K, kGgmlQ3_K, kGgmlQ4_K, kGgmlQ5_K, kGgmlQ6_K, kGgmlQ8_K,
  kGgmlIQ2_XXS, kGgmlIQ2_XS, kGgmlIQ3_XXS, kGgmlIQ1_S, kGgmlIQ4_NL, kGgmlIQ3_S, kGgmlIQ2_S, kGgmlIQ4_XS,
  kGgmlIQ1_M, kGgmlTQ1_0, kGgmlTQ2_0, kGgmlMXFP4,
};

enum class DTypeKind : uint8_t { kFloat, kInt, kUInt, kBool, kComplex, kQuantized, kBits };

// The dtype whose elements are exactly C++'s T (float: kFloat32, int64_t: kInt64, bool: kBool,
// std::complex<float>: kComplex64 via DTypeOfComplex below); for TensorView::Span and trove::Save.
template <class T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  else if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::kInt64;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  else if constexpr (std::is_same_v<T, int16_t>) return DType::kInt16;
  else if constexpr (std::is_same_v<T, int8_t>) return DType::kInt8;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::kUInt8;
  else if constexpr (std::is_same_v<T, uint16_t>) return DType::kUInt16;
  else if constexpr (std::is_same_v<T, uint32_t>) return DType::kUInt32;
  else if constexpr (std::is_same_v<T, uint64_t>) return DType::kUInt64;
  else if constexpr (std::is_same_v<T, bool>) return DType::kBool;
  else static_assert(sizeof(T) == 0, "DTypeOf<T>: T is float, double, bool or a fixed-width integer type");
}

struct DTypeInfo {
  DType dtype;
  std::string_view name;           // canonical name (spec table): "float32", "float4_e2m1fn"
  std::string_view torch_name;     // attribute of the torch module: "float32", "float4_e2m1fn_x2"
  std::string_view storage_class;  // legacy typed storage ("FloatStorage"), empty if none
  uint8_t element_size;            // bytes per element as torch counts elements (x2 types: 1)
  uint8_t bits;                    // bits per value (float4: 4, bool: 8)
  DTypeKind kind;
  bool readable;                   // false for quantized types
  // ggml's block types only (0 for every other dtype): values and bytes per block.
  uint16_t block_values = 0;
  uint16_t block_bytes = 0;
};

const DTypeInfo& Info(DType dtype);
inline std::string_view Name(DType dtype) { return Info(dtype).name; }
inline uint64_t ElementSize(DType dtype) { return Info(dtype).element_size; }
// One of ggml's block-quantized dtypes (raw blocks, one byte per element).
inline bool IsBlockDType(DType dtype) { return Info(dtype).block_values != 0; }

// Every known dtype, in enum order.
std::span<const DTypeInfo> AllDTypes();

// Lookups. Each accepts exactly one spelling family; nullopt when unknown.
std::optional<DType> DTypeFromName(std::string_view canonical_or_torch_name);   // "float32", "float4_e2m1fn_x2"
std::optional<DType> DTypeFromTorchString(std::string_view s);                  // "torch.float32"
// str(dtype) in torch, DTypeFromTorchString's inverse: "torch." + torch_name ("torch.float32").
std::string TorchDtypeString(DType dtype);
std::optional<DType> DTypeFromStorageClass(std::string_view class_name);        // "FloatStorage"

}  // namespace trove
