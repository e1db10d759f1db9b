// Whole-run casts (core/cast_runs.h).
//
// How they are vectorised, and why this way: plain loops written branch-free so that GCC
// vectorises them, compiled twice (target_clones: AVX2 and the x86-64 baseline, SSE2) and chosen
// by the loader for the CPU; and for float16, whose conversion is one instruction with F16C, that
// instruction through its intrinsics in a function built for F16C, chosen at run time by
// __builtin_cpu_supports, with a branch-free loop as the fallback. No library: the handful of
// pairs people cast whole checkpoints with does not need Highway's dispatch machinery, and the
// compiler's own dispatch keeps one source for every CPU. docs/performance.md has the figures.
#include "core/cast_runs.h"

#include <algorithm>
#include <bit>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "trove/element_codec.h"

namespace trove {
namespace {

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TROVE_VECTORIZED __attribute__((optimize("tree-vectorize"), target_clones("avx2", "default")))
#elif defined(__GNUC__) && !defined(__clang__)
#define TROVE_VECTORIZED __attribute__((optimize("tree-vectorize")))
#else
#define TROVE_VECTORIZED
#endif

// Runs are counted in 32 bits per call: callers cut runs at kRun elements.
constexpr size_t kRun = size_t{1} << 30;

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// float32 -> bfloat16, branch-free.
TROVE_VECTORIZED
void Float32ToBFloat16Run(const uint8_t* in, uint8_t* out, size_t n, LossCounts& losses) {
  uint32_t overflowed = 0, underflowed = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t f = Load<uint32_t>(in + 4 * i);
    const uint32_t magnitude = f & 0x7FFFFFFFu;
    const uint32_t nan = magnitude > 0x7F800000u;
    const uint32_t rounded = (f + 0x7FFFu + ((f >> 16) & 1u)) >> 16;
    const uint32_t quiet = (f >> 16) | 0x40u;
    const uint16_t b = static_cast<uint16_t>(nan ? quiet : rounded);
    overflowed += (magnitude < 0x7F800000u) & ((b & 0x7F80u) == 0x7F80u);
    underflowed += (magnitude != 0) & (nan ^ 1u) & ((b & 0x7FFFu) == 0);
    Store(out + 2 * i, b);
  }
  losses.overflowed += overflowed;
  losses.underflowed += underflowed;
}

// The float16 a float32's bits round to (nearest even), NaN as a quiet NaN keeping the top of its
// payload (what F16C's vcvtps2ph gives, so both paths agree bit for bit), branch-free.
inline uint16_t HalfBitsOf(uint32_t f) {
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t magnitude = f & 0x7FFFFFFFu;
  const uint32_t nan = sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu);
  // Normal results: rebias the exponent and round the 13 dropped bits to nearest even (a carry
  // into the exponent is right, up to infinity).
  const uint32_t normal = ((magnitude - 0x38000000u) + 0xFFFu + ((magnitude >> 13) & 1u)) >> 13;
  // Subnormal results (magnitude below 2^-14): the float32's value plus 0.5 puts the float16's
  // subnormal bits in the low mantissa bits, rounded to nearest even by the FPU itself.
  const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + 0.5f) - 0x3F000000u;
  uint32_t h = magnitude < 0x38800000u ? sub : normal;
  h = magnitude >= 0x477FF000u ? 0x7C00u : h;  // rounds to infinity (65520 and above)
  h = magnitude > 0x7F800000u ? nan : (h | sign);
  return static_cast<uint16_t>(h);
}

TROVE_VECTORIZED
void Float32ToHalfPortable(const uint8_t* in, uint8_t* out, size_t n, uint32_t& overflowed, uint32_t& underflowed) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t f = Load<uint32_t>(in + 4 * i);
    const uint16_t h = HalfBitsOf(f);
    const uint32_t magnitude = f & 0x7FFFFFFFu;
    overflowed += (magnitude < 0x7F800000u) & ((h & 0x7C00u) == 0x7C00u);
    underflowed += (magnitude != 0) & (magnitude <= 0x7F800000u) & ((h & 0x7FFFu) == 0);
    Store(out + 2 * i, h);
  }
}

// The float32 bits of a float16 (exact), a NaN made quiet with its payload kept (vcvtph2ps's).
inline uint32_t FloatBitsOfHalf(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t magnitude = h & 0x7FFFu;
  const uint32_t normal = (magnitude << 13) + 0x38000000u;
  const uint32_t sub = std::bit_cast<uint32_t>(static_cast<float>(magnitude) * 0x1p-24f);  // exact
  uint32_t f = magnitude < 0x0400u ? sub : normal;
  f = magnitude >= 0x7C00u ? (0x7F800000u | (magnitude & 0x3FFu) << 13 | (magnitude > 0x7C00u ? 0x00400000u : 0)) : f;
  return f | sign;
}

TROVE_VECTORIZED
void HalfToFloat32Portable(const uint8_t* in, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) Store(out + 4 * i, FloatBitsOfHalf(Load<uint16_t>(in + 2 * i)));
}

#if defined(__x86_64__) && defined(__GNUC__)
#define TROVE_HAVE_F16C_PATH 1
// Eight at a time with F16C; the NaN results are then made HalfBitsOf's (vcvtps2ph already
// gives the same quiet NaN with the payload's top: nothing to do) and the losses counted.
__attribute__((target("avx2,f16c"))) void Float32ToHalfF16c(const uint8_t* in, uint8_t* out, size_t n,
                                                          uint32_t& overflowed, uint32_t& underflowed) {
  size_t i = 0;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i h_inf = _mm256_set1_epi32(0x7C00), h_abs = _mm256_set1_epi32(0x7FFF), zero = _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi32(1);
  __m256i over = zero, under = zero;
  for (; i + 8 <= n; i += 8) {
    const __m256i f = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 4 * i));
    const __m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
    const __m256i m = _mm256_and_si256(f, abs_mask);
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i finite = _mm256_cmpgt_epi32(inf, m);                                  // m < inf
    const __m256i h_is_inf = _mm256_cmpeq_epi32(_mm256_and_si256(h32, h_inf), h_inf);
    const __m256i h_is_zero = _mm256_cmpeq_epi32(_mm256_and_si256(h32, h_abs), zero);
    const __m256i nonzero_not_nan = _mm256_andnot_si256(_mm256_cmpeq_epi32(m, zero), _mm256_cmpgt_epi32(inf, _mm256_sub_epi32(m, one)));
    over = _mm256_sub_epi32(over, _mm256_and_si256(finite, h_is_inf));
    under = _mm256_sub_epi32(under, _mm256_and_si256(nonzero_not_nan, h_is_zero));
  }
  alignas(32) uint32_t o[8], u[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(o), over);
  _mm256_store_si256(reinterpret_cast<__m256i*>(u), under);
  for (int k = 0; k < 8; ++k) overflowed += o[k], underflowed += u[k];
  Float32ToHalfPortable(in + 4 * i, out + 2 * i, n - i, overflowed, underflowed);
}

__attribute__((target("avx2,f16c"))) void HalfToFloat32F16c(const uint8_t* in, uint8_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    _mm256_storeu_ps(reinterpret_cast<float*>(out + 4 * i), _mm256_cvtph_ps(h));
  }
  HalfToFloat32Portable(in + 2 * i, out + 4 * i, n - i);
}

// F16C from CPUID (clang 14's __builtin_cpu_supports does not know "f16c"), AVX2 from the
// compiler's table (which also asks whether the OS saves the YMM registers).
bool HasF16c() {
  static const bool has = [] {
    unsigned int a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_F16C) == 0) return false;
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}
#endif

void Float32ToHalfRun(const uint8_t* in, uint8_t* out, size_t n, LossCounts& losses) {
  uint32_t overflowed = 0, underflowed = 0;
#ifdef TROVE_HAVE_F16C_PATH
  if (HasF16c()) Float32ToHalfF16c(in, out, n, overflowed, underflowed);
  else
#endif
    Float32ToHalfPortable(in, out, n, overflowed, underflowed);
  losses.overflowed += overflowed;
  losses.underflowed += underflowed;
}

void HalfToFloat32Run(const uint8_t* in, uint8_t* out, size_t n) {
#ifdef TROVE_HAVE_F16C_PATH
  if (HasF16c()) return HalfToFloat32F16c(in, out, n);
#endif
  HalfToFloat32Portable(in, out, n);
}

TROVE_VECTORIZED
void BFloat16ToFloat32Run(const uint8_t* in, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) Store(out + 4 * i, uint32_t{Load<uint16_t>(in + 2 * i)} << 16);
}

// float64 -> float32: the hardware's rounding (nearest even), which is StoreElement's
// static_cast; NaN stays NaN.
TROVE_VECTORIZED
void Float64ToFloat32Run(const uint8_t* in, uint8_t* out, size_t n, LossCounts& losses) {
  uint32_t overflowed = 0, underflowed = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = Load<double>(in + 8 * i);
    const float f = static_cast<float>(d);
    const uint64_t dm = std::bit_cast<uint64_t>(d) & 0x7FFFFFFFFFFFFFFFull;
    const uint32_t fm = std::bit_cast<uint32_t>(f) & 0x7FFFFFFFu;
    overflowed += (dm < 0x7FF0000000000000ull) & (fm == 0x7F800000u);
    underflowed += (dm != 0) & (dm <= 0x7FF0000000000000ull) & (fm == 0);
    Store(out + 4 * i, f);
  }
  losses.overflowed += overflowed;
  losses.underflowed += underflowed;
}

// Exact conversions: every value of From is a value of To (widenings), so nothing to count.
template <typename From, typename To>
TROVE_VECTORIZED void WidenRun(const uint8_t* in, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) Store(out + sizeof(To) * i, static_cast<To>(Load<From>(in + sizeof(From) * i)));
}

template <typename From>
bool WidenFrom(DType to, const uint8_t* in, uint8_t* out, size_t n) {
  constexpr bool is_signed = std::is_signed_v<From>;
  switch (to) {
    case DType::kInt16: if constexpr (sizeof(From) < 2) return WidenRun<From, int16_t>(in, out, n), true; break;
    case DType::kInt32: if constexpr (sizeof(From) < 4) return WidenRun<From, int32_t>(in, out, n), true; break;
    case DType::kInt64: if constexpr (sizeof(From) < 8) return WidenRun<From, int64_t>(in, out, n), true; break;
    case DType::kUInt16: if constexpr (!is_signed && sizeof(From) < 2) return WidenRun<From, uint16_t>(in, out, n), true; break;
    case DType::kUInt32: if constexpr (!is_signed && sizeof(From) < 4) return WidenRun<From, uint32_t>(in, out, n), true; break;
    case DType::kUInt64: if constexpr (!is_signed && sizeof(From) < 8) return WidenRun<From, uint64_t>(in, out, n), true; break;
    case DType::kFloat32: if constexpr (sizeof(From) <= 2) return WidenRun<From, float>(in, out, n), true; break;
    case DType::kFloat64: if constexpr (sizeof(From) <= 4) return WidenRun<From, double>(in, out, n), true; break;
    default: break;
  }
  return false;
}

// Half and bfloat16 widen to float64 through float32, as torch does, so that a NaN keeps its
// sign and payload (the element-by-element path through a double made every NaN the one quiet
// NaN).
template <void (*ToFloat32)(const uint8_t*, uint8_t*, size_t)>
void WidenViaFloat32(const uint8_t* in, uint8_t* out, size_t n) {
  constexpr size_t kChunk = 1024;  // on the stack, in L1
  alignas(64) float chunk[kChunk];
  for (size_t done = 0; done < n; done += kChunk) {
    const size_t m = std::min(kChunk, n - done);
    ToFloat32(in + 2 * done, reinterpret_cast<uint8_t*>(chunk), m);
    WidenRun<float, double>(reinterpret_cast<const uint8_t*>(chunk), out + 8 * done, m);
  }
}

bool CastRunUpTo(DType from, DType to, const uint8_t* in, uint8_t* out, size_t n, LossCounts& losses) {
  switch (from) {
    case DType::kFloat32:
      if (to == DType::kBFloat16) return Float32ToBFloat16Run(in, out, n, losses), true;
      if (to == DType::kFloat16) return Float32ToHalfRun(in, out, n, losses), true;
      if (to == DType::kFloat64) return WidenRun<float, double>(in, out, n), true;
      return false;
    case DType::kBFloat16:
      if (to == DType::kFloat32) return BFloat16ToFloat32Run(in, out, n), true;
      if (to == DType::kFloat64) return WidenViaFloat32<BFloat16ToFloat32Run>(in, out, n), true;
      return false;
    case DType::kFloat16:
      if (to == DType::kFloat32) return HalfToFloat32Run(in, out, n), true;
      if (to == DType::kFloat64) return WidenViaFloat32<HalfToFloat32Run>(in, out, n), true;
      return false;
    case DType::kFloat64:
      if (to == DType::kFloat32) return Float64ToFloat32Run(in, out, n, losses), true;
      return false;
    case DType::kInt8: return WidenFrom<int8_t>(to, in, out, n);
    case DType::kUInt8: return WidenFrom<uint8_t>(to, in, out, n);
    case DType::kInt16: return WidenFrom<int16_t>(to, in, out, n);
    case DType::kUInt16: return WidenFrom<uint16_t>(to, in, out, n);
    case DType::kInt32: return WidenFrom<int32_t>(to, in, out, n);
    case DType::kUInt32: return WidenFrom<uint32_t>(to, in, out, n);
    default: return false;
  }
}

}  // namespace

void Float32ToHalfPortableRun(const uint8_t* in, uint8_t* out, size_t n, LossCounts& losses) {
  for (size_t done = 0; done < n; done += kRun) {
    uint32_t overflowed = 0, underflowed = 0;
    const size_t m = std::min(kRun, n - done);
    Float32ToHalfPortable(in + 4 * done, out + 2 * done, m, overflowed, underflowed);
    losses.overflowed += overflowed;
    losses.underflowed += underflowed;
  }
}

void HalfToFloat32PortableRun(const uint8_t* in, uint8_t* out, size_t n) { HalfToFloat32Portable(in, out, n); }

bool CastRun(DType from, DType to, const uint8_t* in, uint8_t* out, size_t n, LossCounts& losses) {
  const size_t in_size = ElementSize(from), out_size = ElementSize(to);
  for (size_t done = 0; done < n || n == 0; done += kRun) {
    const size_t m = std::min(kRun, n - done);
    if (!CastRunUpTo(from, to, in + in_size * done, out + out_size * done, m, losses)) return false;
    if (n == 0) break;
  }
  return true;
}

}  // namespace trove
