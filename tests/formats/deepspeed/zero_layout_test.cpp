// The ZeRO partition arithmetic (formats/deepspeed/zero_layout.h): where each param's elements lie
// in the rank partitions, and the size checks that refuse partitions disagreeing with the shapes.
#include <gtest/gtest.h>

#include <vector>

#include "expect_error.h"
#include "formats/deepspeed/zero_layout.h"

namespace trove {
namespace {

using Pieces = std::vector<ZeroPiece>;

TEST(DeepSpeedZeroStage12, ParamsCrossRankBoundariesAndPaddingIsAllowed) {
  // 5 + 4 = 9 elements, padded to 12 (2 * 3 ranks), partitions of 4.
  const auto p = ZeroStage12Pieces({{{"a", 5}, {"b", 4}}}, {{4}, {4}, {4}});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], (Pieces{{0, 0, 0, 4}, {1, 0, 0, 1}}));
  EXPECT_EQ(p[1], (Pieces{{1, 0, 1, 3}, {2, 0, 0, 1}}));
  // Two groups, each its own flat buffer; a param within one partition is one piece.
  const auto q = ZeroStage12Pieces({{{"x", 2}}, {{"y", 3}, {"z", 1}}}, {{2, 2}, {2, 2}});
  EXPECT_EQ(q[0], (Pieces{{0, 0, 0, 2}}));
  EXPECT_EQ(q[1], (Pieces{{0, 1, 0, 2}, {1, 1, 0, 1}}));
  EXPECT_EQ(q[2], (Pieces{{1, 1, 1, 1}}));
}

TEST(DeepSpeedZeroStage12, TheLastPartitionWithoutItsPadding) {
  // 5 + 4 = 9 elements over 3 ranks: partitions of 4, the last saved without its 3 of padding.
  const auto p = ZeroStage12Pieces({{{"a", 5}, {"b", 4}}}, {{4}, {4}, {1}});
  EXPECT_EQ(p[1], (Pieces{{1, 0, 1, 3}, {2, 0, 0, 1}}));
  // Only the last may be shorter, and never longer.
  ExpectError([] { ZeroStage12Pieces({{{"a", 9}}}, {{4}, {1}, {4}}); }, ErrorCode::kCorrupt, "rank 1");
  ExpectError([] { ZeroStage12Pieces({{{"a", 9}}}, {{4}, {4}, {5}}); }, ErrorCode::kCorrupt, "rank 2");
  // Short of what the shapes declare.
  ExpectError([] { ZeroStage12Pieces({{{"a", 9}}}, {{4}, {4}, {0}}); }, ErrorCode::kCorrupt, "declare 9");
}

TEST(DeepSpeedZeroStage12, DisagreeingSizesAreNamed) {
  ExpectError([] { ZeroStage12Pieces({{{"a", 5}}}, {{4}, {3}, {4}}); }, ErrorCode::kCorrupt, "rank 1");
  ExpectError([] { ZeroStage12Pieces({{{"a", 9}}}, {{4}, {4}}); }, ErrorCode::kCorrupt, "param group 0");
  // More padding than the alignment allows: the shapes and partitions disagree.
  ExpectError([] { ZeroStage12Pieces({{{"a", 3}}}, {{4}, {4}}); }, ErrorCode::kCorrupt, "declare 3");
  ExpectError([] { ZeroStage12Pieces({{{"a", 1}}, {{"b", 1}}}, {{2}, {2}}); }, ErrorCode::kCorrupt, "param groups");
  // 2^40 * 2^40 elements saturate, never wrap into agreement.
  ExpectError([] { ZeroStage12Pieces({{{"a", uint64_t{1} << 62}, {"b", uint64_t{1} << 62}}}, {{2}, {2}}); },
              ErrorCode::kCorrupt, "more than 2^62");
  // Two numels of 2^63 (past the saturation point themselves) would wrap to 0 if added plainly.
  ExpectError([] { ZeroStage12Pieces({{{"a", uint64_t{1} << 63}, {"b", uint64_t{1} << 63}}}, {{0}, {0}}); },
              ErrorCode::kCorrupt, "more than 2^62");
}

TEST(DeepSpeedZeroStage3, EachParamSplitAcrossRanksWithTailPadding) {
  // 5 elements over 3 ranks: 2, 2, 1 (+1 padding); 1 element: rank 0 only; 4: 2, 2, 0.
  const auto p = ZeroStage3Pieces({{"a", 5}, {"b", 1}, {"c", 4}}, {{5}, {5}, {5}});
  EXPECT_EQ(p[0], (Pieces{{0, 0, 0, 2}, {1, 0, 0, 2}, {2, 0, 0, 1}}));
  EXPECT_EQ(p[1], (Pieces{{0, 0, 2, 1}}));
  EXPECT_EQ(p[2], (Pieces{{0, 0, 3, 2}, {1, 0, 3, 2}}));
  // A rank's flat buffer of two group tensors: pieces never straddle them.
  const auto q = ZeroStage3Pieces({{"a", 4}, {"b", 2}}, {{2, 1}, {2, 1}});
  EXPECT_EQ(q[1], (Pieces{{0, 1, 0, 1}, {1, 1, 0, 1}}));
}

TEST(DeepSpeedZeroStage3, RankTotalsMustMatchTheShapes) {
  ExpectError([] { ZeroStage3Pieces({{"a", 5}}, {{2}, {3}}); }, ErrorCode::kCorrupt, "rank 0");
  ExpectError([] { ZeroStage3Pieces({{"a", uint64_t{1} << 40}}, {{3}, {3}}); }, ErrorCode::kCorrupt, "declare");
}

}  // namespace
}  // namespace trove
