// Value trees nested far deeper than any real file: key encoding, tree walks and the arena's
// destruction must not recurse, and the depth caps (kMaxValueDepth, kMaxKeyTextBytes,
// kMaxTreePathBytes) must end deeper trees with Error(kLimit), never a stack overflow.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "cli/json_output.h"
#include "cli/value_printer.h"
#include "trove/document.h"
#include "trove/error.h"

namespace trove {
namespace {

constexpr size_t kMillion = 1'000'000;

// A tuple `depth` deep around the str "a".
Value* NestedTuple(ValueArena& arena, size_t depth) {
  Value* v = arena.Str("a");
  for (size_t i = 0; i < depth; ++i) v = arena.Tuple({v});
  return v;
}

// `depth` lists, the innermost holding `leaf`.
Value* NestedLists(ValueArena& arena, size_t depth, Value* leaf) {
  Value* v = leaf;
  for (size_t i = 0; i < depth; ++i) {
    Value* up = arena.List();
    up->items.push_back(v);
    v = up;
  }
  return v;
}

void ExpectLimit(const std::function<void()>& fn, const std::string& cap) {
  try {
    fn();
    FAIL() << "expected a limit error naming " << cap;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimit);
    EXPECT_NE(e.message().find(cap), std::string::npos) << e.message();
  }
}

TEST(DepthTest, TupleKeysAreSpelledWithoutRecursion) {
  ValueArena arena;
  std::string expected = "a";
  for (int i = 0; i < 3; ++i) expected = "(" + expected + ",)";
  EXPECT_EQ(KeyComponentText(*NestedTuple(arena, 3)), expected);
  Value* pair = arena.Tuple({arena.Int(1), arena.Tuple({arena.Str("x"), arena.None()})});
  EXPECT_EQ(KeyComponentText(*pair), "(1, (x, None))");
  EXPECT_EQ(KeyComponentText(*arena.Tuple()), "()");
  // Within the cap: the whole text, correct at both ends.
  const std::string deep = KeyComponentText(*NestedTuple(arena, kMaxValueDepth));
  EXPECT_EQ(deep.size(), 1 + 3 * kMaxValueDepth);
  EXPECT_EQ(deep.substr(0, 3), "(((");
  EXPECT_EQ(deep.substr(deep.size() - 4), ",),)");
  // A million deep: a clear error (this overflowed the stack when the text was built recursively).
  ExpectLimit([&] { KeyComponentText(*NestedTuple(arena, kMillion)); }, "kMaxValueDepth");
}

TEST(DepthTest, TupleKeysSharedThroughTheMemoAreBoundedInText) {
  // (t, t) where t is (u, u)...: 2^40 copies of "a" in 41 nodes.
  ValueArena arena;
  Value* v = arena.Str("a");
  for (int i = 0; i < 40; ++i) v = arena.Tuple({v, v});
  ExpectLimit([&] { KeyComponentText(*v); }, "kMaxKeyTextBytes");
}

TEST(DepthTest, WalksStopAtTheDepthCapAndNameDeepPathsCorrectly) {
  ValueArena arena;
  Value* t = arena.Tensor(TensorView{});
  // The root is transparent; kMaxValueDepth - 1 lists put the tensor at depth kMaxValueDepth.
  std::vector<NamedTensor> found = CollectTensors(NestedLists(arena, kMaxValueDepth - 1, t));
  ASSERT_EQ(found.size(), 1u);
  std::string expected;
  for (size_t i = 0; i + 1 < kMaxValueDepth; ++i) expected += i ? "/0" : "0";
  EXPECT_EQ(found[0].key, expected);
  ExpectLimit([&] { CollectTensors(NestedLists(arena, kMaxValueDepth, t)); }, "kMaxValueDepth");
  ExpectLimit([&] { CollectTensors(NestedLists(arena, kMillion, t)); }, "kMaxValueDepth");
  // A tuple key a million deep on the way to a tensor.
  Value* d = arena.Dict();
  d->entries.emplace_back(NestedTuple(arena, kMillion), t);
  ExpectLimit([&] { CollectTensors(d); }, "kMaxValueDepth");
}

TEST(DepthTest, LongKeysSharedByManyPathsAreBoundedInPathBytes) {
  // 4096 references to one dict under a 1 MiB key: 4 GiB of key paths from a few nodes.
  ValueArena arena;
  Value* inner = arena.Dict();
  inner->entries.emplace_back(arena.Str(std::string(kMaxKeyTextBytes, 'k')), arena.Int(1));
  Value* list = arena.List();
  list->items.assign(4096, inner);
  ExpectLimit([&] { ForEachLeaf(list, [](const std::string&, const Value&) {}); }, "kMaxTreePathBytes");
}

// A list holding `leaf` twice, the whole doubled `levels` times: 2^levels leaves in
// 2 x levels nodes, as a pickle memo spells it.
Value* DoubledLists(ValueArena& arena, size_t levels, Value* leaf) {
  Value* v = leaf;
  for (size_t i = 0; i < levels; ++i) {
    Value* up = arena.List();
    up->items.assign(2, v);
    v = up;
  }
  return v;
}

TEST(DepthTest, SharedSubtreesAreWalkedAgainOnlyWithinTheRepeatBudget) {
  ValueArena arena;
  Value* dag = DoubledLists(arena, 40, arena.Float(1.0));
  ExpectLimit([&] { ForEachLeaf(dag, [](const std::string&, const Value&) {}); }, "RepeatedVisitsAllowed");
  // Whatever the caller's node limit, the JSON of a memo DAG is cut at the same budget.
  const std::string text = cli::DumpJson(cli::ValueJson(dag, {SIZE_MAX, SIZE_MAX}), -1);
  EXPECT_NE(text.find("\"$elided\":true"), std::string::npos);
  EXPECT_LT(text.size(), size_t{64} << 20);
  // A real file's sharing walks whole: one 10000-item list reached from four keys.
  Value* shared = arena.List();
  for (int i = 0; i < 10000; ++i) shared->items.push_back(arena.Int(i));
  Value* root = arena.Dict();
  for (const char* key : {"a", "b", "c", "d"}) root->entries.emplace_back(arena.Str(key), shared);
  size_t leaves = 0;
  ForEachLeaf(root, [&](const std::string&, const Value&) { ++leaves; });
  EXPECT_EQ(leaves, 40000u);
  EXPECT_EQ(cli::DumpJson(cli::ValueJson(root, {SIZE_MAX, SIZE_MAX}), -1).find("$elided"), std::string::npos);
}

TEST(DepthTest, PrintingDeepTreesIsBounded) {
  ValueArena arena;
  Value* deep = NestedLists(arena, kMillion, arena.Int(7));
  Value* root = arena.Dict();
  root->entries.emplace_back(NestedTuple(arena, 100), deep);
  root->entries.emplace_back(arena.Str("set"), arena.New(ValueKind::kFrozenSet));
  root->entries.back().second->items.push_back(NestedTuple(arena, kMillion));
  const std::vector<std::string> lines = cli::DescribeValues(root, 1000);
  EXPECT_FALSE(lines.empty());
  const std::string json = cli::DumpJson(cli::ValueJson(root));
  EXPECT_NE(json.find("\"$elided\": true"), std::string::npos);
}

TEST(DepthTest, ArenaFreesDeepTreesWithoutRecursion) {
  // Lists, dicts and objects a million deep each, and a cycle: dropping the arena frees them.
  auto arena = std::make_unique<ValueArena>();
  NestedLists(*arena, kMillion, arena->None());
  Value* v = arena->None();
  for (size_t i = 0; i < kMillion; ++i) {
    Value* d = arena->Dict();
    d->entries.emplace_back(arena->Str("k"), v);
    Value* o = arena->Object("m.C", nullptr);
    o->state = d;
    v = o;
  }
  Value* cycle = arena->List();
  cycle->items.push_back(cycle);
  arena.reset();
  SUCCEED();
}

}  // namespace
}  // namespace trove
