// trove/tensor_stats.h: the figures that say whether a tensor is healthy (`trove stats`).
//
// ComputeStats streams a tensor's logical elements once (twice with histograms), decoding them to
// float64 in blocks, and returns its element count, min, max, mean, standard deviation, mean of
// absolute values and the counts of zeros, NaN, +Inf, -Inf and subnormals. The moments are over
// the finite elements and agree with numpy's float64 figures of those elements
// (`x[np.isfinite(x)].astype(np.float64)`: .min() .max() .mean() .std() np.abs().mean()) to
// about 1e-12 of the data's scale; complex tensors are taken as their float64 magnitudes, bool as
// 0/1, each nibble of float4_e2m1fn_x2 as one value.
//
// Work is split into fixed chunks of logical elements spread over threads; chunk results merge in
// a fixed pairwise tree, so the figures do not depend on the thread count. Memory is bounded by a
// few blocks per thread whatever the tensor's size (with histograms, the mapped pages of a tensor
// of up to 64 MiB stay resident between its two passes); dimensions of stride 0 (expanded views)
// are never walked, they multiply the counts.
//
// Lifetime: the views must stay valid during the call only. Thread-safety: the functions share
// no state; the views are only read.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trove/tensor.h"

namespace trove {

// A view that revisits stored elements (overlapping strides, as unfold or as_strided make) may
// claim up to 2^63 logical elements over a small storage. Views are walked up to the larger of
// their storage's element count (what an honest view can have) and this many elements (a few
// seconds of work); beyond, ComputeStats refuses with Error(kLimit) naming the cap.
inline constexpr uint64_t kMaxStatsOverlapElements = uint64_t{1} << 32;
// A histogram's bins are held per thread and per chunk: far above what a person reads or plots.
inline constexpr uint32_t kMaxStatsHistogramBins = 4096;

// Threads asked for beyond this are not started: each reserves a stack (8 MiB of address space by
// default) and threads beyond the cores only add switching; 32 covers the machines trove runs on.
inline constexpr uint32_t kMaxStatsThreads = 32;

struct StatsOptions {
  uint32_t threads = 0;        // 0: ThreadCount() (trove/threads.h); at most kMaxStatsThreads
  uint32_t histogram_bins = 0; // 0: no histograms; else at most kMaxStatsHistogramBins
  // True: every count equals numpy.histogram's for the edges (a second sweep places each value).
  // False: for tensors whose values are all float32-exact (float32, bfloat16, float16, float8/4,
  // integers of up to 16 bits, bool) of at least 65,536 values, histograms come from the one sweep
  // of the other figures: values are counted in 2^16 buckets (a value's float32 sign, exponent and
  // top 7 mantissa bits), and a bucket that a bin edge cuts is spread over its bins by width, so a
  // count can be off by part of the values lying within 2^-7 of their magnitude of an edge. For
  // pictures (trove report); figures other than the histograms are the same either way.
  bool exact_histograms = true;
  // Run each worker's reads under RunGuardingTruncation (trove/shared_bytes.h): a file truncated
  // meanwhile becomes an Error instead of SIGBUS. For short-lived programs only (see there).
  bool guard_truncation = false;
  // Called with (bytes swept so far, bytes to sweep: each tensor's walked bytes, twice with exact
  // histograms) as chunks complete, as WriteOptions::progress is (core/progress.h: at most once
  // per 4 MiB and once at the end, never two calls at once); empty: never.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct Histogram {
  std::vector<double> edges;    // bins + 1 increasing edges; bin i is [edges[i], edges[i+1]), the last closed
  std::vector<uint64_t> counts; // bins
};

struct TensorStats {
  uint64_t count = 0;      // values: numel (x2 for float4_e2m1fn_x2)
  uint64_t finite = 0;     // values that are neither NaN nor infinite
  // Over the finite values; none when there is no finite value.
  std::optional<double> min, max, mean, std, mean_abs;
  uint64_t zeros = 0, nan = 0, pos_inf = 0, neg_inf = 0;
  // Nonzero finite values below the dtype's smallest normal number; none for non-floating dtypes.
  std::optional<uint64_t> subnormal;
  // With StatsOptions::histogram_bins: of the finite values, linear between min and max (like
  // numpy.histogram(x, bins, range=(min, max)), min == max giving min +- 0.5), and of log10|x|
  // for the finite nonzero values (zeros are counted in `zeros`). Empty when there is no such value.
  Histogram histogram, log10_abs_histogram;
};

// Throws Error(kUnsupported) for quantized dtypes, bit containers and meta tensors (no data),
// Error(kLimit) past kMaxStatsOverlapElements or kMaxStatsHistogramBins, and whatever reading the
// bytes throws. The view must have passed TensorView::Validate (every reader's views have).
TensorStats ComputeStats(const TensorView& view, const StatsOptions& options = {});

// Several tensors at once, their chunks sharing one pool of threads (many small tensors keep
// every core busy). Results in the order given; the first error (in that order) is thrown, with
// names[i] (when given) prefixed as the failing tensor's context.
std::vector<TensorStats> ComputeStats(std::span<const TensorView* const> views, const StatsOptions& options = {},
                                      std::span<const std::string> names = {});

// Why ComputeStats would refuse this dtype ("quantized", "bit container"), or none.
std::optional<std::string> StatsUnsupportedReason(const TensorView& view);

}  // namespace trove
