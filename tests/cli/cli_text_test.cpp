// The command line's text helpers: suggestions for misspelt names and numpy-style slices.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cli/suggest.h"
#include "cli/tensor_slice.h"
#include "trove/error.h"

namespace trove::cli {
namespace {

TEST(Suggest, EditDistanceCountsSwapsAsOneEdit) {
  EXPECT_EQ(EditDistance("info", "info", 3), 0u);
  EXPECT_EQ(EditDistance("inof", "info", 3), 1u);  // swapped neighbours
  EXPECT_EQ(EditDistance("hepl", "help", 3), 1u);
  EXPECT_EQ(EditDistance("ifo", "info", 3), 1u);
  EXPECT_EQ(EditDistance("cat", "diff", 3), 4u);    // beyond the limit: limit + 1
  EXPECT_EQ(EditDistance("a", "abcdefgh", 2), 3u);  // lengths alone exceed the limit
}

TEST(Suggest, CommandsAndKeys) {
  const std::vector<std::string> commands{"info", "cat", "verify", "scan", "convert", "diff", "help"};
  EXPECT_EQ(Suggest("inof", commands), std::vector<std::string>{"info"});
  EXPECT_EQ(Suggest("hepl", commands), std::vector<std::string>{"help"});
  EXPECT_TRUE(Suggest("xyzzy", commands).empty());
  EXPECT_TRUE(Suggest("info", commands).empty());  // the name itself is no suggestion
  const std::vector<std::string> keys{"model/blocks.0.attn.weight", "model/blocks.0.attn.bias", "epoch"};
  // A key missing its prefix, found at a component boundary; a typo by edit distance.
  EXPECT_EQ(Suggest("blocks.0.attn.weight", keys), std::vector<std::string>{"model/blocks.0.attn.weight"});
  EXPECT_EQ(Suggest("epoc", keys), std::vector<std::string>{"epoch"});
  EXPECT_TRUE(Suggest("ttn.weight", keys).empty());  // not at a boundary, and too far
  EXPECT_EQ(DidYouMean({}), "");
  EXPECT_EQ(DidYouMean({"a"}), " (did you mean 'a'?)");
  EXPECT_EQ(DidYouMean({"a", "b", "c"}), " (did you mean 'a', 'b' or 'c'?)");
}

TensorView Arange(std::vector<int64_t> shape, std::vector<uint8_t>& bytes) {
  TensorView v;
  v.dtype = DType::kInt32;
  v.shape = shape;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  v.strides.assign(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) v.strides[d - 1] = v.strides[d] * shape[d];
  bytes.resize(static_cast<size_t>(n) * 4);
  for (int32_t i = 0; i < n; ++i) std::memcpy(bytes.data() + 4 * i, &i, 4);
  v.storage = SharedBytes::CopyOf(bytes.data(), bytes.size());
  v.Validate();
  return v;
}

std::vector<int32_t> Values(const TensorView& v) {
  std::vector<int32_t> out;
  v.ForEachChunk([&](const uint8_t* p, size_t n) {
    for (size_t i = 0; i + 4 <= n; i += 4) {
      int32_t x;
      std::memcpy(&x, p + i, 4);
      out.push_back(x);
    }
  });
  return out;
}

TEST(TensorSlice, SplitsKeyAndItems) {
  auto s = SplitSlice("model/w[0:4, :]");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->first, "model/w");
  EXPECT_EQ(s->second, "0:4, :");
  EXPECT_FALSE(SplitSlice("model/w"));
  EXPECT_FALSE(SplitSlice("[0]"));  // no key before the bracket
}

TEST(TensorSlice, SelectsLikeNumpy) {
  std::vector<uint8_t> bytes;
  const TensorView v = Arange({3, 4}, bytes);  // [[0 1 2 3] [4 5 6 7] [8 9 10 11]]
  EXPECT_EQ(Values(SliceView(v, "1")), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(SliceView(v, "1").shape, std::vector<int64_t>{4});
  EXPECT_EQ(Values(SliceView(v, ":, 2")), (std::vector<int32_t>{2, 6, 10}));
  EXPECT_EQ(Values(SliceView(v, "0:2, 1:3")), (std::vector<int32_t>{1, 2, 5, 6}));
  EXPECT_EQ(Values(SliceView(v, "-1, ::2")), (std::vector<int32_t>{8, 10}));
  EXPECT_EQ(Values(SliceView(v, "::2, -2:")), (std::vector<int32_t>{2, 3, 10, 11}));
  EXPECT_EQ(SliceView(v, "5:9").shape, (std::vector<int64_t>{0, 4}));  // clamped, like Python
  EXPECT_EQ(Values(SliceView(v, "")), Values(v));
}

TEST(TensorSlice, RefusesWhatNumpyRefuses) {
  std::vector<uint8_t> bytes;
  const TensorView v = Arange({3, 4}, bytes);
  for (const char* bad : {"3", "-4", "0, 4", "0, 0, 0", "::0", "::-1", "a:b", "1.5", " , 1"}) {
    try {
      SliceView(v, bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUsage) << bad;
    }
  }
}

}  // namespace
}  // namespace trove::cli
