// Tensor statistics: blocks of decoded float64 values, two passes per block, a pairwise tree of
// block moments, chunks of blocks spread over threads.
#include "trove/tensor_stats.h"
#include "trove/threads.h"

#include <algorithm>
#include <deque>
#include <array>
#include <atomic>
#include <bit>
#include <cfloat>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

#include "core/progress.h"
#include "core/worker_pool.h"
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
// With histograms, a tensor of at most this many stored bytes keeps its mapped pages between its
// two sweeps: the second finds them mapped and cached instead of mapping and reading them again.
// Resident memory then holds up to this much per thread (larger tensors are released as read).
constexpr uint64_t kStatsRereadBytes = uint64_t{64} << 20;

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
template <bool kMinAbs, bool kBuckets>
[[gnu::always_inline]] inline FirstPass FirstPassLoop(const double* x, size_t n, double smallest_normal,
                                                      uint32_t* __restrict buckets) {
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
    if constexpr (kBuckets) {  // each value under the top 16 bits of its float32 bits (see Buckets)
      const Vec4f f = __builtin_convertvector(v, Vec4f);
      Vec4u32 u;
      std::memcpy(&u, &f, sizeof u);
      u >>= 16;
      ++buckets[u[0]];
      ++buckets[u[1]];
      ++buckets[u[2]];
      ++buckets[u[3]];
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
    if constexpr (kBuckets) ++buckets[std::bit_cast<uint32_t>(static_cast<float>(v)) >> 16];
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
FirstPass BlockFirstPass(const double* x, size_t n, double smallest_normal, bool min_abs, uint32_t* buckets) {
  if (buckets) return FirstPassLoop<true, true>(x, n, smallest_normal, buckets);
  return min_abs ? FirstPassLoop<true, false>(x, n, smallest_normal, nullptr) : FirstPassLoop<false, false>(x, n, smallest_normal, nullptr);
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
// buckets (or null): the block's values are also counted there (see Buckets below).
Moments BlockMoments(double* x, size_t n, double smallest_normal, bool min_abs, uint32_t* buckets, Extremes& e) {
  FirstPass f = BlockFirstPass(x, n, smallest_normal, min_abs, buckets);
  if (!(f.sum_abs <= DBL_MAX)) {  // a NaN or infinity (or magnitudes summing past float64's range)
    n = KeepFinite(x, n, e);
    f = BlockFirstPass(x, n, smallest_normal, min_abs, nullptr);  // counted already
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
  // Of a linear binning: how far (in bins) (v - lo) * norm may lie from the exact position of v
  // against the rounded edges (see SetLinearMargin); guesses within it of a bin boundary are
  // checked against the edges. 1 when no guess can be trusted (every value is checked).
  double margin = 1;
  // Of a log10 binning: the bin of every |x| whose bits, shifted right by key_shift, equal
  // key_lo + k is key_bins[k] (-1 when a threshold falls inside that run of doubles, so its values
  // are placed by comparison); key_bins.back() is -2, where zeros and non-finite values go.
  int key_shift = 52;
  int64_t key_lo = 0;
  std::vector<int16_t> key_bins = {-2};
  bool active() const { return !edges.empty(); }
};

// Runs of doubles a log10 binning's key table covers at most: 32 KB of int16, which stays in the
// first-level cache, and at least one run per binary exponent (2046 of them) always fits.
constexpr int64_t kLogKeyRuns = 16384;

// The smallest positive double whose log10 is at least e.
double Log10Threshold(double e) {
  double a = std::pow(10.0, e);
  if (!(a <= DBL_MAX)) a = DBL_MAX;
  if (a <= 0) a = std::numeric_limits<double>::denorm_min();
  while (a < DBL_MAX && std::log10(a) < e) a = std::nextafter(a, INFINITY);
  for (double below = std::nextafter(a, 0.0); below > 0 && std::log10(below) >= e; below = std::nextafter(a, 0.0)) a = below;
  return a;
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
  const double f = (v - b.lo) * b.norm;  // NaN when the range overflows: starts from bin 0
  size_t i = f >= static_cast<double>(bins) ? bins - 1 : f > 0 ? static_cast<size_t>(f) : 0;
  while (i > 0 && v < b.edges[i]) --i;
  while (i + 1 < bins && v >= b.edges[i + 1]) ++i;
  return i;
}

// The log10 bin of a finite nonzero |v|, by comparison with the thresholds: how many of the inner
// ones it reaches (the outer bins are unbounded, like BinOf's).
inline int32_t LogBinOf(const Binning& b, double av) {
  const double* t = b.thresholds.data();
  return static_cast<int32_t>(std::upper_bound(t + 1, t + b.thresholds.size() - 1, av) - (t + 1));
}

// Every rounding between v and its guess (v - lo) * norm (the subtraction, norm's two, the
// product) moves it by at most 2^-53 of `bins`; each rounded edge i * step + lo lies within a few
// 2^-53 of |lo| + |hi| (times norm, in bins) of its exact place. 2^-40 of their sum bounds both
// with room to spare: a guess farther than that from a whole number is the bin of v.
void SetLinearMargin(Binning& b) {
  const double bins = static_cast<double>(b.edges.size() - 1);
  const double margin = ((std::fabs(b.lo) + std::fabs(b.hi)) * b.norm + bins) * 0x1p-40;
  b.margin = margin < 0.25 ? margin : 1;  // also when a span past float64's range made norm 0 or inf
}

// The key run of a magnitude: its bits less one, shifted, less the first run's; zero's bits
// wrap around to a run past the table's (as do NaN's and, unless the range reaches DBL_MAX, the
// infinities' bits), so only nonzero finite magnitudes need no other test.
inline uint32_t LogKeyRun(const Binning& b, double av) {
  return static_cast<uint32_t>(static_cast<int64_t>((std::bit_cast<uint64_t>(av) - 1) >> b.key_shift) - b.key_lo);
}

// The key table of a log10 binning of the magnitudes in [min_abs, max_abs] (positive, finite):
// runs as fine as kLogKeyRuns allows, each known to lie in one bin when its first and last
// doubles (within the range) do. Runs and thresholds both increase: one walk along the two.
void SetLogKeys(Binning& b, double min_abs, double max_abs) {
  const auto a = static_cast<int64_t>(std::bit_cast<uint64_t>(min_abs)) - 1;
  const auto z = static_cast<int64_t>(std::bit_cast<uint64_t>(max_abs)) - 1;
  int shift = 40;
  while ((z >> shift) - (a >> shift) + 1 > kLogKeyRuns) ++shift;
  b.key_shift = shift;
  b.key_lo = a >> shift;
  const int64_t runs = (z >> shift) - b.key_lo + 1;
  b.key_bins.assign(static_cast<size_t>(runs) + 1, -1);
  const std::vector<double>& t = b.thresholds;
  const size_t last_bin = t.size() - 2;
  size_t bin = 0;  // of the run's first magnitude: how many inner thresholds it reaches
  for (int64_t k = 0; k < runs; ++k) {
    const double first = std::bit_cast<double>(static_cast<uint64_t>(std::max(a, (b.key_lo + k) << shift) + 1));
    const double last = std::bit_cast<double>(static_cast<uint64_t>(std::min(z, ((b.key_lo + k + 1) << shift) - 1) + 1));
    while (bin < last_bin && first >= t[bin + 1]) ++bin;
    if (bin == last_bin || last < t[bin + 1]) b.key_bins[static_cast<size_t>(k)] = static_cast<int16_t>(bin);
  }
  b.key_bins.back() = -2;
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
  bool serial = false;             // streamed by ForEachChunk on one thread (see MakeWalk)
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
  // A converting view has no bytes of its own, and a compressed .tdz leaf (deferred bytes) can
  // only be inflated front to back: both are streamed, never held whole. A strided view of
  // deferred bytes (no reader makes one) is walked as any other, its bytes produced whole.
  if (v.cast_source || (v.storage.deferred() && v.is_contiguous())) {
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

// A contiguous mapped run leaves the resident set once read (it stays in the page cache).
void ReleaseChunk(const Walk& w, uint64_t chunk) {
  if (w.serial || w.shape.size() != 1 || w.strides[0] != 1) return;
  const uint64_t begin = chunk * w.chunk_elements;
  const uint64_t end = std::min(w.elements, begin + w.chunk_elements);
  w.view->storage.Release((static_cast<uint64_t>(w.offset) + begin) * w.esize, (end - begin) * w.esize);
}

// Calls blocks(filler-ready callback) for chunk c of the walk: the chunk's elements as blocks.
template <class OnBlock>
void ForEachBlockOfChunk(const Walk& w, uint64_t chunk, double* values, bool release, OnBlock&& on_block) {
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
  if (contiguous && !w.swap && w.view->storage.ReadsWithPread()) {
    // The I/O mode reads this file with pread (trove/io_mode.h): the chunk's bytes arrive in one
    // large read into a buffer, not by faulting in the mapping.
    w.view->storage.Slice((static_cast<uint64_t>(w.offset) + begin) * w.esize, (end - begin) * w.esize)
        .Stream([&](const uint8_t* p, size_t n) { filler.Run(p, n / w.esize, 1); });
    filler.Flush();
    return;
  }
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
  if (release) ReleaseChunk(w, chunk);
}

// --- The pool --------------------------------------------------------------------------------

// Runs fn(item) for items [0, count) on up to `threads` threads, in increasing order of start.
// The error of the lowest failing item is rethrown (every item below it has run by then);
// on_error, when given, is called at each failure (items waiting for another can stop waiting).
void RunItems(uint64_t count, uint32_t threads, bool guard, const std::function<void(uint64_t)>& fn,
              const std::function<void()>& on_error = {}) {
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
      if (on_error) on_error();
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
  {
    // Fewer threads than asked (a process, container or address-space limit): the others carry
    // the work. They are joined as the block ends.
    std::vector<std::unique_ptr<SmallStackThread>> pool;
    for (uint64_t t = 1; t < n; ++t) {
      pool.push_back(std::make_unique<SmallStackThread>(worker));
      if (!pool.back()->started()) break;
    }
    worker();
  }
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
  uint64_t chunks_done = 0;  // of the first sweep; at walk.chunks the binnings are set
  bool binned = false;
  bool counted = false;      // every finite value is one value: the histograms are known already
  bool bucketed = false;     // histograms from the first sweep's buckets (see Buckets below)
  std::vector<uint64_t> buckets;  // the first sweep's bucket counts, until the binnings are set
};

// --- Histograms from the first sweep's buckets ----------------------------------------------
//
// With StatsOptions::exact_histograms off, a tensor whose every value is exactly a float32
// (float32, bfloat16, float16, the float8 and float4 formats, integers of up to 16 bits, bool)
// gets its histograms in its one sweep: each value is counted under the top 16 bits of its
// float32 bits (sign, exponent and 7 mantissa bits: 2^16 buckets, each a range of values 2^-7 of
// its magnitude wide), and once the extremes give the edges the buckets are turned into bins
// (SpreadBuckets). Other tensors are binned value by value in a second sweep, exactly.
constexpr size_t kBuckets = size_t{1} << 16;
// Below this many values a tensor is binned value by value in a second sweep: turning 2^16
// buckets into bins costs about as much as placing that many values, and a tensor's bucket table
// (512 KB) would dwarf it.
constexpr uint64_t kMinBucketedValues = uint64_t{1} << 16;
// Buckets of magnitudes from here up hold NaN and the infinities (exponent bits all ones).
constexpr uint32_t kNonFiniteBucket = 0x7F80;

bool ExactInFloat32(DType d) {
  switch (d) {
    case DType::kFloat32: case DType::kFloat16: case DType::kBFloat16: case DType::kInt16: case DType::kInt8:
    case DType::kUInt8: case DType::kUInt16: case DType::kBool: case DType::kFloat8E4M3FN: case DType::kFloat8E5M2:
    case DType::kFloat8E4M3FNUZ: case DType::kFloat8E5M2FNUZ: case DType::kFloat8E8M0FNU: case DType::kFloat4E2M1FNx2:
      return true;
    default:
      return false;
  }
}

inline uint32_t BucketOf(double v) { return std::bit_cast<uint32_t>(static_cast<float>(v)) >> 16; }

// The buckets a chunk's values can be in, from its extremes: the zeros' (of either sign), the
// magnitudes from its smallest nonzero one up to its largest positive value and to its most
// negative one, and the non-finite ones when it had any. Calls fn(first, last) per range of
// bucket indices (a range may be empty: first > last).
template <class F>
void ForEachChunkBucketRange(const Extremes& e, F&& fn) {
  if (e.finite > 0) {
    fn(uint32_t{0}, uint32_t{0});
    fn(uint32_t{0x8000}, uint32_t{0x8000});
    const uint32_t from = e.min_abs_nonzero <= DBL_MAX ? std::max(BucketOf(e.min_abs_nonzero), 1u) : 0x8000u;
    if (e.max > 0) fn(from, BucketOf(e.max));
    if (e.min < 0) fn(0x8000u | from, BucketOf(e.min));
  }
  if (e.nan + e.pos_inf + e.neg_inf > 0) {
    fn(kNonFiniteBucket, uint32_t{0x7FFF});
    fn(uint32_t{0x8000} | kNonFiniteBucket, uint32_t{0xFFFF});
  }
}

// A monotonic placing along sorted edges: the bin of each value asked, values asked in
// increasing order. Bin i holds [edges[i], edges[i+1]); the last bin also holds edges[bins].
struct EdgeCursor {
  const double* edges;
  size_t last;  // bins - 1
  size_t i = 0;
  size_t At(double v) {
    while (i < last && v >= edges[i + 1]) ++i;
    return i;
  }
};

// Adds `n` values spread evenly over [lo, hi] to the bins i1..i2 that range meets, in proportion
// to its width in each (the whole count when it has no width); the shares sum to n.
void SpreadCount(uint64_t n, double lo, double hi, const std::vector<double>& edges, size_t i1, size_t i2,
                 std::vector<uint64_t>& counts) {
  const double width = hi - lo;
  if (!(width > 0) || i1 == i2) {
    counts[i1] += n;
    return;
  }
  uint64_t given = 0;
  for (size_t j = i1; j <= i2; ++j) {
    const double right = j == i2 ? hi : std::min(hi, edges[j + 1]);
    const uint64_t upto = j == i2 ? n : std::min<uint64_t>(n, static_cast<uint64_t>(std::llround(static_cast<double>(n) * ((right - lo) / width))));
    if (upto > given) counts[j] += upto - given, given = upto;
  }
}

// The histograms of a bucketed tensor from its buckets alone: a bucket inside one bin adds its
// count there; one an edge cuts is spread over the bins it meets by width (linear: of its values;
// log10: of its magnitudes' logarithms). A bin's count can thus differ from numpy's by part of
// the counts of the two buckets its edges cut (values within 2^-7 of their magnitude of an edge).
void SpreadBuckets(Accumulator& acc) {
  const Extremes& e = acc.extremes;
  const std::vector<uint64_t>& c = acc.buckets;
  const size_t bins = acc.linear_counts.size();
  const uint32_t pos_last = e.max >= 0 ? BucketOf(e.max) : 0, neg_last = (e.min < 0 ? BucketOf(e.min) : 0x8000u) & 0x7FFF;
  auto range = [](uint32_t m) {  // the magnitudes of bucket m (m < kNonFiniteBucket)
    return std::pair<double, double>(std::bit_cast<float>(m << 16), std::bit_cast<float>((m << 16) | 0xFFFF));
  };
  EdgeCursor lin{acc.linear.edges.data(), bins - 1};
  auto linear = [&](uint32_t k, double lo, double hi) {
    if (c[k] == 0) return;
    lo = std::max(lo, e.min);
    hi = std::min(hi, e.max);
    SpreadCount(c[k], lo, hi, acc.linear.edges, lin.At(lo), lin.At(hi), acc.linear_counts);
  };
  // In increasing order of the values: the negative buckets from the largest magnitude down, then
  // the positive ones up (edge cursors only move forwards).
  for (uint32_t m = neg_last + 1; m-- > 0;) {
    auto [a, b] = range(m);
    linear(0x8000 | m, -b, -a);
  }
  for (uint32_t m = 0; m <= pos_last; ++m) {
    auto [a, b] = range(m);
    linear(m, a, b);
  }
  if (!acc.log10_abs.active()) return;
  const double max_abs = std::max(std::fabs(e.min), std::fabs(e.max));
  for (uint32_t sign : {0u, 0x8000u}) {
    EdgeCursor g{acc.log10_abs.thresholds.data(), bins - 1};
    const uint32_t last = sign ? neg_last : pos_last;
    for (uint32_t m = 1; m <= last; ++m) {
      const uint64_t n = c[sign | m];
      if (n == 0) continue;
      auto [a, b] = range(m);
      a = std::max(a, e.min_abs_nonzero);
      b = std::min(b, max_abs);
      const size_t j1 = g.At(a), j2 = g.At(b);
      if (j1 == j2) acc.log_counts[j1] += n;
      else SpreadCount(n, std::log10(a), std::log10(b), acc.log10_abs.edges, j1, j2, acc.log_counts);
    }
  }
  // Bucket 0 of each sign: the zeros (in no log10 bin) and magnitudes below 2^-133, if any.
  const uint64_t tiny = c[0] + c[0x8000] - std::min(c[0] + c[0x8000], e.zeros);
  if (tiny > 0) acc.log_counts[static_cast<size_t>(LogBinOf(acc.log10_abs, e.min_abs_nonzero))] += tiny;
}

// A tensor's histogram bins, once its first sweep found the extremes.
void SetBinnings(Accumulator& acc, uint32_t bins) {
  const Extremes& e = acc.extremes;
  acc.binned = true;
  if (e.finite == 0) {
    std::vector<uint64_t>().swap(acc.buckets);
    return;
  }
  acc.linear = MakeBinning(e.min, e.max, bins);
  SetLinearMargin(acc.linear);
  acc.linear_counts.assign(bins, 0);
  if (e.finite > e.zeros) {
    const double max_abs = std::max(std::fabs(e.min), std::fabs(e.max));
    acc.log10_abs = MakeBinning(std::log10(e.min_abs_nonzero), std::log10(max_abs), bins);
    for (double edge : acc.log10_abs.edges) acc.log10_abs.thresholds.push_back(Log10Threshold(edge));
    SetLogKeys(acc.log10_abs, e.min_abs_nonzero, max_abs);
    acc.log_counts.assign(bins, 0);
  }
  // A constant tensor (zeros, ones, a LayerNorm weight): every finite value lands on an edge of
  // numpy's range around it, where the fast path never trusts its guess; one placing counts all.
  if (e.min == e.max) {
    acc.linear_counts[BinOf(acc.linear, e.min)] = e.finite;
    if (acc.log10_abs.active()) acc.log_counts[static_cast<size_t>(LogBinOf(acc.log10_abs, std::fabs(e.min)))] = e.finite;
    acc.counted = true;
  } else if (acc.bucketed && !acc.buckets.empty()) {
    SpreadBuckets(acc);
    acc.counted = true;
  }
  std::vector<uint64_t>().swap(acc.buckets);
}

std::vector<TreeNode> ChunkMoments(const Walk& w, uint64_t chunk, double smallest_normal, bool min_abs, double* values,
                                   bool release, uint32_t* buckets /* or null */, Extremes& e) {
  PairwiseTree tree;
  ForEachBlockOfChunk(w, chunk, values, release, [&](double* x, size_t n) {
    tree.Push({0, BlockMoments(x, n, smallest_normal, min_abs, buckets, e)});
  });
  return tree.stack;
}

// Up to this many bins, a value in both histograms costs one count, of its pair of bins (a
// table of kMaxPairBins^2 counts, two of them: 16 KB); the histograms are summed from the pairs
// once per chunk.
constexpr size_t kMaxPairBins = 32;
// One block's values counted in both histograms. Four at a time, without a lookup: the linear
// bin from (v - lo) * norm, trusted when it is farther than the margin from a bin boundary, and
// the log10 key run of |v| from its bits. Then one value at a time, the counts: the run's bin
// from the key table, and the values a guess or a run leaves open (and zeros, NaN, infinities)
// placed by comparison with the edges or thresholds, so the counts equal numpy.histogram's with
// these edges. Whatever the values (even ones changed since the first sweep), every index is
// checked before use.
TROVE_STATS_CLONES
void CountBlock(const double* x, size_t n, const Binning& linear, const Binning& logs, uint64_t* __restrict linear_counts,
                uint64_t* __restrict log_counts, uint64_t* __restrict pair_counts /* or null */) {
  // Per value, the linear bin guess (-1: open) in the high 32 bits and the key run in the low 32.
  int64_t codes[kBlockValues];
  const auto bins = static_cast<uint32_t>(linear.edges.size() - 1);
  // Adding 2^52 rounds to a whole number and leaves it in the low bits of the sum. A NaN or
  // infinite guess has a NaN distance from it: never trusted.
  const Vec round = Splat(0x1p52), lo = Splat(linear.lo), norm = Splat(linear.norm), margin = Splat(linear.margin),
            zero = Splat(0);
  const int shift = logs.key_shift;
  using UMask = uint64_t __attribute__((vector_size(32)));
  const Mask key_lo = {logs.key_lo, logs.key_lo, logs.key_lo, logs.key_lo};
  const Mask low32 = {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, one = {1, 1, 1, 1}, open = {-1, -1, -1, -1};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Vec v = LoadVec(x + i), av = Abs(v);
    const Vec f = (v - lo) * norm;
    const Vec t = f + round;
    const Vec frac = f - (t - round);  // from the nearest whole number, in [-0.5, 0.5]
    const Mask sure = Abs(frac) > margin;
    // The nearest whole number, one less when f is below it.
    const Mask b = sure ? ((Mask)t & low32) + (Mask)(frac < zero) : open;
    const Mask k = (Mask)(((UMask)((Mask)av - one)) >> shift) - key_lo;
    const Mask code = (b << 32) | (k & low32);
    std::memcpy(codes + i, &code, sizeof code);
  }
  for (; i < n; ++i) codes[i] = int64_t{-1} * (int64_t{1} << 32) | static_cast<int64_t>(LogKeyRun(logs, std::fabs(x[i])));
  const int16_t* __restrict key_bins = logs.key_bins.data();
  const auto none = static_cast<uint32_t>(logs.key_bins.size() - 1);  // the -2 entry
  // The placing of a value the fast path does not take.
  auto place = [&](double v, uint32_t b, int32_t g) {
    if (!(std::fabs(v) <= DBL_MAX)) return;  // NaN, infinities
    if (b >= bins) b = static_cast<uint32_t>(BinOf(linear, v));
    ++linear_counts[b];
    if (v == 0) return;
    if (g < 0) g = LogBinOf(logs, std::fabs(v));
    ++log_counts[g];
  };
  if (pair_counts) {
    // Four tables, taken in turn: a run of values in one pair of bins does not make each count
    // wait for the one before.
    auto count = [&](size_t j, uint64_t* __restrict table) {
      const int64_t code = codes[j];
      const auto b = static_cast<uint32_t>(static_cast<uint64_t>(code) >> 32);
      const int32_t g = key_bins[std::min(static_cast<uint32_t>(code), none)];
      if (b < bins && g >= 0) [[likely]] ++table[b * kMaxPairBins + static_cast<uint32_t>(g)];
      else place(x[j], b, g);
    };
    constexpr size_t kTable = kMaxPairBins * kMaxPairBins;
    for (i = 0; i + 4 <= n; i += 4) {
      count(i, pair_counts);
      count(i + 1, pair_counts + kTable);
      count(i + 2, pair_counts + 2 * kTable);
      count(i + 3, pair_counts + 3 * kTable);
    }
    for (; i < n; ++i) count(i, pair_counts);
    return;
  }
  for (i = 0; i < n; ++i) {
    const int64_t code = codes[i];
    const auto b = static_cast<uint32_t>(static_cast<uint64_t>(code) >> 32);
    const int32_t g = key_bins[std::min(static_cast<uint32_t>(code), none)];
    if (b < bins && g >= 0) {
      ++linear_counts[b];
      ++log_counts[g];
    } else {
      place(x[i], b, g);
    }
  }
}

void ChunkHistogram(const Walk& w, uint64_t chunk, const Accumulator& acc, double* values,
                    std::vector<uint64_t>& linear, std::vector<uint64_t>& logs) {
  const size_t bins = linear.size();
  std::vector<uint64_t> pairs(bins <= kMaxPairBins ? 4 * kMaxPairBins * kMaxPairBins : 0, 0);
  uint64_t* pair_counts = pairs.empty() ? nullptr : pairs.data();
  ForEachBlockOfChunk(w, chunk, values, true, [&](double* x, size_t n) {
    CountBlock(x, n, acc.linear, acc.log10_abs, linear.data(), logs.data(), pair_counts);
  });
  if (pairs.empty()) return;
  for (size_t b = 0; b < bins; ++b)
    for (size_t g = 0; g < bins; ++g) {
      const size_t k = b * kMaxPairBins + g, table = kMaxPairBins * kMaxPairBins;
      const uint64_t c = pairs[k] + pairs[table + k] + pairs[2 * table + k] + pairs[3 * table + k];
      linear[b] += c;
      logs[g] += c;
    }
}

}  // namespace

std::optional<std::string> StatsUnsupportedReason(const TensorView& view) {
  const auto& info = Info(view.dtype);
  if (!view.has_data) return "no data (a meta tensor: shape only)";
  if (info.kind == DTypeKind::kQuantized && !Dequantizable(view)) {
    if (IsBlockDType(view.dtype)) return "block-quantized (" + std::string(info.name) + "): trove does not dequantize it yet";
    return "quantized (" + std::string(info.name) + (view.quantizer ? "): packed elements" : "): values need the quantizer");
  }
  if (info.kind == DTypeKind::kBits) return "a bit container (" + std::string(info.name) + "): no numeric values";
  return std::nullopt;
}

std::vector<TensorStats> ComputeStats(std::span<const TensorView* const> given, const StatsOptions& options,
                                      std::span<const std::string> names) {
  // A quantized tensor's figures are those of its values, as torch's dequantize() (or ggml's
  // dequantizers, for a block type) gives them.
  std::deque<TensorView> dequantized;  // only the quantized ones; a deque keeps their addresses
  std::vector<const TensorView*> chosen(given.begin(), given.end());
  for (const TensorView*& v : chosen) {
    if (Dequantizable(*v) && v->has_data) v = &dequantized.emplace_back(CastView(*v, DType::kFloat32));
  }
  const std::span<const TensorView* const> views(chosen);
  if (options.histogram_bins > kMaxStatsHistogramBins) {
    Fail(ErrorCode::kLimit, std::to_string(options.histogram_bins) + " histogram bins: at most kMaxStatsHistogramBins (" +
                                std::to_string(kMaxStatsHistogramBins) + ")");
  }
  const uint32_t threads =
      std::min(kMaxStatsThreads, options.threads ? options.threads : ThreadCount());
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
    accs[i].bucketed = options.histogram_bins > 0 && !options.exact_histograms && ExactInFloat32(accs[i].walk.dtype) &&
                       accs[i].walk.elements * accs[i].walk.values_per_element >= kMinBucketedValues;
    // With exact histograms, each chunk is an item of each sweep.
    first_item[i + 1] = first_item[i] + accs[i].walk.chunks * (options.histogram_bins > 0 && !accs[i].bucketed ? 2 : 1);
  }
  const uint64_t items = first_item.back();
  auto tensor_of = [&](uint64_t item) {
    return static_cast<size_t>(std::upper_bound(first_item.begin(), first_item.end(), item) - first_item.begin() - 1);
  };
  // The bytes a chunk of a tensor's walk covers (a serial walk is one chunk of everything).
  auto chunk_bytes = [&](size_t t, uint64_t chunk) -> uint64_t {
    const Walk& w = accs[t].walk;
    if (w.serial) return w.elements * w.esize;
    const uint64_t first = chunk * w.chunk_elements;
    return first >= w.elements ? 0 : std::min(w.chunk_elements, w.elements - first) * w.esize;
  };
  uint64_t sweep_bytes = 0;
  if (options.progress) {
    for (size_t t = 0; t < views.size(); ++t) {
      const uint64_t sweeps = (first_item[t + 1] - first_item[t]) / std::max<uint64_t>(1, accs[t].walk.chunks);
      sweep_bytes += accs[t].walk.elements * accs[t].walk.esize * sweeps;
    }
  }
  ProgressReporter progress(options.progress, sweep_bytes);
  std::mutex merge_mutex;
  thread_local std::vector<double> values;
  thread_local std::vector<uint32_t> bucket_table;  // a chunk's bucket counts (zero between chunks)
  thread_local bool bucket_table_dirty = false;
  const uint32_t bins = options.histogram_bins;

  // One sweep of moments and counts per tensor, and with histograms a second one between the
  // extremes the first found. A tensor's second sweep follows its own first (its items come
  // right after; they wait until the last chunk of the first sweep is merged), so a tensor that
  // fits in the caches is read from them again; its mapped pages are released after the second.
  std::condition_variable binned;
  bool failed = false;
  RunItems(items, threads, options.guard_truncation, [&](uint64_t item) {
    const size_t t = tensor_of(item);
    Accumulator& acc = accs[t];
    uint64_t chunk = item - first_item[t];
    struct Reported {  // the chunk's bytes, once it is done however it ends
      ProgressReporter& progress;
      uint64_t bytes;
      ~Reported() noexcept(false) {  // the callback may throw, as a writer's may
        if (progress.active() && std::uncaught_exceptions() == 0) progress.Add(bytes);
      }
    } reported{progress, progress.active() ? chunk_bytes(t, chunk % std::max<uint64_t>(1, acc.walk.chunks)) : 0};
    values.resize(kBlockValues);
    if (chunk < acc.walk.chunks) {
      Extremes e;
      const bool release = bins == 0 || acc.bucketed || acc.walk.elements * acc.walk.esize > kStatsRereadBytes;
      // A chunk that failed part way left its counts behind: start again from zeros.
      if (acc.bucketed) {
        if (bucket_table.size() != kBuckets || bucket_table_dirty) bucket_table.assign(kBuckets, 0);
        bucket_table_dirty = true;
      }
      std::vector<TreeNode> nodes = named(t, [&] {
        return ChunkMoments(acc.walk, chunk, acc.smallest_normal, bins > 0, values.data(), release,
                            acc.bucketed ? bucket_table.data() : nullptr, e);
      });
      std::lock_guard<std::mutex> lock(merge_mutex);
      if (acc.bucketed) {
        if (acc.buckets.empty()) acc.buckets.assign(kBuckets, 0);
        ForEachChunkBucketRange(e, [&](uint32_t first, uint32_t last) {
          for (uint32_t k = first; k <= last; ++k) acc.buckets[k] += bucket_table[k];
          if (first <= last) std::fill(bucket_table.begin() + first, bucket_table.begin() + last + 1, 0u);
        });
        bucket_table_dirty = false;
      }
      acc.extremes.Add(e);
      acc.early.emplace(chunk, std::move(nodes));
      // Chunks join the tree in order, each as the subtree it is; those done early wait their turn.
      for (auto it = acc.early.begin(); it != acc.early.end() && it->first == acc.next_chunk; it = acc.early.erase(it)) {
        for (const TreeNode& node : it->second) acc.tree.Push(node);
        ++acc.next_chunk;
      }
      if (bins > 0 && ++acc.chunks_done == acc.walk.chunks) {
        SetBinnings(acc, bins);
        binned.notify_all();
      }
      return;
    }
    chunk -= acc.walk.chunks;
    {
      // Every first-sweep item of this tensor has started (items start in order) and none
      // waits: they finish, or fail and stop the wait.
      std::unique_lock<std::mutex> lock(merge_mutex);
      binned.wait(lock, [&] { return acc.binned || failed; });
      if (failed) return;
    }
    if (!acc.linear.active() || acc.counted) {  // no finite value, or one: only the kept pages to release
      ReleaseChunk(acc.walk, chunk);
      return;
    }
    std::vector<uint64_t> linear(bins, 0), logs(bins, 0);
    named(t, [&] { ChunkHistogram(acc.walk, chunk, acc, values.data(), linear, logs); });
    std::lock_guard<std::mutex> lock(merge_mutex);  // integer counts: any order gives the same sums
    for (uint32_t b = 0; b < bins; ++b) acc.linear_counts[b] += linear[b];
    if (acc.log10_abs.active())
      for (uint32_t b = 0; b < bins; ++b) acc.log_counts[b] += logs[b];
  }, [&] {
    std::lock_guard<std::mutex> lock(merge_mutex);
    failed = true;
    binned.notify_all();
  });

  progress.Finish();
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
