// The block layouts (ggml-common.h's structs, QK_K = 256) and ggml's reference arithmetic: fp16
// scales widened to float, integer quants converted to float, products and sums in float, in
// ggml's order (a * b - c stays two roundings, as ggml's C compiles it without FMA contraction).
#include "core/ggml_blocks.h"

#include <bit>
#include <cstring>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TROVE_HAVE_AVX2_BLOCKS 1
#endif

#include "trove/error.h"

namespace trove {

// Inline, branch-light and exact: a scale per 32 values is read often enough that the generic
// HalfToDouble (ldexp) was a third of Q8_0's time. Every NaN is float's default quiet NaN, as
// HalfToDouble gives it; subnormals are magnitude x 2^-24, exact in float.
float HalfScale(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t magnitude = h & 0x7FFFu;
  uint32_t f;
  if (magnitude >= 0x7C00u) f = magnitude == 0x7C00u ? 0x7F800000u : 0x7FC00000u;
  else if (magnitude < 0x0400u) f = std::bit_cast<uint32_t>(static_cast<float>(magnitude) * 0x1p-24f);
  else f = (magnitude << 13) + 0x38000000u;
  if (magnitude > 0x7C00u) return std::bit_cast<float>(f);  // NaN: HalfToDouble drops the sign
  return std::bit_cast<float>(f | sign);
}

namespace {

float Half(const uint8_t* p) { return HalfScale(static_cast<uint16_t>(p[0] | (p[1] << 8))); }
float F(int v) { return static_cast<float>(v); }

// block_q4_0: d (fp16), qs[16]: value j is (low nibble of qs[j]) - 8, value j + 16 the high one.
void Q4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = F((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = F((qs[j] >> 4) - 8) * d;
  }
}

// block_q4_1: d, m (fp16), qs[16]: nibble * d + m.
void Q4_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = F(qs[j] & 0x0F) * d + m;
    y[j + 16] = F(qs[j] >> 4) * d + m;
  }
}

// The fifth bits of Q5_0/Q5_1: bit j of the little-endian u32 qh for value j (j < 32).
uint32_t HighBits(const uint8_t* p) { return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24; }

// block_q5_0: d (fp16), qh[4], qs[16]: (nibble | fifth bit << 4) - 16, times d.
void Q5_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint32_t qh = HighBits(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int h0 = static_cast<int>((qh >> j) & 1) << 4, h1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
    y[j] = F(((qs[j] & 0x0F) | h0) - 16) * d;
    y[j + 16] = F(((qs[j] >> 4) | h1) - 16) * d;
  }
}

// block_q5_1: d, m (fp16), qh[4], qs[16]: (nibble | fifth bit << 4) * d + m.
void Q5_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  const uint32_t qh = HighBits(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int h0 = static_cast<int>((qh >> j) & 1) << 4, h1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
    y[j] = F((qs[j] & 0x0F) | h0) * d + m;
    y[j + 16] = F((qs[j] >> 4) | h1) * d + m;
  }
}

// block_q8_0: d (fp16), qs[32] (int8).
void Q8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = F(static_cast<int8_t>(b[2 + j])) * d;
}

// block_q2_K: scales[16] (scale low nibble, min high nibble), qs[64] (2 bits), d, dmin (fp16).
// Sixteen sub-blocks of 16: d * scale * q - dmin * min.
void Q2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = Half(b + 80), min = Half(b + 82);
  int is = 0;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * F(sc & 0xF), ml = min * F(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * F((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
  }
}

// block_q3_K: hmask[32] (third bits), qs[64] (low 2 bits), scales[12] (sixteen 6-bit scales), d.
// Value: d * (scale - 32) * (low bits - (third bit ? 0 : 4)).
void Q3_K(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* s = b + 96;
  const float d_all = Half(b + 108);
  int scale[16];
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    scale[j] = (low | (high << 4)) - 32;
  }
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * F(scale[is++]);
        for (int l = 16 * half; l < 16 * half + 16; ++l) *y++ = dl * F(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
      }
    }
  }
}

// Q4_K's and Q5_K's 6-bit scale and min of sub-block j, packed in 12 bytes.
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
    for (int l = 0; l < 32; ++l) *y++ = d1 * F(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * F(q[l] >> 4) - m2;
  }
}

// block_q5_K: d, dmin (fp16), scales[12], qh[32] (fifth bits), qs[128]: as Q4_K with the fifth
// bit of value l of the i-th 32 in bit i of qh[l].
void Q5_K(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float min = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, sc, m);
    const float d1 = d * sc, m1 = min * m;
    ScaleMinK4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * F((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * F((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
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
      y[l + 0] = d * F(sc[is + 0]) * F(q1);
      y[l + 32] = d * F(sc[is + 2]) * F(q2);
      y[l + 64] = d * F(sc[is + 4]) * F(q3);
      y[l + 96] = d * F(sc[is + 6]) * F(q4);
    }
  }
}

// block_q8_K: d (float32), qs[256] (int8), bsums[16] (int16, sums for dot products: unused here).
void Q8_K(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);  // little-endian host (element_codec.cpp asserts it)
  for (int j = 0; j < 256; ++j) y[j] = d * F(static_cast<int8_t>(b[4 + j]));
}

// The 4-bit non-linear types' 16 values: format constants of ggml-common.h (kvalues_iq4nl; the
// values of a file's nibbles, as fixed as the block layout itself), not tuning data.
constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// MXFP4's E2M1 values doubled (kvalues_mxfp4, the OCP microscaling format's 16 codes x 2): the
// scale is taken halved to match.
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// block_iq4_nl: d (fp16), qs[16]: value j is d x the table at qs[j]'s low nibble, j + 16 its high.
void IQ4_NL(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * F(kIq4nlValues[qs[j] & 0xF]);
    y[j + 16] = d * F(kIq4nlValues[qs[j] >> 4]);
  }
}

// block_iq4_xs: d (fp16), scales_h (u16: 2 high bits per 32 values), scales_l[4] (4 low bits per
// 32 values), qs[128]; each 32 values as IQ4_NL's with the scale d x (6-bit scale - 32).
void IQ4_XS(const uint8_t* b, float* y) {
  const float d = Half(b);
  const unsigned scales_h = b[2] | (b[3] << 8);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
    const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
    const float dl = d * F(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * F(kIq4nlValues[qs[j] & 0xF]);
      y[j + 16] = dl * F(kIq4nlValues[qs[j] >> 4]);
    }
  }
}

// A base-3 digit as ggml's TQ1_0 packs them: the byte times 3^n (mod 256), then its top trit.
float Trit(uint8_t byte, uint8_t power) {
  const uint8_t q = static_cast<uint8_t>(byte * power);
  return F(((q * 3) >> 8) - 1);
}

// block_tq1_0: qs[48] (5 ternary digits a byte), qh[4] (4 a byte), d (fp16): values -1, 0, 1 x d.
// Bytes 0-31 give 5 x 32 values (digit n of every byte, then the next digit), 32-47 5 x 16, qh 4 x 4.
void TQ1_0(const uint8_t* b, float* y) {
  constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t* qs = b;
  const uint8_t* qh = b + 48;
  const float d = Half(b + 52);
  for (int n = 0; n < 5; ++n)
    for (int m = 0; m < 32; ++m) *y++ = Trit(qs[m], kPow3[n]) * d;
  for (int n = 0; n < 5; ++n)
    for (int m = 0; m < 16; ++m) *y++ = Trit(qs[32 + m], kPow3[n]) * d;
  for (int n = 0; n < 4; ++n)
    for (int j = 0; j < 4; ++j) *y++ = Trit(qh[j], kPow3[n]) * d;
}

// block_tq2_0: qs[64] (2 bits a value: 0, 1, 2 for -1, 0, 1), d (fp16). Each 32 bytes give 128
// values: bits 0-1 of every byte, then bits 2-3, 4-5, 6-7.
void TQ2_0(const uint8_t* b, float* y) {
  const float d = Half(b + 64);
  for (int j = 0; j < 64; j += 32)
    for (int l = 0; l < 4; ++l)
      for (int m = 0; m < 32; ++m) *y++ = F(((b[j + m] >> (l * 2)) & 3) - 1) * d;
}

// block_mxfp4: e (E8M0 exponent), qs[16]: value j is the table at qs[j]'s low nibble x 2^(e - 128)
// (half the block's scale, as the table is doubled), j + 16 the high nibble's. e < 2 gives
// float32's subnormals 2^-128 and 2^-127, as ggml's ggml_e8m0_to_fp32_half builds them.
void MXFP4(const uint8_t* b, float* y) {
  const uint8_t e = b[0];
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  const uint8_t* qs = b + 1;
  for (int j = 0; j < 16; ++j) {
    y[j] = F(kMxfp4Values[qs[j] & 0xF]) * d;
    y[j + 16] = F(kMxfp4Values[qs[j] >> 4]) * d;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);
// A whole run of blocks at once, for the vectorised kernels.
using RunFn = void (*)(const uint8_t*, uint64_t, float*);

#ifdef TROVE_HAVE_AVX2_BLOCKS
// AVX2 kernels: the scalar functions' arithmetic, eight lanes at a time. Built for "avx2" only,
// not "fma", so that d * q - m stays a multiply and a subtract (two roundings, as ggml's C) and
// the values are bit for bit the scalar ones (GgmlDequantize tests compare them).
#define TROVE_AVX2 __attribute__((target("avx2")))

TROVE_AVX2 inline __m256 Int8x8(const uint8_t* p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))); }
TROVE_AVX2 inline __m256i Uint8x8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }

TROVE_AVX2 void Q8_0Avx2(const uint8_t* b, uint64_t n, float* y) {
  for (uint64_t i = 0; i < n; ++i, b += 34, y += 32) {
    const __m256 d = _mm256_set1_ps(Half(b));
    for (int j = 0; j < 32; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(Int8x8(b + 2 + j), d));
  }
}

TROVE_AVX2 void Q4_0Avx2(const uint8_t* b, uint64_t n, float* y) {
  const __m256i low = _mm256_set1_epi32(0x0F), eight = _mm256_set1_epi32(8);
  for (uint64_t i = 0; i < n; ++i, b += 18, y += 32) {
    const __m256 d = _mm256_set1_ps(Half(b));
    for (int j = 0; j < 16; j += 8) {
      const __m256i q = Uint8x8(b + 2 + j);
      const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(q, low), eight);
      const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight);
      _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), d));
      _mm256_storeu_ps(y + j + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(hi), d));
    }
  }
}

TROVE_AVX2 void Q4_KAvx2(const uint8_t* b, uint64_t n, float* y) {
  const __m256i low = _mm256_set1_epi32(0x0F);
  for (uint64_t i = 0; i < n; ++i, b += 144) {
    const float d = Half(b), min = Half(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
      uint8_t sc, m;
      ScaleMinK4(is, scales, sc, m);
      const __m256 d1 = _mm256_set1_ps(d * sc), m1 = _mm256_set1_ps(min * m);
      ScaleMinK4(is + 1, scales, sc, m);
      const __m256 d2 = _mm256_set1_ps(d * sc), m2 = _mm256_set1_ps(min * m);
      for (int l = 0; l < 32; l += 8) {
        const __m256i v = Uint8x8(q + l);
        _mm256_storeu_ps(y + l, _mm256_sub_ps(_mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_and_si256(v, low))), m1));
        _mm256_storeu_ps(y + 32 + l, _mm256_sub_ps(_mm256_mul_ps(d2, _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4))), m2));
      }
    }
  }
}

TROVE_AVX2 void Q6_KAvx2(const uint8_t* b, uint64_t n, float* y) {
  const __m256i low = _mm256_set1_epi32(0x0F), two = _mm256_set1_epi32(3), bias = _mm256_set1_epi32(32);
  for (uint64_t i = 0; i < n; ++i, b += 210) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = Half(b + 208);
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; l += 8) {
        const int is = l / 16;
        const __m256i a = Uint8x8(ql + l), c = Uint8x8(ql + l + 32), h = Uint8x8(qh + l);
        const __m256i q1 = _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(a, low), _mm256_slli_epi32(_mm256_and_si256(h, two), 4)), bias);
        const __m256i q2 = _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(c, low), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2), two), 4)), bias);
        const __m256i q3 = _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4), two), 4)), bias);
        const __m256i q4 = _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(c, 4), _mm256_slli_epi32(_mm256_srli_epi32(h, 6), 4)), bias);
        _mm256_storeu_ps(y + l, _mm256_mul_ps(_mm256_set1_ps(d * F(sc[is])), _mm256_cvtepi32_ps(q1)));
        _mm256_storeu_ps(y + l + 32, _mm256_mul_ps(_mm256_set1_ps(d * F(sc[is + 2])), _mm256_cvtepi32_ps(q2)));
        _mm256_storeu_ps(y + l + 64, _mm256_mul_ps(_mm256_set1_ps(d * F(sc[is + 4])), _mm256_cvtepi32_ps(q3)));
        _mm256_storeu_ps(y + l + 96, _mm256_mul_ps(_mm256_set1_ps(d * F(sc[is + 6])), _mm256_cvtepi32_ps(q4)));
      }
    }
  }
}

// AVX2 from the compiler's table (which also asks whether the OS saves the YMM registers).
bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") != 0;
  return has;
}
#endif

struct Dequantizer {
  DType dtype;
  const char* name;
  BlockFn fn;
  RunFn avx2 = nullptr;  // a vectorised run of blocks, where one is written
};

#ifdef TROVE_HAVE_AVX2_BLOCKS
#define TROVE_AVX2_RUN(f) f
#else
#define TROVE_AVX2_RUN(f) nullptr
#endif

constexpr Dequantizer kDequantizers[] = {
    {DType::kGgmlQ4_0, "Q4_0", Q4_0, TROVE_AVX2_RUN(Q4_0Avx2)}, {DType::kGgmlQ4_1, "Q4_1", Q4_1}, {DType::kGgmlQ5_0, "Q5_0", Q5_0},
    {DType::kGgmlQ5_1, "Q5_1", Q5_1}, {DType::kGgmlQ8_0, "Q8_0", Q8_0, TROVE_AVX2_RUN(Q8_0Avx2)}, {DType::kGgmlQ2_K, "Q2_K", Q2_K},
    {DType::kGgmlQ3_K, "Q3_K", Q3_K}, {DType::kGgmlQ4_K, "Q4_K", Q4_K, TROVE_AVX2_RUN(Q4_KAvx2)}, {DType::kGgmlQ5_K, "Q5_K", Q5_K},
    {DType::kGgmlQ6_K, "Q6_K", Q6_K, TROVE_AVX2_RUN(Q6_KAvx2)}, {DType::kGgmlQ8_K, "Q8_K", Q8_K}, {DType::kGgmlIQ4_NL, "IQ4_NL", IQ4_NL},
    {DType::kGgmlIQ4_XS, "IQ4_XS", IQ4_XS}, {DType::kGgmlTQ1_0, "TQ1_0", TQ1_0}, {DType::kGgmlTQ2_0, "TQ2_0", TQ2_0},
    {DType::kGgmlMXFP4, "MXFP4", MXFP4},
};

const Dequantizer* Find(DType dtype) {
  for (const Dequantizer& d : kDequantizers)
    if (d.dtype == dtype) return &d;
  return nullptr;
}

const Dequantizer& Known(DType dtype) {
  const Dequantizer* d = Find(dtype);
  if (d == nullptr) Fail(ErrorCode::kUnsupported, "dequantizing " + std::string(Name(dtype)) + " (trove dequantizes " + DequantizedBlockTypes() + ")");
  return *d;
}

void Portable(const Dequantizer& d, const uint8_t* blocks, uint64_t n_blocks, float* out) {
  const DTypeInfo& info = Info(d.dtype);
  for (uint64_t i = 0; i < n_blocks; ++i) d.fn(blocks + i * info.block_bytes, out + i * info.block_values);
}

}  // namespace

bool CanDequantizeBlocks(DType dtype) { return Find(dtype) != nullptr; }

std::string DequantizedBlockTypes() {
  std::string s;
  for (const Dequantizer& d : kDequantizers) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

void DequantizeBlocks(DType dtype, const uint8_t* blocks, uint64_t n_blocks, float* out) {
  const Dequantizer& d = Known(dtype);
#ifdef TROVE_HAVE_AVX2_BLOCKS
  if (d.avx2 != nullptr && HasAvx2()) return d.avx2(blocks, n_blocks, out);
#endif
  Portable(d, blocks, n_blocks, out);
}

void DequantizeBlocksPortable(DType dtype, const uint8_t* blocks, uint64_t n_blocks, float* out) {
  Portable(Known(dtype), blocks, n_blocks, out);
}

}  // namespace trove
