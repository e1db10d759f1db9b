// tests/core/key_path_test.cpp: Key paths: encoding like tensordict's file names, and the bounded
// tree walk that names tensors.
#include <string_view>

#include <gtest/gtest.h>

#include "trove/document.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/tensor.h"
#include "trove/value.h"

namespace trove {
namespace {

// A 1-D uint8 tensor over a copy of `bytes`, a leaf for the trees below.
Value* ByteTensor(ValueArena& arena, std::string_view bytes) {
  TensorView tv;
  tv.storage = SharedBytes::CopyOf(bytes.data(), bytes.size());
  tv.dtype = DType::kUInt8;
  tv.shape = {static_cast<int64_t>(bytes.size())};
  tv.strides = {1};
  return arena.Tensor(tv);
}

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

TEST(KeyPathTest, BytesThatAreNotUtf8AreEscaped) {
  // A key path is always text: a bytes key's stray byte, a pickled str's lone surrogate (ED B2 80),
  // an overlong form and a truncated sequence are escaped; characters of every length are kept.
  EXPECT_EQ(EncodeKeyComponent("b'\xff'"), "b'%FF'");
  EXPECT_EQ(EncodeKeyComponent("a\xed\xb2\x80" "b"), "a%ED%B2%80b");
  EXPECT_EQ(EncodeKeyComponent("\xc0\xaf"), "%C0%AF");
  EXPECT_EQ(EncodeKeyComponent("x\xe2\x82"), "x%E2%82");
  EXPECT_EQ(EncodeKeyComponent("\xe2\x82\xac\xf0\x9f\x98\x80\xc3\xa9"), "\xe2\x82\xac\xf0\x9f\x98\x80\xc3\xa9");
  for (std::string k : {"b'\xff'", "a\xed\xb2\x80" "b", "\xc0\xaf", "x\xe2\x82", "\xf4\x90\x80\x80"})
    EXPECT_EQ(DecodeKeyComponent(EncodeKeyComponent(k)), k);
}

TEST(KeyPathTest, CollectTensorsBuildsPaths) {
  ValueArena arena;
  Value* t = ByteTensor(arena, "abcd");
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

TEST(KeyPathTest, KeysThatSpellOneComponentGetDistinctOnes) {
  ValueArena arena;
  Value* d = arena.Dict();
  auto t = [&](uint8_t byte) {
    return ByteTensor(arena, std::string_view(reinterpret_cast<const char*>(&byte), 1));
  };
  d->entries.push_back({arena.Int(1), t(1)});
  d->entries.push_back({arena.Str("1"), t(2)});
  d->entries.push_back({arena.None(), t(3)});
  d->entries.push_back({arena.Str("None"), t(4)});
  d->entries.push_back({arena.Tuple({arena.Int(1)}), t(5)});
  d->entries.push_back({arena.Tuple({arena.Str("1")}), t(6)});  // "(1,)" too, and a tuple too
  d->entries.push_back({arena.Int(2), t(7)});
  const std::vector<std::string> expected = {"%int:1", "1", "%None:None", "None", "%tuple#4:(1,)", "%tuple#5:(1,)", "2"};
  EXPECT_EQ(DictKeyComponents(*d), expected);
  // Each decodes to its key's text; each finds its own value; the walk names them so.
  EXPECT_EQ(DecodeKeyComponent("%int:1"), "1");
  EXPECT_EQ(DecodeKeyComponent("%tuple#4:(1,)"), "(1,)");
  EXPECT_EQ(DecodeKeyComponent("%None:None"), "None");
  Document doc;
  doc.root = d;
  std::vector<std::string> keys;
  for (const NamedTensor& n : CollectTensors(d)) keys.push_back(n.key);
  EXPECT_EQ(keys, expected);
  for (size_t i = 0; i < expected.size(); ++i) {
    const Value* v = doc.FindValue(expected[i]);
    ASSERT_NE(v, nullptr) << expected[i];
    EXPECT_EQ(v->tensor->storage.data()[0], i + 1) << expected[i];
  }
  // No str key encodes to a typed component: its '%' is always followed by two hex digits.
  for (std::string k : {"%int:1", "%None:None", "%a:b"}) EXPECT_NE(EncodeKeyComponent(k).substr(0, 3), k.substr(0, 3));
}

TEST(KeyPathTest, ObjectsAreLookedThroughTheirStateArgsEntriesAndItems) {
  ValueArena arena;
  Value* t = ByteTensor(arena, "ab");
  Value* object = arena.Object("mod.Thing", arena.Tuple({t}));
  object->unknown_class = true;
  object->state = arena.Dict();
  object->state->entries.push_back({arena.Str("w"), t});
  object->entries.push_back({arena.Str("k"), t});  // what SETITEMS gave it
  object->items.push_back(t);                      // what APPENDS gave it
  Value* root = arena.Dict();
  root->entries.push_back({arena.Str("obj"), object});
  Value* size = arena.Tuple({arena.Int(2), arena.Int(3)});
  size->type_name = "torch.Size";
  root->entries.push_back({arena.Str("shape"), size});
  std::vector<std::string> paths;
  ForEachLeaf(root, [&](const std::string& path, const Value& leaf) {
    paths.push_back(path + (leaf.kind == ValueKind::kTensor ? "" : "=" + std::string(KindName(leaf.kind))));
  });
  // state, args, entries, items; the item whose index the first argument already spells is
  // named with its part; a torch.Size is one leaf.
  EXPECT_EQ(paths, (std::vector<std::string>{"obj/w", "obj/0", "obj/k", "obj/%item:0", "shape=tuple"}));
  Document doc;
  doc.root = root;
  EXPECT_EQ(doc.FindValue("obj/k"), t);
  EXPECT_EQ(doc.FindValue("obj/%item:0"), t);
  const std::vector<UnknownObject> unknown = FindUnknownObjects(root);
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].key, "obj");
  EXPECT_EQ(unknown[0].node, object);
  EXPECT_EQ(UnknownClassesText(unknown), "mod.Thing");
}

// Every part of an object spells its own components: a state key, an argument index, an entry
// and an item that would spell one component are told apart by their part, and each path finds
// its own value again.
TEST(KeyPathTest, AnObjectsPartsNeverShareAPath) {
  ValueArena arena;
  auto tensor = [&](uint8_t byte) {
    return ByteTensor(arena, std::string_view(reinterpret_cast<const char*>(&byte), 1));
  };
  Value* object = arena.Object("mod.Box", arena.Tuple({tensor(1)}));
  object->unknown_class = true;
  object->state = arena.Dict();
  object->state->entries.push_back({arena.Str("0"), tensor(2)});
  object->state->entries.push_back({arena.Str("k"), tensor(3)});
  object->state->entries.push_back({arena.Str("%entry:k"), tensor(4)});  // a key spelling a part's name
  object->entries.push_back({arena.Str("k"), tensor(5)});
  object->entries.push_back({arena.Int(0), tensor(6)});
  object->items.push_back(tensor(7));
  Value* root = arena.Dict();
  root->entries.push_back({arena.Str("obj"), object});
  const std::vector<std::string> expected = {"obj/0", "obj/k", "obj/%25entry%3Ak", "obj/%arg:0",
                                             "obj/%entry:k", "obj/%entry:0", "obj/%item:0"};
  std::vector<std::string> keys;
  for (const NamedTensor& n : CollectTensors(root)) keys.push_back(n.key);
  EXPECT_EQ(keys, expected);
  Document doc;
  doc.root = root;
  const uint8_t bytes[] = {2, 3, 4, 1, 5, 6, 7};
  for (size_t i = 0; i < expected.size(); ++i) {
    const Value* v = doc.FindValue(expected[i]);
    ASSERT_NE(v, nullptr) << expected[i];
    EXPECT_EQ(v->tensor->storage.data()[0], bytes[i]) << expected[i];
  }
  EXPECT_EQ(DecodeKeyComponent("%entry:%int:1"), "1");
}

// A dict's attributes (its BUILD state) are listed after its entries as `%attr:<key>`, and only
// their tensors are leaves (an OrderedDict's _metadata stays out of the values).
TEST(KeyPathTest, ADictsAttributesAreSearchedForTensors) {
  ValueArena arena;
  Value* t = ByteTensor(arena, "a");
  Value* d = arena.Dict("mod.AttrDict");
  d->entries.push_back({arena.Str("extra"), t});
  d->state = arena.Dict();
  d->state->entries.push_back({arena.Str("extra"), t});
  Value* nested = arena.Dict();
  nested->entries.push_back({arena.Str("t"), t});
  nested->entries.push_back({arena.Str("version"), arena.Int(1)});
  d->state->entries.push_back({arena.Str("more"), nested});
  d->state->entries.push_back({arena.Str("note"), arena.Str("hi")});
  std::vector<std::string> paths;
  ForEachLeaf(d, [&](const std::string& path, const Value&) { paths.push_back(path); });
  EXPECT_EQ(paths, (std::vector<std::string>{"extra", "%attr:extra", "%attr:more/t"}));
  Document doc;
  doc.root = d;
  EXPECT_EQ(doc.FindValue("%attr:more/t"), t);
  EXPECT_EQ(doc.FindValue("%attr:note")->text, "hi");  // reachable by its path, not listed
  EXPECT_EQ(doc.FindValue("note"), nullptr);
}

}  // namespace
}  // namespace trove
