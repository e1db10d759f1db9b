// The whole-run casts (core/cast_runs.h): both float16 paths (F16C where the CPU has it, the
// portable loop elsewhere) agree bit for bit over every float32 and every float16, and with the
// element path (FloatToHalf) on every non-NaN value; NaN stays NaN (quiet, payload's top kept).
// The other runs agree with the element path on edge values. torch's agreement is
// tests/python/test_cast_exact.py's.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cast_runs.h"
#include "trove/element_codec.h"

namespace trove {
namespace {

TEST(CastRuns, Float32ToHalfBothPathsEveryFloat32) {
  constexpr size_t kBatch = size_t{1} << 22;
  std::vector<uint32_t> in(kBatch);
  std::vector<uint16_t> fast(kBatch), portable(kBatch);
  uint64_t mismatches = 0;
  for (uint64_t start = 0; start < (uint64_t{1} << 32); start += kBatch) {
    for (size_t i = 0; i < kBatch; ++i) in[i] = static_cast<uint32_t>(start + i);
    LossCounts a, b;
    const auto* bytes = reinterpret_cast<const uint8_t*>(in.data());
    ASSERT_TRUE(CastRun(DType::kFloat32, DType::kFloat16, bytes, reinterpret_cast<uint8_t*>(fast.data()), kBatch, a));
    Float32ToHalfPortableRun(bytes, reinterpret_cast<uint8_t*>(portable.data()), kBatch, b);
    EXPECT_EQ(a.overflowed, b.overflowed);
    EXPECT_EQ(a.underflowed, b.underflowed);
    for (size_t i = 0; i < kBatch; i += (i % 4096 == 0 ? 1 : 97)) {  // the element path on a sample
      const float f = std::bit_cast<float>(in[i]);
      if (!std::isnan(f) && portable[i] != FloatToHalf(f)) ++mismatches;
    }
    if (std::memcmp(fast.data(), portable.data(), kBatch * 2) != 0) {
      for (size_t i = 0; i < kBatch; ++i)
        ASSERT_EQ(fast[i], portable[i]) << "float32 bits " << std::hex << in[i];
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(CastRuns, HalfToFloat32BothPathsEveryHalf) {
  std::vector<uint16_t> in(65536);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i);
  std::vector<uint32_t> fast(65536), portable(65536);
  LossCounts none;
  const auto* bytes = reinterpret_cast<const uint8_t*>(in.data());
  ASSERT_TRUE(CastRun(DType::kFloat16, DType::kFloat32, bytes, reinterpret_cast<uint8_t*>(fast.data()), in.size(), none));
  HalfToFloat32PortableRun(bytes, reinterpret_cast<uint8_t*>(portable.data()), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(fast[i], portable[i]) << "half bits " << std::hex << i;
    const float f = std::bit_cast<float>(portable[i]);
    const double want = HalfToDouble(static_cast<uint16_t>(i));
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(f)) << i;
    else EXPECT_EQ(static_cast<double>(f), want) << i;
  }
}

TEST(CastRuns, Float64ToFloat32CountsWhatItLoses) {
  const std::vector<double> in = {1.0, 1e39, -1e39, 1e-50, -1e-50, 0.0, -0.0, std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::quiet_NaN(), 3.4028235677973366e38, 1.4e-45};
  std::vector<float> out(in.size());
  LossCounts losses;
  ASSERT_TRUE(CastRun(DType::kFloat64, DType::kFloat32, reinterpret_cast<const uint8_t*>(in.data()),
                      reinterpret_cast<uint8_t*>(out.data()), in.size(), losses));
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) EXPECT_TRUE(std::isnan(out[i]));
    else EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(static_cast<float>(in[i]))) << i;
  }
  EXPECT_EQ(losses.overflowed, 3u);  // 1e39, -1e39 and 3.4028235677973366e38 (rounds up past FLT_MAX)
  EXPECT_EQ(losses.underflowed, 2u);
}

TEST(CastRuns, WideningsAreExactAndNarrowingsAreLeftToTheElementPath) {
  const std::vector<int8_t> in = {-128, -1, 0, 1, 127};
  std::vector<int64_t> wide(in.size());
  std::vector<double> real(in.size());
  LossCounts losses;
  const auto* bytes = reinterpret_cast<const uint8_t*>(in.data());
  ASSERT_TRUE(CastRun(DType::kInt8, DType::kInt64, bytes, reinterpret_cast<uint8_t*>(wide.data()), in.size(), losses));
  ASSERT_TRUE(CastRun(DType::kInt8, DType::kFloat64, bytes, reinterpret_cast<uint8_t*>(real.data()), in.size(), losses));
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(wide[i], in[i]);
    EXPECT_EQ(real[i], in[i]);
  }
  uint8_t scratch[64];
  EXPECT_FALSE(CastRun(DType::kInt64, DType::kInt8, scratch, scratch + 32, 1, losses));
  EXPECT_FALSE(CastRun(DType::kInt8, DType::kUInt16, scratch, scratch + 32, 1, losses));  // sign: element path
  EXPECT_FALSE(CastRun(DType::kInt32, DType::kFloat32, scratch, scratch + 32, 1, losses));
}

}  // namespace
}  // namespace trove
