// The block layouts (ggml-common.h's structs, QK_K = 256) and ggml's reference arithmetic: fp16
// scales widened to float, products and differences in float, in ggml's order.
#include "formats/gguf/ggml_dequantize.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "formats/gguf/ggml_types.h"
#include "trove/element_codec.h"
#include "trove/error.h"

namespace trove::gguf {
namespace {

float Half(const uint8_t* p) { return static_cast<float>(HalfToDouble(static_cast<uint16_t>(p[0] | (p[1] << 8)))); }

// block_q4_0: d (fp16), qs[16]: value j is (low nibble of qs[j]) - 8, value j + 16 the high one.
void Q4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (qs[j] & 0x0F) - 8;
    const int x1 = (qs[j] >> 4) - 8;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

// block_q8_0: d (fp16), qs[32] (int8).
void Q8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// Q4_K's 6-bit scale and min of sub-block j, packed in 12 bytes.
void ScaleMinK4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// block_q4_K: d, dmin (fp16), scales[12], qs[128]: eight sub-blocks of 32, each
// d * scale * q - dmin * min.
void Q4_K(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float min = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, sc, m);
    const float d1 = d * sc, m1 = min * m;
    ScaleMinK4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// block_q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d (fp16).
void Q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn BlockFunction(DType dtype) {
  switch (dtype) {
    case DType::kGgmlQ4_0: return Q4_0;
    case DType::kGgmlQ8_0: return Q8_0;
    case DType::kGgmlQ4_K: return Q4_K;
    case DType::kGgmlQ6_K: return Q6_K;
    default: return nullptr;
  }
}

}  // namespace

bool CanDequantize(DType dtype) { return BlockFunction(dtype) != nullptr; }

void DequantizeBlocks(DType dtype, const uint8_t* blocks, uint64_t n_blocks, float* out) {
  const BlockFn fn = BlockFunction(dtype);
  const GgmlType* type = GgmlTypeOf(dtype);
  if (fn == nullptr || type == nullptr) {
    Fail(ErrorCode::kUnsupported, "dequantizing " + std::string(Name(dtype)) + " (trove dequantizes Q4_0, Q8_0, Q4_K and Q6_K)");
  }
  for (uint64_t i = 0; i < n_blocks; ++i) fn(blocks + i * type->block_bytes, out + i * type->block_values);
}

void ForEachDequantizedChunk(const TensorView& view, const std::function<void(const float*, size_t)>& fn, size_t chunk_values) {
  const GgmlType* type = GgmlTypeOf(view.dtype);
  if (type == nullptr || !type->quantized || !CanDequantize(view.dtype)) {
    Fail(ErrorCode::kUnsupported, "dequantizing " + std::string(Name(view.dtype)) + " (trove dequantizes Q4_0, Q8_0, Q4_K and Q6_K)");
  }
  if (view.byte_order == ByteOrder::kBig) Fail(ErrorCode::kUnsupported, "dequantizing a big-endian file's blocks");
  const uint64_t bytes = view.nbytes();
  if (bytes % type->block_bytes != 0) Fail(ErrorCode::kCorrupt, "a " + std::string(type->name) + " tensor of " + std::to_string(bytes) + " bytes: not whole blocks");
  const uint64_t per_chunk = std::max<uint64_t>(1, chunk_values / type->block_values);
  std::vector<float> values(per_chunk * type->block_values);
  std::vector<uint8_t> blocks(per_chunk * type->block_bytes);
  ElementReader reader(view);  // one byte an element: the blocks as stored, window by window
  for (uint64_t left = bytes / type->block_bytes; left > 0;) {
    const uint64_t n = std::min(left, per_chunk);
    reader.Read(n * type->block_bytes, blocks.data());
    DequantizeBlocks(view.dtype, blocks.data(), n, values.data());
    fn(values.data(), n * type->block_values);
    left -= n;
  }
}

}  // namespace trove::gguf
