// Tensor statistics: blocks of decoded float64 values, two passes per block, a pairwise tree of
// block moments, chunks of blocks spread over threads.
#include "trove/tensor_stats.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

#include "trove/element_codec.h"
#include "trove/error.h"

namespace trove {
namespace {

// Decoded values per block: 16 KB of doubles stays in the first-level cache for the block's
// second pass. The tree below merges blocks, so this also sets the rounding of the sums.
constexpr size_t kBlockValues = 2048;
// Blocks per chunk, the unit of work of a thread. A power of two: a whole chunk's blocks form one
// complete subtree of the pairwise tree, so merging chunk results in order gives exactly what one
// thread merging every block would (the figures do not depend on the thread count).
constexpr uint64_t kBlocksPerChunk = 256;

// The block loops run over four doubles at a time (GCC/Clang vector extensions: two SSE2
// operations each on any x86-64, one with AVX2, which the clones below pick at run time).
using Vec = double __attribute__((vector_size(32)));
using Mask = int64_t __attribute__((vector_size(32)));
using Vec4f = float __attribute__((vector_size(16)));
using Vec4u32 = uint32_t __attribute__((vector_size(16)));
using Vec4u16 = uint16_t __attribute__((vector_size(8)));
constexpr size_t kLanes = 4;

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define TROVE_STATS_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TROVE_STATS_CLONES
#endif

// --- Decoding ------------------------------------------------------------------------------

struct ByteTables {
  // Every value of each one-byte float format, decoded once by the element codec.
  std::array<std::array<double, 256>, 5> float8;  // e4m3fn, e5m2, e4m3fnuz, e5m2fnuz, e8m0fnu
  std::array<double, 16> float4;                   // e2m1fn, one nibble
};

const ByteTables& Tables() {
  static const ByteTables tables = [] {
    ByteTables t{};
    const DType f8[5] = {DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2FNUZ,
                         DType::kFloat8E8M0FNU};
    for (int k = 0; k < 5; ++k)
      for (int b = 0; b < 256; ++b) {
        const uint8_t byte = static_cast<uint8_t>(b);
        t.float8[k][b] = DecodeElement(f8[k], &byte).re;
      }
    for (int n = 0; n < 16; ++n) {
      const uint8_t byte = static_cast<uint8_t>(n);
      t.float4[n] = DecodeElement(DType::kFloat4E2M1FNx2, &byte).re;
    }
    return t;
  }();
  return tables;
}

int Float8Table(DType d) {
  switch (d) {
    case DType::kFloat8E4M3FN: return 0;
    case DType::kFloat8E5M2: return 1;
    case DType::kFloat8E4M3FNUZ: return 2;
    case DType::kFloat8E5M2FNUZ: return 3;
    case DType::kFloat8E8M0FNU: return 4;
    default: return -1;
  }
}

// float16 to float32 exactly, without the codec's per-element ldexp (this runs per element).
inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t em = h & 0x7FFFu;
  uint32_t bits;
  if (em >= 0x7C00u) {
    bits = 0x7F800000u | ((em & 0x3FFu) << 13);  // inf, NaN (payload kept)
  } else if (em >= 0x0400u) {
    bits = (em << 13) + ((127u - 15u) << 23);  // normal: rebias the exponent
  } else {
    bits = std::bit_cast<uint32_t>(static_cast<float>(em) * 0x1p-24f);  // zero, subnormal: exact
  }
  return std::bit_cast<float>(bits | sign);
}

template <class T>
inline T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void DecodeAs(const uint8_t* p, size_t n, double* out) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(Load<T>(p + i * sizeof(T)));
}

// How far ahead of the decoding the stored bytes are asked for: a mapped file's pages come from
// memory, and one thread's sequential reads alone do not keep enough of them in flight.
constexpr size_t kPrefetchBytes = 2048;

// n elements of little-endian bytes to float64 values; returns the number of values (2 per
// float4_e2m1fn_x2 element).
TROVE_STATS_CLONES
size_t Decode(DType dtype, const uint8_t* p, size_t n, double* out) {
  switch (dtype) {
    case DType::kFloat32: {
      size_t i = 0;
      for (; i + kLanes <= n; i += kLanes) {
        if (i % 16 == 0) __builtin_prefetch(p + 4 * i + kPrefetchBytes);
        Vec4f f;
        std::memcpy(&f, p + 4 * i, sizeof f);
        const Vec v = __builtin_convertvector(f, Vec);
        std::memcpy(out + i, &v, sizeof v);
      }
      for (; i < n; ++i) out[i] = Load<float>(p + 4 * i);
      return n;
    }
    case DType::kFloat64: std::memcpy(out, p, n * 8); return n;
    case DType::kFloat16:
      for (size_t i = 0; i < n; ++i) {
        if (i % 32 == 0) __builtin_prefetch(p + 2 * i + kPrefetchBytes);
        out[i] = HalfBitsToFloat(Load<uint16_t>(p + 2 * i));
      }
      return n;
    case DType::kBFloat16: {
      size_t i = 0;
      for (; i + kLanes <= n; i += kLanes) {
        if (i % 32 == 0) __builtin_prefetch(p + 2 * i + kPrefetchBytes);
        Vec4u16 h;
        std::memcpy(&h, p + 2 * i, sizeof h);
        const Vec4u32 bits = __builtin_convertvector(h, Vec4u32) << 16;
        const Vec v = __builtin_convertvector((Vec4f)bits, Vec);
        std::memcpy(out + i, &v, sizeof v);
      }
      for (; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t{Load<uint16_t>(p + 2 * i)} << 16);
      return n;
    }
    case DType::kInt64: DecodeAs<int64_t>(p, n, out); return n;
    case DType::kInt32: DecodeAs<int32_t>(p, n, out); return n;
    case DType::kInt16: DecodeAs<int16_t>(p, n, out); return n;
    case DType::kInt8: DecodeAs<int8_t>(p, n, out); return n;
    case DType::kUInt8: DecodeAs<uint8_t>(p, n, out); return n;
    case DType::kUInt16: DecodeAs<uint16_t>(p, n, out); return n;
    case DType::kUInt32: DecodeAs<uint32_t>(p, n, out); return n;
    case DType::kUInt64: DecodeAs<uint64_t>(p, n, out); return n;
    case DType::kBool:
      for (size_t i = 0; i < n; ++i) out[i] = p[i] != 0;
      return n;
    case DType::kComplex32:
      for (size_t i = 0; i < n; ++i)
        out[i] = std::hypot(double{HalfBitsToFloat(Load<uint16_t>(p + 4 * i))}, double{HalfBitsToFloat(Load<uint16_t>(p + 4 * i + 2))});
      return n;
    case DType::kComplex64:
      for (size_t i = 0; i < n; ++i) out[i] = std::hypot(double{Load<float>(p + 8 * i)}, double{Load<float>(p + 8 * i + 4)});
      return n;
    case DType::kComplex128:
      for (size_t i = 0; i < n; ++i) out[i] = std::hypot(Load<double>(p + 16 * i), Load<double>(p + 16 * i + 8));
      return n;
    case DType::kFloat4E2M1FNx2: {
      const auto& t = Tables().float4;
      for (size_t i = 0; i < n; ++i) {
        out[2 * i] = t[p[i] & 0xF];
        out[2 * i + 1] = t[p[i] >> 4];
      }
      return 2 * n;
    }
    default: {
      const int k = Float8Table(dtype);
      if (k < 0) Fail(ErrorCode::kUnsupported, std::string(Name(dtype)) + " has no statistics");
      const auto& t = Tables().float8[static_cast<size_t>(k)];
      for (size_t i = 0; i < n; ++i) out[i] = t[p[i]];
      return n;
    }
  }
}

size_t ValuesPerElement(DType d) { return d == DType::kFloat4E2M1FNx2 ? 2 : 1; }

// The smallest normal number of the dtype (of the components for complex): nonzero finite values
// below it are subnormal. 0 for dtypes without subnormals.
double SmallestNormal(DType d) {
  switch (d) {
    case DType::kFloat32: case DType::kBFloat16: case DType::kComplex64: return FLT_MIN;
    case DType::kFloat64: case DType::kComplex128: return DBL_MIN;
    case DType::kFloat16: case DType::kComplex32: case DType::kFloat8E5M2: return 0x1p-14;
    case DType::kFloat8E4M3FN: return 0x1p-6;
    case DType::kFloat8E4M3FNUZ: return 0x1p-7;
    case DType::kFloat8E5M2FNUZ: return 0x1p-15;
    case DType::kFloat4E2M1FNx2: return 1.0;
    default: return 0;  // integers, bool; float8_e8m0fnu has no subnormals
  }
}

bool IsFloating(DType d) {
  const auto kind = Info(d).kind;
  return kind == DTypeKind::kFloat || kind == DTypeKind::kComplex;
}

// --- Moments and their pairwise tree ---------------------------------------------------------

struct Moments {
  uint64_t n = 0;
  double sum = 0, sum_abs = 0, m2 = 0;  // m2: sum of squared deviations from the mean
};

// Chan, Golub and LeVeque's pairwise update: exact in exact arithmetic, stable in floating point.
Moments Merge(const Moments& a, const Moments& b) {
  if (a.n == 0) return b;
  if (b.n == 0) return a;
  Moments r;
  r.n = a.n + b.n;
  const double na = static_cast<double>(a.n), nb = static_cast<double>(b.n);
  const double delta = b.sum / nb - a.sum / na;
  r.sum = a.sum + b.sum;
  r.sum_abs = a.sum_abs + b.sum_abs;
  r.m2 = a.m2 + b.m2 + delta * delta * (na * nb / static_cast<double>(r.n));
  return r;
}

struct TreeNode {
  uint32_t level = 0;  // the node merges 2^level blocks
  Moments m;
};

// Pairwise merging in block order (a binary counter): each block's moments merge with their
// neighbour's, then pairs with pairs, so rounding grows with log2 of the block count.
struct PairwiseTree {
  std::vector<TreeNode> stack;
  void Push(const TreeNode& node) {
    stack.push_back(node);
    while (stack.size() >= 2 && stack[stack.size() - 1].level == stack[stack.size() - 2].level) {
      TreeNode& left = stack[stack.size() - 2];
      left.m = Merge(left.m, stack.back().m);
      ++left.level;
      stack.pop_back();
    }
  }
  Moments Finish() const {
    Moments r;
    for (size_t i = stack.size(); i-- > 0;) r = Merge(stack[i].m, r);
    return r;
  }
};

// What a run of blocks found, apart from the moments.
struct Extremes {
  double min = INFINITY, max = -INFINITY;
  double min_abs_nonzero = INFINITY;
  uint64_t finite = 0, zeros = 0, nan = 0, pos_inf = 0, neg_inf = 0, subnormal = 0;
  void Add(const Extremes& o) {
    min = std::min(min, o.min);
    max = std::max(max, o.max);
    min_abs_nonzero = std::min(min_abs_nonzero, o.min_abs_nonzero);
    finite += o.finite; zeros += o.zeros; nan += o.nan; pos_inf += o.pos_inf; neg_inf += o.neg_inf;
    subnormal += o.subnormal;
  }
};

// Removes the non-finite values of a block (counting them); returns how many remain.
size_t KeepFinite(double* x, size_t n, Extremes& e) {
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (std::isnan(v)) ++e.nan;
    else if (v == INFINITY) ++e.pos_inf;
    else if (v == -INFINITY) ++e.neg_inf;
    else x[k++] = v;
  }
  return k;
}

// The helpers below take and return 32-byte vectors; they are internal and inlined into their
// callers, so the calling-convention difference GCC warns about never crosses a call.
#pragma GCC diagnostic ignored "-Wpsabi"
inline Vec LoadVec(const double* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline Vec Splat(double d) { return Vec{d, d, d, d}; }
inline Vec Abs(Vec v) {
  return (Vec)((Mask)v & Mask{INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX});
}

struct FirstPass {
  double sum = 0, sum_abs = 0, min = INFINITY, max = -INFINITY, min_abs_nonzero = INFINITY;
  uint64_t zeros = 0, subnormal = 0;
};

// The first pass's loop; kMinAbs: also the smallest nonzero magnitude (the log10 histogram's
// range). A NaN or an infinity shows in sum_abs, which the caller checks instead of testing each
// value here.
template <bool kMinAbs>
[[gnu::always_inline]] inline FirstPass FirstPassLoop(const double* x, size_t n, double smallest_normal) {
  Vec s = Splat(0), a = Splat(0), lo = Splat(INFINITY), hi = Splat(-INFINITY), lo_abs = Splat(INFINITY);
  Mask zeros = {0, 0, 0, 0}, below = {0, 0, 0, 0};
  const Vec inf = Splat(INFINITY), zero = Splat(0), tiny = Splat(smallest_normal);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Vec v = LoadVec(x + i), av = Abs(v);
    s += v;
    a += av;
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    const Mask is_zero = v == zero;
    zeros -= is_zero;  // comparisons give -1 for true
    below -= av < tiny;  // zeros included; taken out below
    if constexpr (kMinAbs) {
      const Vec nz = is_zero ? inf : av;
      lo_abs = nz < lo_abs ? nz : lo_abs;
    }
  }
  FirstPass r;
  r.sum = (s[0] + s[1]) + (s[2] + s[3]);
  r.sum_abs = (a[0] + a[1]) + (a[2] + a[3]);
  uint64_t below_tiny = 0;
  for (size_t l = 0; l < kLanes; ++l) {
    r.min = std::min(r.min, lo[l]);
    r.max = std::max(r.max, hi[l]);
    r.min_abs_nonzero = std::min(r.min_abs_nonzero, lo_abs[l]);
    r.zeros += static_cast<uint64_t>(zeros[l]);
    below_tiny += static_cast<uint64_t>(below[l]);
  }
  for (; i < n; ++i) {
    const double v = x[i], av = std::fabs(v);
    r.sum += v;
    r.sum_abs += av;
    r.min = std::min(r.min, v);
    r.max = std::max(r.max, v);
    if (kMinAbs && v != 0) r.min_abs_nonzero = std::min(r.min_abs_nonzero, av);
    r.zeros += v == 0;
    below_tiny += av < smallest_normal;
  }
  r.subnormal = smallest_normal > 0 ? below_tiny - r.zeros : 0;
  return r;
}

TROVE_STATS_CLONES
FirstPass BlockFirstPass(const double* x, size_t n, double smallest_normal, bool min_abs) {
  return min_abs ? FirstPassLoop<true>(x, n, smallest_normal) : FirstPassLoop<false>(x, n, smallest_normal);
}

// Sum of squared deviations from `mean`, with the corrected two-pass formula's term removing the
// rounding of the mean itself (the deviations' sum, squared, over n).
TROVE_STATS_CLONES
double BlockSquaredDeviations(const double* x, size_t n, double mean) {
  Vec c = Splat(0), q = Splat(0);
  const Vec m = Splat(mean);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Vec d = LoadVec(x + i) - m;
    c += d;
    q += d * d;
  }
  double dev = (c[0] + c[1]) + (c[2] + c[3]), sq = (q[0] + q[1]) + (q[2] + q[3]);
  for (; i < n; ++i) {
    const double d = x[i] - mean;
    dev += d;
    sq += d * d;
  }
  const double m2 = sq - dev * dev / static_cast<double>(n);
  // Squares beyond float64's range make inf - inf: the spread is then infinite, not zero.
  return std::isnan(m2) ? sq : std::max(0.0, m2);
}

// The two passes over one block: moments and extremes of its finite values (the non-finite
// ones are counted and taken out first, which only a block holding some pays for).
Moments BlockMoments(double* x, size_t n, double smallest_normal, bool min_abs, Extremes& e) {
  FirstPass f = BlockFirstPass(x, n, smallest_normal, min_abs);
  if (!(f.sum_abs <= DBL_MAX)) {  // a NaN or infinity (or magnitudes summing past float64's range)
    n = KeepFinite(x, n, e);
    f = BlockFirstPass(x, n, smallest_normal, min_abs);
  }
  Moments m;
  m.n = n;
  m.sum = f.sum;
  m.sum_abs = f.sum_abs;
  e.min = std::min(e.min, f.min);
  e.max = std::max(e.max, f.max);
  e.min_abs_nonzero = std::min(e.min_abs_nonzero, f.min_abs_nonzero);
  e.zeros += f.zeros;
  e.subnormal += f.subnormal;
  e.finite += n;
  if (n > 0) m.m2 = BlockSquaredDeviations(x, n, m.sum / static_cast<double>(n));
  return m;
}

// --- Histograms ------------------------------------------------------------------------------

struct Binning {
  double lo = 0, hi = 0, norm = 0;
  std::vector<double> edges;
  // Of a log10 binning: thresholds[i] is the smallest positive double whose log10 is at least
  // edges[i], so |x| >= thresholds[i] exactly when log10|x| >= edges[i] (log10 is monotonic) and
  // values are binned without computing a logarithm each.
  std::vector<double> thresholds;
  // What the counting loop compares with: bin i holds the values v with below[i] <= v < above[i]
  // (the edges, or the log binning's thresholds for |v|), the outer bounds infinite (every
  // finite value belongs to a bin; the last bin is closed), so no index needs a bounds check.
  std::vector<double> below, above;
  bool active() const { return !edges.empty(); }
  void SetBounds(const std::vector<double>& e) {
    below.assign(e.begin(), e.end() - 1);
    above.assign(e.begin() + 1, e.end());
    below.front() = -INFINITY;
    above.back() = INFINITY;
  }
};

// The smallest positive double whose log10 is at least e.
double Log10Threshold(double e) {
  double a = std::pow(10.0, e);
  if (!(a <= DBL_MAX)) a = DBL_MAX;
  if (a <= 0) a = std::numeric_limits<double>::denorm_min();
  while (a < DBL_MAX && std::log10(a) < e) a = std::nextafter(a, INFINITY);
  for (double below = std::nextafter(a, 0.0); below > 0 && std::log10(below) >= e; below = std::nextafter(a, 0.0)) a = below;
  return a;
}

// log10 of a positive finite value to within about 0.01, from its exponent and a quadratic in its
// mantissa: a guess of the bin, which the thresholds then correct.
inline double RoughLog10(double av) {
  const uint64_t bits = std::bit_cast<uint64_t>(av);
  const int exponent = static_cast<int>(bits >> 52) - 1023;
  if (exponent == -1023) return std::log10(av);  // subnormal
  const double m = std::bit_cast<double>((bits & 0xFFFFFFFFFFFFFull) | 0x3FF0000000000000ull) - 1;  // [0, 1)
  return (exponent + m * (1.3465 - 0.3465 * m)) * 0.30102999566398120;
}

// Edges as numpy.linspace(lo, hi, bins + 1) makes them (i * step + lo, the last exactly hi).
Binning MakeBinning(double lo, double hi, uint32_t bins) {
  Binning b;
  if (lo == hi) lo -= 0.5, hi += 0.5;  // numpy.histogram's range for a single value
  b.lo = lo;
  b.hi = hi;
  b.norm = bins / (hi - lo);
  const double step = (hi - lo) / bins;
  b.edges.resize(bins + 1);
  for (uint32_t i = 0; i < bins; ++i) b.edges[i] = static_cast<double>(i) * step + lo;
  b.edges[bins] = hi;
  return b;
}

// The bin of v, decided by comparison with the edges themselves (the arithmetic guess can be one
// off), so counts equal numpy.histogram's with these edges.
inline size_t BinOf(const Binning& b, double v) {
  const size_t bins = b.edges.size() - 1;
  double f = (v - b.lo) * b.norm;
  size_t i = f <= 0 ? 0 : f >= static_cast<double>(bins) ? bins - 1 : static_cast<size_t>(f);
  while (i > 0 && v < b.edges[i]) --i;
  while (i + 1 < bins && v >= b.edges[i + 1]) ++i;
  return i;
}

// --- Walking a view's elements -----------------------------------------------------------------

// A view with its stride-0 dimensions taken out (their sizes only repeat the same elements: they
// multiply every count and leave every mean alone), size-1 dimensions dropped and dimensions that
// are contiguous with each other joined. A contiguous tensor becomes one dimension of stride 1.
struct Walk {
  DType dtype = DType::kFloat32;
  const TensorView* view = nullptr;
  const uint8_t* base = nullptr;   // storage data
  int64_t offset = 0;              // elements
  std::vector<int64_t> shape, strides;
  uint64_t elements = 0;           // elements walked
  uint64_t repeat = 1;             // what the stride-0 dimensions multiply them by
  bool swap = false;
  size_t esize = 1;
  size_t values_per_element = 1;
  size_t block_elements = kBlockValues;
  uint64_t chunk_elements = kBlockValues * kBlocksPerChunk;
  uint64_t chunks = 0;
  bool serial = false;             // a converting view: streamed by ForEachChunk on one thread
};

Walk MakeWalk(const TensorView& v) {
  Walk w;
  w.dtype = v.dtype;
  w.view = &v;
  w.esize = ElementSize(v.dtype);
  w.values_per_element = ValuesPerElement(v.dtype);
  w.block_elements = kBlockValues / w.values_per_element;
  w.chunk_elements = w.block_elements * kBlocksPerChunk;
  const uint64_t numel = static_cast<uint64_t>(v.numel());
  if (v.cast_source) {
    w.serial = true;
    w.elements = numel;
    w.chunks = numel ? 1 : 0;
    return w;
  }
  w.base = v.storage.data();
  w.offset = v.storage_offset;
  const size_t unit = Info(v.dtype).kind == DTypeKind::kComplex ? w.esize / 2 : w.esize;
  w.swap = v.byte_order == ByteOrder::kBig && unit > 1;
  if (numel == 0) return w;
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] == 1) continue;
    if (v.strides[d] == 0) {
      w.repeat *= static_cast<uint64_t>(v.shape[d]);
      continue;
    }
    if (!w.shape.empty() && w.strides.back() == v.strides[d] * v.shape[d]) {
      w.shape.back() *= v.shape[d];
      w.strides.back() = v.strides[d];
      continue;
    }
    w.shape.push_back(v.shape[d]);
    w.strides.push_back(v.strides[d]);
  }
  w.elements = numel / w.repeat;
  const uint64_t storage_elements = v.storage.size() / w.esize;
  if (w.elements > std::max(storage_elements, kMaxStatsOverlapElements)) {
    Fail(ErrorCode::kLimit, "a view of shape " + ShapeString(v.shape) + " strides " + ShapeString(v.strides) + " has " +
                                std::to_string(w.elements) + " elements over a storage of " + std::to_string(storage_elements) +
                                ": statistics walk at most the storage's count or kMaxStatsOverlapElements (" +
                                std::to_string(kMaxStatsOverlapElements) + ")");
  }
  w.chunks = (w.elements + w.chunk_elements - 1) / w.chunk_elements;
  return w;
}

// Fills blocks of decoded values from element runs and hands each full block to `on_block`.
class BlockFiller {
 public:
  template <class F>
  BlockFiller(const Walk& w, double* values, F&& on_block) : w_(w), values_(values), on_block_(on_block) {
    gather_.resize(w.block_elements * w.esize);
  }

  // `count` elements starting at p, `stride` elements apart.
  void Run(const uint8_t* p, uint64_t count, int64_t stride) {
    while (count > 0) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(count, w_.block_elements - filled_));
      const uint8_t* src = p;
      if (stride != 1 || w_.swap) {
        uint8_t* g = gather_.data();
        const uint64_t step = static_cast<uint64_t>(stride) * w_.esize;
        for (size_t i = 0; i < take; ++i) std::memcpy(g + i * w_.esize, p + i * step, w_.esize);
        if (w_.swap) ByteSwapElements(g, take, w_.dtype);
        src = g;
      }
      Decode(w_.dtype, src, take, values_ + filled_ * w_.values_per_element);
      filled_ += take;
      p += static_cast<uint64_t>(stride) * w_.esize * take;
      count -= take;
      if (filled_ == w_.block_elements) Flush();
    }
  }
  void Flush() {
    if (filled_ == 0) return;
    on_block_(values_, filled_ * w_.values_per_element);
    filled_ = 0;
  }

 private:
  const Walk& w_;
  double* values_;
  std::function<void(double*, size_t)> on_block_;
  std::vector<uint8_t> gather_;
  size_t filled_ = 0;
};

// Elements [begin, end) of the walk, in row-major order, as runs along the last dimension.
void WalkRange(const Walk& w, uint64_t begin, uint64_t end, BlockFiller& filler) {
  const size_t rank = w.shape.size();
  if (rank == 0) {  // a single element (possibly repeated)
    if (begin < end) filler.Run(w.base + static_cast<uint64_t>(w.offset) * w.esize, 1, 1);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  uint64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    index[d] = static_cast<int64_t>(rest % static_cast<uint64_t>(w.shape[d]));
    rest /= static_cast<uint64_t>(w.shape[d]);
  }
  const int64_t inner = w.shape[rank - 1];
  for (uint64_t pos = begin; pos < end;) {
    int64_t off = w.offset;
    for (size_t d = 0; d < rank; ++d) off += index[d] * w.strides[d];
    const uint64_t take = std::min<uint64_t>(static_cast<uint64_t>(inner - index[rank - 1]), end - pos);
    filler.Run(w.base + static_cast<uint64_t>(off) * w.esize, take, w.strides[rank - 1]);
    pos += take;
    index[rank - 1] += static_cast<int64_t>(take);
    for (size_t d = rank - 1; d > 0 && index[d] == w.shape[d]; --d) {
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

// Calls blocks(filler-ready callback) for chunk c of the walk: the chunk's elements as blocks.
template <class OnBlock>
void ForEachBlockOfChunk(const Walk& w, uint64_t chunk, double* values, OnBlock&& on_block) {
  BlockFiller filler(w, values, on_block);
  if (w.serial) {
    w.view->ForEachChunk([&](const uint8_t* p, size_t n) {
      if (n % w.esize != 0) Fail(ErrorCode::kCorrupt, "a converted tensor streamed a partial element");
      filler.Run(p, n / w.esize, 1);
    });
    filler.Flush();
    return;
  }
  const uint64_t begin = chunk * w.chunk_elements;
  const uint64_t end = std::min(w.elements, begin + w.chunk_elements);
  const bool contiguous = w.shape.size() == 1 && w.strides[0] == 1;
#ifdef MADV_POPULATE_READ
  // One call maps the chunk's pages instead of a page fault every few pages.
  if (contiguous && w.view->storage.mapped()) {
    static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto first = reinterpret_cast<uintptr_t>(w.base + (static_cast<uint64_t>(w.offset) + begin) * w.esize);
    const uintptr_t last = first + (end - begin) * w.esize;
    const uintptr_t aligned = first / page * page;
    ::madvise(reinterpret_cast<void*>(aligned), last - aligned, MADV_POPULATE_READ);  // advice: failure is harmless
  }
#endif
  WalkRange(w, begin, end, filler);
  filler.Flush();
  // A contiguous mapped run leaves the resident set once read (it stays in the page cache).
  if (contiguous) {
    w.view->storage.Release((static_cast<uint64_t>(w.offset) + begin) * w.esize, (end - begin) * w.esize);
  }
}

// --- The pool --------------------------------------------------------------------------------

// Runs fn(item) for items [0, count) on up to `threads` threads, in increasing order of start.
// The error of the lowest failing item is rethrown (every item below it has run by then).
void RunItems(uint64_t count, uint32_t threads, bool guard, const std::function<void(uint64_t)>& fn) {
  if (count == 0) return;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mutex;
  uint64_t error_item = UINT64_MAX;
  std::exception_ptr error;
  auto worker = [&] {
    uint64_t item = 0;
    auto record = [&](std::exception_ptr e) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (item < error_item) error_item = item, error = e;
      stop = true;
    };
    auto loop = [&] {
      while (!stop && (item = next.fetch_add(1)) < count) fn(item);
    };
    // A guard's jump abandons the loop's frames but not this one: its error is recorded here.
    try {
      if (guard) RunGuardingTruncation(loop);
      else loop();
    } catch (...) {
      record(std::current_exception());
    }
  };
  const uint64_t n = std::min<uint64_t>(threads, count);
  std::vector<std::thread> pool;
  try {
    for (uint64_t t = 1; t < n; ++t) pool.emplace_back(worker);
  } catch (const std::system_error&) {
    // Fewer threads than asked (a process or container limit): the others carry the work.
  }
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// One tensor's running state while its chunks complete (in any order).
struct Accumulator {
  Walk walk;
  double smallest_normal = 0;
  PairwiseTree tree;
  uint64_t next_chunk = 0;                                 // the next chunk whose moments join the tree
  std::map<uint64_t, std::vector<TreeNode>> early;         // chunks done before their turn
  Extremes extremes;
  Binning linear, log10_abs;
  std::vector<uint64_t> linear_counts, log_counts;
};

std::vector<TreeNode> ChunkMoments(const Walk& w, uint64_t chunk, double smallest_normal, bool min_abs, double* values,
                                   Extremes& e) {
  PairwiseTree tree;
  ForEachBlockOfChunk(w, chunk, values, [&](double* x, size_t n) {
    tree.Push({0, BlockMoments(x, n, smallest_normal, min_abs, e)});
  });
  return tree.stack;
}

using Vec4i = int32_t __attribute__((vector_size(16)));

// Every value's bins guessed for a whole block, four values at a time: the linear bin from
// (v - lo) * norm, the log10 bin from the exponent and a quadratic in the mantissa (RoughLog10's
// formula), both clamped to the bins. -1: not counted (NaN and infinities; zeros, and every value
// when there is no log binning, for the log histogram). A guess only saves work: CountBins
// corrects each against the edges themselves.
TROVE_STATS_CLONES
void GuessBins(const double* x, size_t n, const Binning& linear, const Binning& logs, int32_t* lin, int32_t* lg) {
  const double top = static_cast<double>(linear.edges.size() - 2);
  const Vec lo = Splat(linear.lo), norm = Splat(linear.norm), zero = Splat(0), last = Splat(top);
  const Vec log_lo = Splat(logs.lo), log_norm = Splat(logs.norm), biggest = Splat(DBL_MAX);
  const Mask log_active = logs.active() ? Mask{-1, -1, -1, -1} : Mask{0, 0, 0, 0};
  const Mask exponent_bits = {0x4330000000000000, 0x4330000000000000, 0x4330000000000000, 0x4330000000000000};
  const Mask mantissa_mask = {0xFFFFFFFFFFFFF, 0xFFFFFFFFFFFFF, 0xFFFFFFFFFFFFF, 0xFFFFFFFFFFFFF};
  const Mask one_bits = {0x3FF0000000000000, 0x3FF0000000000000, 0x3FF0000000000000, 0x3FF0000000000000};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Vec v = LoadVec(x + i), av = Abs(v);
    const Mask finite = av <= biggest;
    Vec f = (v - lo) * norm;
    f = f < zero ? zero : f;
    f = f > last ? last : f;
    f = finite ? f : Splat(-1);  // -1 as a double: one conversion makes every lane's int
    const Vec4i lin4 = __builtin_convertvector(f, Vec4i);
    // The exponent as a double without an int64 conversion: 2^52 + e has e in its low bits.
    const Mask bits = (Mask)av;
    const Vec exponent = (Vec)((bits >> 52) | exponent_bits) - Splat(4503599627370496.0 + 1023);
    const Vec m = (Vec)((bits & mantissa_mask) | one_bits) - Splat(1);
    Vec g = ((exponent + m * (Splat(1.3465) - Splat(0.3465) * m)) * Splat(0.30102999566398120) - log_lo) * log_norm;
    g = g < zero ? zero : g;
    g = g > last ? last : g;
    const Mask counted = finite & (av != zero) & log_active;
    g = counted ? g : Splat(-1);
    const Vec4i lg4 = __builtin_convertvector(g, Vec4i);
    std::memcpy(lin + i, &lin4, sizeof lin4);
    std::memcpy(lg + i, &lg4, sizeof lg4);
  }
  for (; i < n; ++i) {
    const double av = std::fabs(x[i]);
    const bool finite = av <= DBL_MAX;
    lin[i] = finite ? static_cast<int32_t>(std::clamp((x[i] - linear.lo) * linear.norm, 0.0, top)) : -1;
    lg[i] = finite && av != 0 && logs.active()
                ? static_cast<int32_t>(std::clamp((RoughLog10(av) - logs.lo) * logs.norm, 0.0, top)) : -1;
  }
}

// Each guess corrected against the bin bounds (Binning::below, above), then counted: the counts
// equal numpy.histogram's with these edges whatever the guesses were.
void CountBins(const double* __restrict x, size_t n, const int32_t* __restrict lin, const int32_t* __restrict lg,
               const Binning& linear, const Binning& logs, uint64_t* __restrict linear_counts,
               uint64_t* __restrict log_counts) {
  const double* __restrict below = linear.below.data();
  const double* __restrict above = linear.above.data();
  const double* __restrict log_below = logs.below.data();
  const double* __restrict log_above = logs.above.data();
  for (size_t i = 0; i < n; ++i) {
    int32_t b = lin[i];
    if (b < 0) continue;  // NaN, infinities
    const double v = x[i];
    while (v < below[b]) --b;
    while (v >= above[b]) ++b;
    ++linear_counts[b];
    b = lg[i];
    if (b < 0) continue;  // zeros, or no log binning
    const double av = std::fabs(v);
    while (av < log_below[b]) --b;
    while (av >= log_above[b]) ++b;
    ++log_counts[b];
  }
}

void ChunkHistogram(const Walk& w, uint64_t chunk, const Accumulator& acc, double* values,
                    std::vector<uint64_t>& linear, std::vector<uint64_t>& logs) {
  const Binning& lb = acc.log10_abs;
  int32_t lin[kBlockValues], lg[kBlockValues];
  ForEachBlockOfChunk(w, chunk, values, [&](double* x, size_t n) {
    GuessBins(x, n, acc.linear, lb, lin, lg);
    CountBins(x, n, lin, lg, acc.linear, lb, linear.data(), logs.data());
  });
}

}  // namespace

std::optional<std::string> StatsUnsupportedReason(const TensorView& view) {
  const auto& info = Info(view.dtype);
  if (!view.has_data) return "no data (a meta tensor: shape only)";
  if (info.kind == DTypeKind::kQuantized) return "quantized (" + std::string(info.name) + "): values need the quantizer";
  if (info.kind == DTypeKind::kBits) return "a bit container (" + std::string(info.name) + "): no numeric values";
  return std::nullopt;
}

std::vector<TensorStats> ComputeStats(std::span<const TensorView* const> views, const StatsOptions& options,
                                      std::span<const std::string> names) {
  if (options.histogram_bins > kMaxStatsHistogramBins) {
    Fail(ErrorCode::kLimit, std::to_string(options.histogram_bins) + " histogram bins: at most kMaxStatsHistogramBins (" +
                                std::to_string(kMaxStatsHistogramBins) + ")");
  }
  const uint32_t threads =
      std::min(kMaxStatsThreads, options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Accumulator> accs(views.size());
  std::vector<uint64_t> first_item(views.size() + 1, 0);  // chunk items of tensor i: [first_item[i], first_item[i+1])
  auto named = [&](size_t i, auto&& fn) {
    if (i >= names.size()) return fn();
    return WithContext(names[i], fn);
  };
  for (size_t i = 0; i < views.size(); ++i) {
    const TensorView& v = *views[i];
    named(i, [&] {
      if (auto why = StatsUnsupportedReason(v)) Fail(ErrorCode::kUnsupported, "no statistics for " + *why);
      accs[i].walk = MakeWalk(v);
    });
    accs[i].smallest_normal = SmallestNormal(v.dtype);
    first_item[i + 1] = first_item[i] + accs[i].walk.chunks;
  }
  const uint64_t items = first_item.back();
  auto tensor_of = [&](uint64_t item) {
    return static_cast<size_t>(std::upper_bound(first_item.begin(), first_item.end(), item) - first_item.begin() - 1);
  };
  std::mutex merge_mutex;
  thread_local std::vector<double> values;

  // Sweep 1: moments and counts.
  RunItems(items, threads, options.guard_truncation, [&](uint64_t item) {
    const size_t t = tensor_of(item);
    Accumulator& acc = accs[t];
    const uint64_t chunk = item - first_item[t];
    values.resize(kBlockValues);
    Extremes e;
    std::vector<TreeNode> nodes = named(t, [&] { return ChunkMoments(acc.walk, chunk, acc.smallest_normal, options.histogram_bins > 0, values.data(), e);
    });
    std::lock_guard<std::mutex> lock(merge_mutex);
    acc.extremes.Add(e);
    acc.early.emplace(chunk, std::move(nodes));
    // Chunks join the tree in order, each as the subtree it is; those done early wait their turn.
    for (auto it = acc.early.begin(); it != acc.early.end() && it->first == acc.next_chunk; it = acc.early.erase(it)) {
      for (const TreeNode& node : it->second) acc.tree.Push(node);
      ++acc.next_chunk;
    }
  });

  // Sweep 2: histograms, between the extremes sweep 1 found.
  if (options.histogram_bins > 0) {
    const uint32_t bins = options.histogram_bins;
    for (Accumulator& acc : accs) {
      const Extremes& e = acc.extremes;
      if (e.finite == 0) continue;
      acc.linear = MakeBinning(e.min, e.max, bins);
      acc.linear.SetBounds(acc.linear.edges);
      acc.linear_counts.assign(bins, 0);
      if (e.finite > e.zeros) {
        const double max_abs = std::max(std::fabs(e.min), std::fabs(e.max));
        acc.log10_abs = MakeBinning(std::log10(e.min_abs_nonzero), std::log10(max_abs), bins);
        for (double edge : acc.log10_abs.edges) acc.log10_abs.thresholds.push_back(Log10Threshold(edge));
        acc.log10_abs.SetBounds(acc.log10_abs.thresholds);
        acc.log_counts.assign(bins, 0);
      }
    }
    RunItems(items, threads, options.guard_truncation, [&](uint64_t item) {
      const size_t t = tensor_of(item);
      Accumulator& acc = accs[t];
      if (!acc.linear.active()) return;
      values.resize(kBlockValues);
      std::vector<uint64_t> linear(bins, 0), logs(bins, 0);
      named(t, [&] { ChunkHistogram(acc.walk, item - first_item[t], acc, values.data(), linear, logs); });
      std::lock_guard<std::mutex> lock(merge_mutex);  // integer counts: any order gives the same sums
      for (uint32_t b = 0; b < bins; ++b) acc.linear_counts[b] += linear[b];
      if (acc.log10_abs.active())
        for (uint32_t b = 0; b < bins; ++b) acc.log_counts[b] += logs[b];
    });
  }

  std::vector<TensorStats> out(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    const Accumulator& acc = accs[i];
    const Extremes& e = acc.extremes;
    const uint64_t r = acc.walk.repeat;
    TensorStats& s = out[i];
    s.count = static_cast<uint64_t>(views[i]->numel()) * acc.walk.values_per_element;
    s.finite = e.finite * r;
    s.zeros = e.zeros * r;
    s.nan = e.nan * r;
    s.pos_inf = e.pos_inf * r;
    s.neg_inf = e.neg_inf * r;
    if (IsFloating(views[i]->dtype)) s.subnormal = e.subnormal * r;
    if (e.finite > 0) {
      const Moments m = acc.tree.Finish();
      const double n = static_cast<double>(m.n);
      s.min = e.min;
      s.max = e.max;
      s.mean = m.sum / n;
      s.std = std::sqrt(m.m2 / n);  // population (numpy's default ddof=0); repeats leave it alone
      s.mean_abs = m.sum_abs / n;
    }
    if (acc.linear.active()) {
      s.histogram.edges = acc.linear.edges;
      s.histogram.counts = acc.linear_counts;
      for (auto& c : s.histogram.counts) c *= r;
    }
    if (acc.log10_abs.active()) {
      s.log10_abs_histogram.edges = acc.log10_abs.edges;
      s.log10_abs_histogram.counts = acc.log_counts;
      for (auto& c : s.log10_abs_histogram.counts) c *= r;
    }
  }
  return out;
}

TensorStats ComputeStats(const TensorView& view, const StatsOptions& options) {
  const TensorView* one[] = {&view};
  return std::move(ComputeStats(std::span<const TensorView* const>(one, 1), options)[0]);
}

}  // namespace trove
