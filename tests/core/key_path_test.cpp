// tests/core/key_path_test.cpp: Key paths: encoding like tensordict's file names, and the bounded
// tree walk that names tensors.
#include <gtest/gtest.h>

#include "trove/document.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/tensor.h"
#include "trove/value.h"

namespace trove {
namespace {

TEST(KeyPathTest, EncodesLikeTensordict) {
  EXPECT_EQ(EncodeKeyComponent("layer.0.weight"), "layer.0.weight");
  EXPECT_EQ(EncodeKeyComponent("x/y"), "x%2Fy");
  EXPECT_EQ(EncodeKeyComponent(""), "%");
  EXPECT_EQ(EncodeKeyComponent("."), "%2E");
  EXPECT_EQ(EncodeKeyComponent(".."), "%2E%2E");
  EXPECT_EQ(EncodeKeyComponent("a b%"), "a%20b%25");
  EXPECT_EQ(EncodeKeyComponent("h\xc3\xa9"), "h\xc3\xa9");
  for (std::string k : {"x/y", "", ".", "..", "a b%c", "q?*<>|\"\\:", "\x01\x7f"})
    EXPECT_EQ(DecodeKeyComponent(EncodeKeyComponent(k)), k);
  EXPECT_THROW(DecodeKeyComponent("%2"), Error);
  EXPECT_THROW(DecodeKeyComponent("%zz"), Error);
}

TEST(KeyPathTest, CollectTensorsBuildsPaths) {
  ValueArena arena;
  TensorView tv;
  tv.storage = SharedBytes::CopyOf("abcd", 4);
  tv.dtype = DType::kUInt8;
  tv.shape = {4};
  tv.strides = {1};
  Value* t = arena.Tensor(tv);
  Value* root = arena.Dict();
  Value* state = arena.Dict();
  Value* zero = arena.Dict();
  zero->entries.push_back({arena.Str("exp_avg"), t});
  state->entries.push_back({arena.Int(0), zero});
  root->entries.push_back({arena.Str("state"), state});
  root->entries.push_back({arena.Str("x/y"), t});
  Value* list = arena.List();
  list->items.push_back(t);
  root->entries.push_back({arena.Str(""), list});
  auto named = CollectTensors(root);
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0].key, "state/0/exp_avg");
  EXPECT_EQ(named[1].key, "x%2Fy");
  EXPECT_EQ(named[2].key, "%/0");
  EXPECT_EQ(CollectTensors(t)[0].key, "");
}

TEST(KeyPathTest, CyclesAndDagsAreBounded) {
  ValueArena arena;
  Value* l = arena.List();
  l->items.push_back(l);  // contains itself
  EXPECT_TRUE(CollectTensors(l).empty());
  // 2^40 paths through a chain of lists that each hold the next one twice.
  Value* node = arena.List();
  for (int i = 0; i < 40; ++i) {
    Value* up = arena.List();
    up->items = {node, node};
    node = up;
  }
  try {
    CollectTensors(node);
    FAIL() << "expected a limit error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimit);
  }
}

}  // namespace
}  // namespace trove
