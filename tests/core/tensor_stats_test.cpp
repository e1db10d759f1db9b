// ComputeStats against a plain reference: every logical element decoded one at a time by the
// element codec, figures accumulated in long double, two passes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "trove/element_codec.h"
#include "trove/error.h"
#include "trove/tensor.h"
#include "trove/tensor_stats.h"

namespace trove {
namespace {

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * std::max<int64_t>(shape[i], 1);
  return s;
}

TensorView MakeView(DType dtype, std::vector<uint8_t> bytes, std::vector<int64_t> shape, std::vector<int64_t> strides = {},
                    int64_t offset = 0, ByteOrder order = ByteOrder::kLittle) {
  TensorView v;
  v.dtype = dtype;
  v.strides = strides.empty() ? ContiguousStrides(shape) : strides;
  v.shape = std::move(shape);
  v.storage_offset = offset;
  v.byte_order = order;
  v.storage = SharedBytes::FromVector(std::move(bytes));
  v.Validate();
  return v;
}

template <class T>
std::vector<uint8_t> BytesOf(const std::vector<T>& values) {
  std::vector<uint8_t> b(values.size() * sizeof(T));
  std::memcpy(b.data(), values.data(), b.size());
  return b;
}

// Every value of the view in logical order, as the statistics define them.
std::vector<double> ReferenceValues(const TensorView& v) {
  std::vector<double> out;
  const size_t esize = ElementSize(v.dtype);
  const int64_t n = v.numel();
  std::vector<int64_t> index(v.shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = v.storage_offset;
    for (size_t d = 0; d < v.shape.size(); ++d) off += index[d] * v.strides[d];
    std::vector<uint8_t> e(v.storage.data() + off * esize, v.storage.data() + (off + 1) * esize);
    if (v.byte_order == ByteOrder::kBig) ByteSwapElements(e.data(), 1, v.dtype);
    const ElementValue x = DecodeElement(v.dtype, e.data());
    switch (x.kind) {
      case ElementValue::Kind::kFloat: out.push_back(x.re); break;
      case ElementValue::Kind::kInt: out.push_back(static_cast<double>(x.i)); break;
      case ElementValue::Kind::kUInt: out.push_back(static_cast<double>(x.u)); break;
      case ElementValue::Kind::kBool: out.push_back(x.b ? 1 : 0); break;
      case ElementValue::Kind::kComplex: out.push_back(std::hypot(x.re, x.im)); break;
      case ElementValue::Kind::kFloatPair: out.push_back(x.re); out.push_back(x.im); break;
    }
    for (size_t d = v.shape.size(); d-- > 0;) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

void ExpectMatchesReference(const TensorView& v, double smallest_normal, const StatsOptions& options = {}) {
  const std::vector<double> x = ReferenceValues(v);
  const TensorStats s = ComputeStats(v, options);
  uint64_t nan = 0, pinf = 0, ninf = 0, zeros = 0, sub = 0;
  std::vector<double> fin;
  for (double d : x) {
    if (std::isnan(d)) ++nan;
    else if (d == INFINITY) ++pinf;
    else if (d == -INFINITY) ++ninf;
    else {
      fin.push_back(d);
      zeros += d == 0;
      sub += d != 0 && std::fabs(d) < smallest_normal;
    }
  }
  EXPECT_EQ(s.count, x.size());
  EXPECT_EQ(s.finite, fin.size());
  EXPECT_EQ(s.nan, nan);
  EXPECT_EQ(s.pos_inf, pinf);
  EXPECT_EQ(s.neg_inf, ninf);
  EXPECT_EQ(s.zeros, zeros);
  const auto kind = Info(v.dtype).kind;
  if (kind == DTypeKind::kFloat || kind == DTypeKind::kComplex) {
    ASSERT_TRUE(s.subnormal.has_value());
    EXPECT_EQ(*s.subnormal, sub);
  } else {
    EXPECT_FALSE(s.subnormal.has_value());
  }
  if (fin.empty()) {
    EXPECT_FALSE(s.min || s.max || s.mean || s.std || s.mean_abs);
    return;
  }
  long double sum = 0, sum_abs = 0;
  for (double d : fin) sum += d, sum_abs += std::fabs(d);
  const long double mean = sum / fin.size();
  long double m2 = 0;
  for (double d : fin) m2 += (d - mean) * (d - mean);
  const double ref_std = static_cast<double>(std::sqrt(m2 / fin.size()));
  EXPECT_EQ(*s.min, *std::min_element(fin.begin(), fin.end()));
  EXPECT_EQ(*s.max, *std::max_element(fin.begin(), fin.end()));
  const double scale = std::max({static_cast<double>(sum_abs / fin.size()), ref_std, 1e-300});
  EXPECT_NEAR(*s.mean, static_cast<double>(mean), 1e-12 * scale);
  EXPECT_NEAR(*s.std, ref_std, 1e-12 * scale);
  EXPECT_NEAR(*s.mean_abs, static_cast<double>(sum_abs / fin.size()), 1e-12 * scale);
}

std::vector<uint8_t> EveryByte() {
  std::vector<uint8_t> b(256);
  for (int i = 0; i < 256; ++i) b[i] = static_cast<uint8_t>(i);
  return b;
}

TEST(TensorStatsTest, EveryValueOfTheOneByteFloats) {
  ExpectMatchesReference(MakeView(DType::kFloat8E4M3FN, EveryByte(), {256}), 0x1p-6);
  ExpectMatchesReference(MakeView(DType::kFloat8E5M2, EveryByte(), {16, 16}), 0x1p-14);
  ExpectMatchesReference(MakeView(DType::kFloat8E4M3FNUZ, EveryByte(), {256}), 0x1p-7);
  ExpectMatchesReference(MakeView(DType::kFloat8E5M2FNUZ, EveryByte(), {256}), 0x1p-15);
  ExpectMatchesReference(MakeView(DType::kFloat8E8M0FNU, EveryByte(), {256}), 0);
  ExpectMatchesReference(MakeView(DType::kFloat4E2M1FNx2, EveryByte(), {256}), 1.0);
  // e4m3fn: two NaN patterns, no infinity; e5m2: IEEE-like.
  EXPECT_EQ(ComputeStats(MakeView(DType::kFloat8E4M3FN, EveryByte(), {256})).nan, 2u);
  const TensorStats e5m2 = ComputeStats(MakeView(DType::kFloat8E5M2, EveryByte(), {256}));
  EXPECT_EQ(e5m2.pos_inf, 1u);
  EXPECT_EQ(e5m2.neg_inf, 1u);
  EXPECT_EQ(e5m2.nan, 6u);
  EXPECT_EQ(*e5m2.subnormal, 6u);  // mantissa 1..3, both signs
  EXPECT_EQ(ComputeStats(MakeView(DType::kFloat4E2M1FNx2, EveryByte(), {256})).count, 512u);
}

TEST(TensorStatsTest, EveryHalfAndBFloat16Pattern) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  ExpectMatchesReference(MakeView(DType::kFloat16, BytesOf(all), {65536}), 0x1p-14);
  ExpectMatchesReference(MakeView(DType::kBFloat16, BytesOf(all), {256, 256}), 0x1p-126);
  const TensorStats h = ComputeStats(MakeView(DType::kFloat16, BytesOf(all), {65536}));
  EXPECT_EQ(h.nan, 2u * 1023);
  EXPECT_EQ(h.pos_inf, 1u);
  EXPECT_EQ(*h.subnormal, 2u * 1023);
  EXPECT_EQ(h.zeros, 2u);
  EXPECT_EQ(*h.max, 65504.0);
}

TEST(TensorStatsTest, IntegersAndBool) {
  std::mt19937_64 rng(7);
  auto random = [&](auto sample) {
    using T = decltype(sample);
    std::vector<T> v(5001);
    for (auto& x : v) x = static_cast<T>(rng());
    v[3] = 0;
    return BytesOf(v);
  };
  ExpectMatchesReference(MakeView(DType::kInt8, random(int8_t{}), {5001}), 0);
  ExpectMatchesReference(MakeView(DType::kInt16, random(int16_t{}), {5001}), 0);
  ExpectMatchesReference(MakeView(DType::kInt32, random(int32_t{}), {5001}), 0);
  ExpectMatchesReference(MakeView(DType::kInt64, random(int64_t{}), {5001}), 0);
  ExpectMatchesReference(MakeView(DType::kUInt8, random(uint8_t{}), {5001}), 0);
  ExpectMatchesReference(MakeView(DType::kUInt16, random(uint16_t{}), {5001}), 0);
  ExpectMatchesReference(MakeView(DType::kUInt32, random(uint32_t{}), {5001}), 0);
  ExpectMatchesReference(MakeView(DType::kUInt64, random(uint64_t{}), {5001}), 0);
  // Any nonzero byte is True.
  const TensorStats b = ComputeStats(MakeView(DType::kBool, {0, 1, 2, 255, 0}, {5}));
  EXPECT_EQ(b.zeros, 2u);
  EXPECT_EQ(*b.mean, 0.6);
  EXPECT_EQ(*b.max, 1.0);
}

TEST(TensorStatsTest, ComplexAsMagnitudes) {
  std::vector<float> c64 = {3, 4, 0, 0, NAN, 1, 1, INFINITY, -1e-40f, 0, 0.5f, -0.25f};
  ExpectMatchesReference(MakeView(DType::kComplex64, BytesOf(c64), {6}), FLT_MIN);
  const TensorStats s = ComputeStats(MakeView(DType::kComplex64, BytesOf(c64), {6}));
  EXPECT_EQ(*s.max, 5.0);
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.pos_inf, 1u);
  EXPECT_EQ(*s.subnormal, 1u);
  std::vector<double> c128 = {1e150, 1e150, -2, 0, 0, 0};
  ExpectMatchesReference(MakeView(DType::kComplex128, BytesOf(c128), {3}), DBL_MIN);
  // Deviations whose squares leave float64's range (numpy's std is inf there too).
  std::vector<double> huge = {1e300, 1e300, -2, 0, 0, 0};
  EXPECT_EQ(*ComputeStats(MakeView(DType::kComplex128, BytesOf(huge), {3})).std, INFINITY);
  std::vector<uint16_t> c32 = {0x3C00, 0x3C00, 0x0001, 0, 0x7C00, 0};
  ExpectMatchesReference(MakeView(DType::kComplex32, BytesOf(c32), {3}), 0x1p-14);
}

TEST(TensorStatsTest, StridedOffsetAndBigEndianViews) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(2.0f, 5.0f);
  std::vector<float> base(64 * 50);
  for (auto& x : base) x = normal(rng);
  base[77] = NAN;
  base[78] = 0;
  base[79] = 1e-42f;
  std::vector<uint8_t> little = BytesOf(base), big = little;
  ByteSwapElements(big.data(), base.size(), DType::kFloat32);
  for (ByteOrder order : {ByteOrder::kLittle, ByteOrder::kBig}) {
    const auto& bytes = order == ByteOrder::kBig ? big : little;
    ExpectMatchesReference(MakeView(DType::kFloat32, bytes, {64, 50}, {}, 0, order), FLT_MIN);
    ExpectMatchesReference(MakeView(DType::kFloat32, bytes, {50, 64}, {1, 50}, 0, order), FLT_MIN);        // transposed
    ExpectMatchesReference(MakeView(DType::kFloat32, bytes, {21, 10}, {150, 5}, 3, order), FLT_MIN);       // stepped
    ExpectMatchesReference(MakeView(DType::kFloat32, bytes, {3, 7, 2}, {400, 1, 200}, 60, order), FLT_MIN);
    ExpectMatchesReference(MakeView(DType::kFloat32, bytes, {}, {}, 77, order), FLT_MIN);                  // scalar NaN
  }
  std::vector<double> d = {1.5, -2, 1e-310, 0, INFINITY, -INFINITY, 7};
  std::vector<uint8_t> dbig = BytesOf(d);
  ByteSwapElements(dbig.data(), d.size(), DType::kFloat64);
  ExpectMatchesReference(MakeView(DType::kFloat64, dbig, {7}, {}, 0, ByteOrder::kBig), DBL_MIN);
  std::vector<int16_t> i16 = {1, -300, 32767, -32768};
  std::vector<uint8_t> ibig = BytesOf(i16);
  ByteSwapElements(ibig.data(), i16.size(), DType::kInt16);
  ExpectMatchesReference(MakeView(DType::kInt16, ibig, {2, 2}, {1, 2}, 0, ByteOrder::kBig), 0);
}

TEST(TensorStatsTest, ThreadCountNeverChangesABit) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(1e4, 1e-2);
  std::vector<double> v(3'000'017);
  for (auto& x : v) x = normal(rng);
  v[12345] = NAN;
  v[2'000'000] = -INFINITY;
  const TensorView contiguous = MakeView(DType::kFloat64, BytesOf(v), {3'000'017});
  const TensorView strided = MakeView(DType::kFloat64, BytesOf(v), {1000, 1500}, {1, 2000}, 17);
  for (const TensorView* view : {&contiguous, &strided}) {
    StatsOptions one;
    one.threads = 1;
    one.histogram_bins = 33;
    const TensorStats a = ComputeStats(*view, one);
    for (uint32_t threads : {2u, 3u, 8u}) {
      StatsOptions many = one;
      many.threads = threads;
      const TensorStats b = ComputeStats(*view, many);
      EXPECT_EQ(std::memcmp(&*a.mean, &*b.mean, 8), 0) << threads;
      EXPECT_EQ(std::memcmp(&*a.std, &*b.std, 8), 0) << threads;
      EXPECT_EQ(std::memcmp(&*a.mean_abs, &*b.mean_abs, 8), 0) << threads;
      EXPECT_EQ(a.histogram.counts, b.histogram.counts);
      EXPECT_EQ(a.log10_abs_histogram.counts, b.log10_abs_histogram.counts);
      EXPECT_EQ(a.nan, b.nan);
    }
  }
  ExpectMatchesReference(strided, DBL_MIN);
}

TEST(TensorStatsTest, SeveralTensorsShareOnePoolAndKeepTheirOrder) {
  std::vector<float> a(700'000, 1.0f), b(10, -2.0f);
  const TensorView va = MakeView(DType::kFloat32, BytesOf(a), {700'000}), vb = MakeView(DType::kFloat32, BytesOf(b), {10});
  const TensorView* views[] = {&va, &vb, &va};
  const auto all = ComputeStats(std::span<const TensorView* const>(views, 3), {});
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(*all[0].mean, 1.0);
  EXPECT_EQ(*all[1].mean, -2.0);
  EXPECT_EQ(all[2].count, 700'000u);
}

TEST(TensorStatsTest, ExpandedDimensionsMultiplyCountsWithoutBeingWalked) {
  std::vector<float> three = {1.0f, 0.0f, NAN};
  // 10^12 logical elements over 3 stored ones.
  const TensorView v = MakeView(DType::kFloat32, BytesOf(three), {1'000'000, 3, 1'000'000}, {0, 1, 0});
  StatsOptions options;
  options.histogram_bins = 4;
  const TensorStats s = ComputeStats(v, options);
  EXPECT_EQ(s.count, uint64_t{3'000'000'000'000});
  EXPECT_EQ(s.nan, uint64_t{1'000'000'000'000});
  EXPECT_EQ(s.zeros, uint64_t{1'000'000'000'000});
  EXPECT_EQ(*s.mean, 0.5);
  EXPECT_EQ(*s.std, 0.5);
  EXPECT_EQ(s.histogram.counts, (std::vector<uint64_t>{1'000'000'000'000, 0, 0, 1'000'000'000'000}));
}

TEST(TensorStatsTest, OverlappingViewsStopAtTheCap) {
  // Sliding windows (as unfold makes): 2^40 logical elements over 2^21 stored bytes.
  const TensorView v = MakeView(DType::kUInt8, std::vector<uint8_t>(size_t{1} << 21, 1), {int64_t{1} << 20, int64_t{1} << 20}, {1, 1});
  try {
    ComputeStats(v);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimit);
    EXPECT_NE(e.message().find("kMaxStatsOverlapElements"), std::string::npos) << e.message();
  }
  // A small overlap is walked.
  ExpectMatchesReference(MakeView(DType::kUInt8, EveryByte(), {50, 50}, {2, 3}), 0);
}

TEST(TensorStatsTest, HistogramsCountByTheirOwnEdges) {
  std::vector<double> v;
  for (int i = 0; i <= 10; ++i) v.push_back(i);
  v.push_back(NAN);
  StatsOptions options;
  options.histogram_bins = 10;
  const TensorStats s = ComputeStats(MakeView(DType::kFloat64, BytesOf(v), {12}), options);
  ASSERT_EQ(s.histogram.edges.size(), 11u);
  EXPECT_EQ(s.histogram.counts, (std::vector<uint64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 2}));  // last bin closed
  // log10 of 1..10 between 0 and 1; the zero is counted apart.
  uint64_t logs = 0;
  for (uint64_t c : s.log10_abs_histogram.counts) logs += c;
  EXPECT_EQ(logs, 10u);
  EXPECT_EQ(s.log10_abs_histogram.edges.front(), 0.0);
  EXPECT_EQ(s.log10_abs_histogram.edges.back(), 1.0);
  // One distinct value: numpy's range of value +- 0.5.
  const TensorStats one = ComputeStats(MakeView(DType::kFloat64, BytesOf(std::vector<double>{2, 2}), {2}), options);
  EXPECT_EQ(one.histogram.edges.front(), 1.5);
  EXPECT_EQ(one.histogram.counts[5], 2u);
  options.histogram_bins = kMaxStatsHistogramBins + 1;
  EXPECT_THROW(ComputeStats(MakeView(DType::kFloat64, BytesOf(v), {12}), options), Error);
}

// A constant tensor's every value lies on an edge of numpy's range around it (v - 0.5, v + 0.5):
// counted at once after the first sweep, as numpy.histogram counts them.
TEST(TensorStatsTest, ConstantTensorsHistogramLikeNumpy) {
  StatsOptions options;
  options.histogram_bins = 4;
  const size_t n = 3 * 65536 + 5;  // several blocks and a tail
  for (double c : {0.0, 1.0, -2.5, 0.3}) {
    TensorView v = MakeView(DType::kFloat64, BytesOf(std::vector<double>(n, c)), {static_cast<int64_t>(n)});
    TensorStats s = ComputeStats(v, options);
    // numpy.histogram(np.full(n, c), bins=4): edges c-0.5 .. c+0.5, every value in bin 2 ([c, c+0.25)).
    EXPECT_EQ(s.histogram.edges.front(), c - 0.5) << c;
    EXPECT_EQ(s.histogram.counts, (std::vector<uint64_t>{0, 0, n, 0})) << c;
    if (c == 0) {
      EXPECT_TRUE(s.log10_abs_histogram.counts.empty());
    } else {
      uint64_t logs = 0;
      for (uint64_t k : s.log10_abs_histogram.counts) logs += k;
      EXPECT_EQ(logs, n) << c;
      EXPECT_EQ(s.log10_abs_histogram.counts[2], n) << c;  // log10|c| is the middle of its range too
    }
  }
  // NaN and infinities beside one finite value: only the finite one is counted.
  std::vector<float> mixed(1000, 7.0f);
  mixed[3] = NAN;
  mixed[9] = INFINITY;
  TensorStats s = ComputeStats(MakeView(DType::kFloat32, BytesOf(mixed), {1000}), options);
  EXPECT_EQ(s.histogram.counts, (std::vector<uint64_t>{0, 0, 998, 0}));
}

TEST(TensorStatsTest, EmptyTensorsAndWhatHasNoValues) {
  const TensorStats e = ComputeStats(MakeView(DType::kFloat32, {}, {0, 5}));
  EXPECT_EQ(e.count, 0u);
  EXPECT_FALSE(e.mean.has_value());
  TensorView q = MakeView(DType::kQInt8, {1, 2}, {2});
  EXPECT_TRUE(StatsUnsupportedReason(q).has_value());
  EXPECT_THROW(ComputeStats(q), Error);
  TensorView meta = MakeView(DType::kFloat32, {}, {0});
  meta.has_data = false;
  meta.shape = {3};
  meta.strides = {1};
  EXPECT_TRUE(StatsUnsupportedReason(meta).has_value());
  const TensorStats nan_only = ComputeStats(MakeView(DType::kFloat32, BytesOf(std::vector<float>{NAN, NAN}), {2}));
  EXPECT_EQ(nan_only.nan, 2u);
  EXPECT_FALSE(nan_only.min.has_value());
}

TEST(TensorStatsTest, ConvertingViewsStream) {
  std::vector<double> v = {1.0000001, -3, 0.1, 65520};
  const TensorView src = MakeView(DType::kFloat64, BytesOf(v), {4});
  const TensorView cast = CastView(src, DType::kFloat16);
  const SharedBytes converted = cast.ContiguousLittleEndian();
  const TensorView stored = MakeView(DType::kFloat16, std::vector<uint8_t>(converted.data(), converted.data() + converted.size()), {4});
  ExpectMatchesReference(stored, 0x1p-14);
  const TensorStats a = ComputeStats(cast), b = ComputeStats(stored);
  EXPECT_EQ(a.pos_inf, 1u);  // 65520 rounds to inf in float16
  EXPECT_EQ(*a.mean, *b.mean);
  EXPECT_EQ(*a.std, *b.std);
  EXPECT_EQ(a.count, b.count);
}

}  // namespace
}  // namespace trove
