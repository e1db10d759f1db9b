// Reading tensordict directories: the layouts tensordict 0.3-0.14 wrote (exact meta.json strings
// from the format notes) and the spec's version 1.
#include <sys/stat.h>
#include <unistd.h>

#include "formats/tensordict/tensordict_reader.h"
#include "td_fixtures.h"

namespace trove::tdtest {
namespace {

constexpr const char* kTdType = "<class 'tensordict._td.TensorDict'>";

class ReadDirTest : public TdTest {
 protected:
  Document Read(const std::string& rel = "td", bool allow_pickle = false) {
    ReadOptions o;
    o.allow_pickle = allow_pickle;
    return ReadTensordictDir(P(rel), o);
  }
  // Notes §2.1: the exact files tensordict 0.14 writes with orjson.
  void Write014() {
    Write("td/meta.json",
          R"({"a":{"device":"cpu","shape":[3,4],"dtype":"torch.float32","is_nested":false},"nested":{"type":"TensorDict"},"shape":[3],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
    std::vector<float> a(12);
    for (int i = 0; i < 12; ++i) a[i] = static_cast<float>(i) * 0.5f;
    WriteArray("td/a.memmap", a);
    Write("td/nested/meta.json",
          R"({"b":{"device":"cpu","shape":[3],"dtype":"torch.int64","is_nested":false},"shape":[3],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
    WriteArray<int64_t>("td/nested/b.memmap", {0, 1, 2});
  }
};

TEST_F(ReadDirTest, Layout014CompactJson) {
  Write014();
  Document doc = Read();
  EXPECT_EQ(doc.format, "tensordict");
  ASSERT_EQ(doc.tensors.size(), 2u);
  EXPECT_EQ(doc.tensors[0].key, "a");
  EXPECT_EQ(doc.tensors[1].key, "nested/b");
  const TensorView& a = *doc.tensors[0].view;
  EXPECT_EQ(a.dtype, DType::kFloat32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_FLOAT_EQ(reinterpret_cast<const float*>(a.first_element())[5], 2.5f);
  EXPECT_EQ(a.storage_key, "a.memmap");
  EXPECT_EQ(doc.root->type_name, "tensordict:TensorDict");
  const Value* batch = doc.root->state->Find("batch_size");
  ASSERT_NE(batch, nullptr);
  ASSERT_EQ(batch->items.size(), 1u);
  EXPECT_EQ(batch->items[0]->integer, 3);
  EXPECT_EQ(doc.root->state->Find("device")->text, "cpu");
  EXPECT_EQ(doc.root->state->Find("_type")->text, kTdType);
  EXPECT_EQ(*doc.Property("format_version"), "0");
  EXPECT_EQ(doc.records.size(), 4u);
}

TEST_F(ReadDirTest, SpacedJsonReadsTheSame) {
  Write014();
  Document compact = Read();
  Write("td/meta.json",
        R"({"a": {"device": "cpu", "shape": [3, 4], "dtype": "torch.float32", "is_nested": false}, "nested": {"type": "TensorDict"}, "shape": [3], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})");
  Document spaced = Read();
  ASSERT_EQ(spaced.tensors.size(), compact.tensors.size());
  for (size_t i = 0; i < spaced.tensors.size(); ++i) {
    EXPECT_EQ(spaced.tensors[i].key, compact.tensors[i].key);
    EXPECT_EQ(TensorBytes(*spaced.tensors[i].view), TensorBytes(*compact.tensors[i].view));
  }
}

TEST_F(ReadDirTest, Artifact2024LayoutTrailingBytesAndOldNonTensorData) {
  // test/artifacts/mmap_example: stdlib spacing, no is_nested... NonTensorData without
  // _is_non_tensor, .memmap files one byte longer than needed.
  Write("td/meta.json",
        R"({"nested": {"type": "TensorDict"}, "shape": [2, 1], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})");
  Write("td/nested/meta.json",
        R"({"int64": {"device": "cpu", "shape": [2, 1], "dtype": "torch.int64", "is_nested": false}, "bfloat16": {"device": "cpu", "shape": [2, 1], "dtype": "torch.bfloat16", "is_nested": false}, "string": {"type": "NonTensorData"}, "shape": [2, 1], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})");
  WriteArray<int64_t>("td/nested/int64.memmap", {7, 8}, 1);
  WriteArray<uint16_t>("td/nested/bfloat16.memmap", {0x3f80, 0x4000}, 2);
  Write("td/nested/string/meta.json",
        R"({"_type": "<class 'tensordict.tensorclass.NonTensorData'>", "data": ["a string!"], "_metadata": null})");
  Document doc = Read();
  ASSERT_EQ(doc.tensors.size(), 2u);
  EXPECT_EQ(doc.tensors[0].view->storage.size(), 16u);  // only the prefix
  EXPECT_EQ(reinterpret_cast<const int64_t*>(doc.tensors[0].view->first_element())[1], 8);
  const Value* s = Get(Get(doc.root, "nested"), "string");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->kind, ValueKind::kObject);
  EXPECT_EQ(s->type_name, "tensordict:NonTensorData");
  const Value* data = Get(s, "data");
  ASSERT_NE(data, nullptr);
  ASSERT_EQ(data->kind, ValueKind::kList);
  EXPECT_EQ(data->items[0]->text, "a string!");
}

TEST_F(ReadDirTest, Version03ListsSubdirectories) {
  // v0.3: no "type" entries, no is_nested; nested levels found by listing.
  Write("td/meta.json", R"({"x": {"device": "cpu", "shape": [2], "dtype": "torch.float32"}, "shape": [2], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})");
  WriteArray<float>("td/x.memmap", {1, 2});
  Write("td/sub/meta.json", R"({"y": {"device": "cpu", "shape": [], "dtype": "torch.int32"}, "shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})");
  WriteArray<int32_t>("td/sub/y.memmap", {42});
  ::mkdir(P("td/not_a_level").c_str(), 0755);
  Document doc = Read();
  ASSERT_EQ(doc.tensors.size(), 2u);
  EXPECT_EQ(doc.tensors[1].key, "sub/y");
  EXPECT_EQ(doc.tensors[1].view->shape.size(), 0u);
}

TEST_F(ReadDirTest, Version1WithClassAndNames) {
  Write("td/meta.json",
        R"({"obs":{"device":"cpu","shape":[3,4],"dtype":"torch.float32","is_nested":false},"shape":[3],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>","_format_version":1,"_class":"tensordict:TensorDict","_names":["time"]})");
  WriteArray<float>("td/obs.memmap", std::vector<float>(12, 1.0f));
  Document doc = Read();
  EXPECT_EQ(*doc.Property("format_version"), "1");
  const Value* names = doc.root->state->Find("names");
  ASSERT_NE(names, nullptr);
  EXPECT_EQ(names->items[0]->text, "time");
}

TEST_F(ReadDirTest, NewerFormatVersionSaysWhich) {
  Write("td/meta.json", R"({"shape":[],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>","_format_version":2})");
  ExpectError([&] { Read(); }, ErrorCode::kUnsupported, "format version 2 is newer than version 1");
}

TEST_F(ReadDirTest, EveryDtypeOfTheTableIncluding0d) {
  struct Row { const char* torch; DType dtype; int size; };
  const Row rows[] = {{"torch.bfloat16", DType::kBFloat16, 2}, {"torch.bool", DType::kBool, 1},
                      {"torch.complex128", DType::kComplex128, 16}, {"torch.complex32", DType::kComplex32, 4},
                      {"torch.complex64", DType::kComplex64, 8}, {"torch.float16", DType::kFloat16, 2},
                      {"torch.float32", DType::kFloat32, 4}, {"torch.float64", DType::kFloat64, 8},
                      {"torch.uint8", DType::kUInt8, 1}, {"torch.int16", DType::kInt16, 2},
                      {"torch.int32", DType::kInt32, 4}, {"torch.int64", DType::kInt64, 8},
                      {"torch.int8", DType::kInt8, 1}, {"torch.uint16", DType::kUInt16, 2},
                      {"torch.uint32", DType::kUInt32, 4}, {"torch.uint64", DType::kUInt64, 8}};
  std::string meta = "{";
  for (const Row& r : rows) {
    std::string key = std::string(r.torch).substr(6);
    meta += "\"" + key + "\":{\"device\":\"cpu\",\"shape\":[2],\"dtype\":\"" + r.torch + "\",\"is_nested\":false},";
    meta += "\"" + key + "_0d\":{\"device\":\"cpu\",\"shape\":[],\"dtype\":\"" + r.torch + "\",\"is_nested\":false},";
    std::string bytes;
    for (int i = 0; i < 2 * r.size; ++i) bytes += static_cast<char>(i + 1);
    Write("td/" + key + ".memmap", bytes);
    Write("td/" + key + "_0d.memmap", bytes.substr(0, r.size));
  }
  meta += std::string("\"shape\":[],\"device\":\"cpu\",\"_type\":\"") + kTdType + "\"}";
  Write("td/meta.json", meta);
  Document doc = Read();
  ASSERT_EQ(doc.tensors.size(), 2 * std::size(rows));
  for (size_t i = 0; i < std::size(rows); ++i) {
    EXPECT_EQ(doc.tensors[2 * i].view->dtype, rows[i].dtype) << rows[i].torch;
    EXPECT_EQ(doc.tensors[2 * i].view->nbytes(), 2u * rows[i].size);
    EXPECT_EQ(doc.tensors[2 * i + 1].view->numel(), 1);
  }
}

TEST_F(ReadDirTest, ZeroElementLeavesWithoutFileAreRebuilt) {
  Write("td/meta.json",
        std::string(R"({"e0":{"device":"cpu","shape":[0],"dtype":"torch.float32","is_nested":false},"e1":{"device":"cpu","shape":[0,3],"dtype":"torch.int64","is_nested":false},"e2":{"device":"cpu","shape":[2,0],"dtype":"torch.bool","is_nested":false},"shape":[],"device":"cpu","_type":")") +
            kTdType + "\"}");
  Document doc = Read();
  ASSERT_EQ(doc.tensors.size(), 3u);
  EXPECT_EQ(doc.tensors[1].view->shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(doc.tensors[2].view->numel(), 0);
}

TEST_F(ReadDirTest, NestedTensorComponentsAreReachable) {
  Write("td/meta.json",
        std::string(R"({"k":{"device":"cpu","shape":[3,2],"dtype":"torch.float32","is_nested":true},"shape":[],"device":"cpu","_type":")") +
            kTdType + "\"}");
  WriteArray<int64_t>("td/k.shape.memmap", {1, 2, 2, 2, 3, 1});
  std::vector<float> data(2 + 4 + 3);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  WriteArray("td/k.memmap", data);
  Document doc = Read();
  ASSERT_EQ(doc.tensors.size(), 3u);
  EXPECT_EQ(doc.tensors[0].key, "k/0");
  EXPECT_EQ(doc.tensors[1].key, "k/1");
  EXPECT_EQ(doc.tensors[2].view->shape, (std::vector<int64_t>{3, 1}));
  EXPECT_FLOAT_EQ(reinterpret_cast<const float*>(doc.tensors[2].view->first_element())[0], 6.0f);
}

TEST_F(ReadDirTest, LazyStackMembersAreKeys) {
  // Notes §2.3.
  Write("td/meta.json", R"({"_type":"<class 'tensordict._lazy.LazyStackedTensorDict'>","stack_dim":0})");
  const std::string child =
      R"({"x":{"device":"cpu","shape":[3],"dtype":"torch.float32","is_nested":false},"shape":[3],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})";
  Write("td/0/meta.json", child);
  Write("td/1/meta.json", child);
  WriteArray<float>("td/0/x.memmap", {1, 1, 1});
  WriteArray<float>("td/1/x.memmap", {0, 0, 0});
  Write("td/3/meta.json", child);  // after a gap: ignored, with a warning
  Document doc = Read();
  EXPECT_EQ(doc.root->type_name, "tensordict:LazyStackedTensorDict");
  ASSERT_EQ(doc.tensors.size(), 2u);
  EXPECT_EQ(doc.tensors[0].key, "0/x");
  EXPECT_EQ(doc.tensors[1].key, "1/x");
  EXPECT_EQ(doc.root->state->Find("stack_dim")->integer, 0);
  ASSERT_EQ(doc.warnings.size(), 1u);
}

TEST_F(ReadDirTest, NonTensorDataAndStack) {
  // Notes §2.4 and §2.5 (the second is asserted byte for byte by tensordict's own test).
  Write("td/meta.json",
        std::string(R"({"a":{"device":"cpu","shape":[3],"dtype":"torch.float32","is_nested":false},"s":{"type":"NonTensorData"},"st":{"type":"NonTensorStack"},"shape":[3],"device":"cpu","_type":")") +
            kTdType + "\"}");
  WriteArray<float>("td/a.memmap", {0, 0, 0});
  Write("td/s/meta.json",
        R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","data":"hello","_metadata":null,"_is_non_tensor":true})");
  Write("td/st/meta.json",
        R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,"device":null,"data":[[0,1],[0,1],[0,1]]})");
  Document doc = Read();
  const Value* s = Get(doc.root, "s");
  EXPECT_EQ(Get(s, "data")->text, "hello");
  EXPECT_EQ(Get(s, "_is_non_tensor")->boolean, true);
  const Value* st = Get(doc.root, "st");
  EXPECT_EQ(st->type_name, "tensordict:NonTensorStack");
  EXPECT_EQ(Get(st, "data")->items.size(), 3u);
  EXPECT_EQ(Get(st, "device")->kind, ValueKind::kNone);
}

TEST_F(ReadDirTest, PickledSidecarsAreNeverRunByDefault) {
  Write("td/meta.json", std::string(R"({"s":{"type":"NonTensorData"},"p":{"type":"NonTensorStack"},"shape":[],"device":"cpu","_type":")") + kTdType + "\"}");
  Write("td/s/meta.json", R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","_metadata":null,"_is_non_tensor":true})");
  // A pickle that would run os.system("touch pwned") if executed.
  Write("td/s/other.pickle", std::string("cos\nsystem\n(S'touch pwned'\ntR."));
  Write("td/p/meta.json", R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,"device":null,"data":"pickle.pkl"})");
  Write("td/p/pickle.pkl", "\x80\x04K\x01.");
  Document doc = Read();
  const Value* marker = Get(Get(doc.root, "s"), "other.pickle");
  ASSERT_NE(marker, nullptr);
  EXPECT_EQ(marker->type_name, "pickled, not read");
  EXPECT_EQ(Get(Get(doc.root, "p"), "data")->type_name, "pickled, not read");
  EXPECT_EQ(doc.warnings.size(), 2u);
  // With allow_pickle the data-only unpickler decodes plain data and refuses os.system.
  Write("td/s/other.pickle", "\x80\x04}\x94\x8c\x04\x64\x61ta\x94K\x07s.");
  Document allowed = Read("td", true);
  EXPECT_EQ(Get(Get(allowed.root, "s"), "data")->integer, 7);
  EXPECT_EQ(Get(Get(allowed.root, "p"), "data")->integer, 1);
  Write("td/s/other.pickle", std::string("cos\nsystem\n(S'touch pwned'\ntR."));
  ExpectError([&] { Read("td", true); }, ErrorCode::kRefused, "other.pickle");
  EXPECT_FALSE(fs::exists("pwned"));
}

TEST_F(ReadDirTest, NonTensorStackDataMustNamePicklePkl) {
  Write("td/meta.json", R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,"device":null,"data":"../x.pkl"})");
  ExpectError([&] { Read(); }, ErrorCode::kRefused, "only \"pickle.pkl\"");
}

TEST_F(ReadDirTest, JsonTypesHonouredOnlyWhenHashMatches) {
  Write("td/meta.json", R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","_metadata":null})");
  const std::string pickle = "\x80\x04}\x94.";
  Write("td/other.pickle", pickle);
  // sha256 of the 5 bytes above.
  std::string sha;
  ASSERT_EQ(Run("sha256sum " + P("td/other.pickle") + " | cut -c1-64", &sha), 0);
  sha.resize(64);
  Write("td/json_types.json", R"({"sha256":")" + sha + R"(","types":{"data":"tuple"}})");
  Document doc = Read();
  EXPECT_EQ(Get(doc.root, "data")->kind, ValueKind::kGlobal);
  EXPECT_EQ(Get(doc.root, "data")->type_name, "builtins.tuple");
  Write("td/json_types.json", R"({"sha256":"00","types":{"data":"tuple"}})");
  Document bad = Read();
  EXPECT_EQ(Get(bad.root, "data"), nullptr);
  EXPECT_EQ(Get(bad.root, "other.pickle")->type_name, "pickled, not read");
}

TEST_F(ReadDirTest, TensorclassBothLayouts) {
  // Notes §2.6 (HEAD: the str field is NonTensorData inside _tensordict) ...
  Write("tc/meta.json", R"({"_type":"<class '__main__.MyClass'>","none_field":null})");
  Write("tc/_tensordict/meta.json",
        R"({"data":{"device":"cpu","shape":[3],"dtype":"torch.float32","is_nested":false},"label":{"type":"NonTensorData"},"shape":[],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
  WriteArray<float>("tc/_tensordict/data.memmap", {1, 2, 3});
  Write("tc/_tensordict/label/meta.json",
        R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","data":"txt","_metadata":null,"_is_non_tensor":true})");
  Document doc = Read("tc");
  EXPECT_EQ(doc.root->kind, ValueKind::kObject);
  EXPECT_EQ(doc.root->type_name, "__main__:MyClass");
  ASSERT_EQ(doc.tensors.size(), 1u);
  EXPECT_EQ(doc.tensors[0].key, "data");
  EXPECT_EQ(Get(Get(doc.root, "label"), "data")->text, "txt");
  EXPECT_EQ(Get(doc.root, "none_field")->kind, ValueKind::kNone);
  // ... and the PR #582 layout (the str field in the tensorclass meta.json).
  Write("tc/meta.json", R"({"_type": "<class '__main__.MyClass'>", "metadata": "some text"})");
  Document old = Read("tc");
  EXPECT_EQ(Get(old.root, "metadata")->text, "some text");
}

TEST_F(ReadDirTest, SubTensorDictTaggedAndLegacyIndex) {
  Write("td/meta.json",
        R"({"_type":"<class 'tensordict._td._SubTensorDict'>","index":["tuple",[["slice",{"start":0,"stop":2,"step":null}],1]]})");
  Write("td/_source/meta.json",
        R"({"x":{"device":"cpu","shape":[4,2],"dtype":"torch.int8","is_nested":false},"shape":[4,2],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
  Write("td/_source/x.memmap", std::string(8, '\x05'));
  Document doc = Read();
  EXPECT_EQ(doc.root->type_name, "tensordict._td:_SubTensorDict");
  EXPECT_EQ(Get(doc.root, "index")->items[0]->text, "tuple");
  ASSERT_EQ(doc.tensors.size(), 1u);
  EXPECT_EQ(doc.tensors[0].key, "_source/x");
  Write("td/meta.json", R"({"_type":"<class 'tensordict._td._SubTensorDict'>","index":[0,1]})");
  EXPECT_EQ(Get(Read().root, "index")->items.size(), 2u);
}

TEST_F(ReadDirTest, LazyViewWithSource) {
  Write("td/meta.json",
        R"({"shape":[2,1],"device":"cpu","_type":"<class 'tensordict._lazy._UnsqueezedTensorDict'>","custom_op":"unsqueeze","inv_op":"squeeze","custom_op_kwargs":{"dim":1},"inv_op_kwargs":{"dim":1}})");
  Write("td/_source/meta.json",
        R"({"x":{"device":"cpu","shape":[2],"dtype":"torch.float64","is_nested":false},"shape":[2],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
  WriteArray<double>("td/_source/x.memmap", {1.5, 2.5});
  Document doc = Read();
  EXPECT_EQ(Get(doc.root, "custom_op")->text, "unsqueeze");
  EXPECT_EQ(Get(Get(doc.root, "custom_op_kwargs"), "dim")->integer, 1);
  EXPECT_EQ(doc.tensors[0].key, "_source/x");
  Write("td/meta.json", R"({"_type":"<class 'tensordict._lazy._UnsqueezedTensorDict'>","custom_op":"unsqueeze"})");
  ExpectError([&] { Read(); }, ErrorCode::kCorrupt, "'inv_op' is missing");
}

TEST_F(ReadDirTest, KeysFoundByEncodedNameAndLegacyFallback) {
  Write("td/meta.json",
        std::string(R"({"a/b":{"device":"cpu","shape":[1],"dtype":"torch.uint8","is_nested":false},"weird name":{"device":"cpu","shape":[1],"dtype":"torch.uint8","is_nested":false},"":{"device":"cpu","shape":[1],"dtype":"torch.uint8","is_nested":false},"é":{"type":"TensorDict"},"shape":[],"device":"cpu","_type":")") +
            kTdType + "\"}");
  Write("td/a%2Fb.memmap", "A");
  Write("td/weird name.memmap", "W");  // only the raw name exists: legacy fallback
  Write("td/%.memmap", "E");
  Write("td/é/meta.json", std::string(R"({"shape":[],"device":"cpu","_type":")") + kTdType + "\"}");
  Document doc = Read();
  ASSERT_EQ(doc.tensors.size(), 3u);
  EXPECT_EQ(doc.tensors[0].key, "a%2Fb");
  EXPECT_EQ(doc.tensors[1].key, "weird%20name");
  EXPECT_EQ(*doc.tensors[1].view->first_element(), 'W');
  EXPECT_EQ(doc.tensors[2].key, "%");
  // A key with '/' is never looked up raw (notes case 29).
  fs::remove(P("td/a%2Fb.memmap"));
  fs::create_directories(P("td/a"));
  Write("td/a/b.memmap", "X");
  ExpectError([&] { Read(); }, ErrorCode::kNotFound, "a%2Fb.memmap");
}

// --- hostile trees ------------------------------------------------------------------------------

class HostileDirTest : public ReadDirTest {
 protected:
  void Leaf(const std::string& entry, const std::string& file_bytes = "") {
    Write("td/meta.json", R"({"x":)" + entry + std::string(R"(,"shape":[],"device":"cpu","_type":")") + kTdType + "\"}");
    if (!file_bytes.empty()) Write("td/x.memmap", file_bytes);
  }
};

TEST_F(HostileDirTest, SymlinkedLeafOrLevelIsRefused) {
  Write("outside/secret.memmap", std::string(8, 's'));
  Write("td/meta.json", std::string(R"({"x":{"device":"cpu","shape":[2],"dtype":"torch.float32","is_nested":false},"shape":[],"device":"cpu","_type":")") + kTdType + "\"}");
  ASSERT_EQ(::symlink(P("outside/secret.memmap").c_str(), P("td/x.memmap").c_str()), 0);
  ExpectError([&] { Read(); }, ErrorCode::kRefused, "symlink");
  Write("td/meta.json", std::string(R"({"n":{"type":"TensorDict"},"shape":[],"device":"cpu","_type":")") + kTdType + "\"}");
  Write("outside/meta.json", std::string(R"({"shape":[],"device":"cpu","_type":")") + kTdType + "\"}");
  ASSERT_EQ(::symlink(P("outside").c_str(), P("td/n").c_str()), 0);
  ExpectError([&] { Read(); }, ErrorCode::kRefused, "symlink");
}

TEST_F(HostileDirTest, DotDotKeysStayInside) {
  Write("evil.memmap", std::string(4, 'e'));
  Write("td/meta.json", std::string(R"({"..":{"type":"TensorDict"},"../evil":{"device":"cpu","shape":[1],"dtype":"torch.float32","is_nested":false},"shape":[],"device":"cpu","_type":")") + kTdType + "\"}");
  ExpectError([&] { Read(); }, ErrorCode::kNotFound, "%2E%2E");
}

TEST_F(HostileDirTest, ShortFileMissingFileHugeAndNegativeShapes) {
  Leaf(R"({"device":"cpu","shape":[4],"dtype":"torch.float32","is_nested":false})", std::string(15, 'x'));
  ExpectError([&] { Read(); }, ErrorCode::kCorrupt, "the leaf needs 16");
  fs::remove(P("td/x.memmap"));
  ExpectError([&] { Read(); }, ErrorCode::kNotFound, "drop the key silently");
  Leaf(R"({"device":"cpu","shape":[-1],"dtype":"torch.float32"})");
  ExpectError([&] { Read(); }, ErrorCode::kCorrupt, "negative size");
  Leaf(R"({"device":"cpu","shape":[4294967296,4294967296],"dtype":"torch.float32"})");
  ExpectError([&] { Read(); }, ErrorCode::kCorrupt, "overflows");
  Leaf(R"({"device":"cpu","shape":[18446744073709551615],"dtype":"torch.float32"})");
  ExpectError([&] { Read(); }, ErrorCode::kCorrupt, "beyond 64 bits");
  Leaf(R"({"device":"cpu","shape":[1180591620717411303424],"dtype":"torch.float32"})");
  ExpectError([&] { Read(); }, ErrorCode::kCorrupt, "beyond 64 bits");
  Leaf(R"({"device":"cpu","shape":[1.5],"dtype":"torch.float32"})");
  ExpectError([&] { Read(); }, ErrorCode::kCorrupt, "not an integer");
  std::string rank = "[";
  for (int i = 0; i < 65; ++i) rank += i ? ",1" : "1";
  Leaf(R"({"device":"cpu","shape":)" + rank + R"(],"dtype":"torch.float32"})");
  ExpectError([&] { Read(); }, ErrorCode::kLimit, "kMaxTensorRank");
}

TEST_F(HostileDirTest, UnknownDtypes) {
  for (const char* d : {"torch.float8_e4m3fn", "float32", "", "torch.qint8"}) {
    Leaf(std::string(R"({"device":"cpu","shape":[1],"dtype":")") + d + "\"}", "xxxxxxxx");
    ExpectError([&] { Read(); }, std::string(d) == "torch.float8_e4m3fn" || std::string(d) == "torch.qint8"
                                     ? ErrorCode::kUnsupported : ErrorCode::kCorrupt,
                "dtype");
  }
}

TEST_F(HostileDirTest, MalformedMetaJson) {
  struct Case { std::string text; ErrorCode code; std::string needle; };
  const std::string t = kTdType;
  const Case cases[] = {
      {"[1,2]", ErrorCode::kCorrupt, "not a JSON object"},
      {R"({"shape":[],"device":"cpu"})", ErrorCode::kCorrupt, "no '_type'"},
      {R"({"x":NaN,"_type":")" + t + "\"}", ErrorCode::kCorrupt, "malformed JSON"},
      {R"({"a":1,"a":2,"_type":")" + t + "\"}", ErrorCode::kCorrupt, "duplicate key 'a'"},
      {R"({"shape":[],"_type":")" + t, ErrorCode::kCorrupt, "malformed JSON"},
      {std::string(300, '[') + std::string(300, ']'), ErrorCode::kLimit, "kMaxMetaJsonDepth"},
      {"{\"\xff\":1}", ErrorCode::kCorrupt, "invalid UTF-8"},
      {R"({"x":{"device":"cpu"},"_type":")" + t + "\"}", ErrorCode::kCorrupt, "neither a leaf"},
      {R"({"_type":"TensorDict"})", ErrorCode::kCorrupt, "is not a class"},
      {R"({"_type":"<class 'evil.Thing'>"})", ErrorCode::kUnsupported, "not a tensordict class"},
  };
  for (const Case& c : cases) {
    Write("td/meta.json", c.text);
    ExpectError([&] { Read(); }, c.code, c.needle);
  }
  // A UTF-8 BOM is accepted, as Python's json.loads(bytes) does.
  Write("td/meta.json", "\xEF\xBB\xBF{\"shape\":[],\"device\":\"cpu\",\"_type\":\"" + t + "\"}");
  EXPECT_NO_THROW(Read());
}

TEST_F(HostileDirTest, DeepLevelsHitTheCap) {
  std::string rel = "td";
  const std::string level = std::string(R"({"n":{"type":"TensorDict"},"shape":[],"device":"cpu","_type":")") + kTdType + "\"}";
  for (int i = 0; i < 70; ++i) {
    Write(rel + "/meta.json", level);
    rel += "/n";
  }
  Write(rel + "/meta.json", std::string(R"({"shape":[],"device":"cpu","_type":")") + kTdType + "\"}");
  ExpectError([&] { Read(); }, ErrorCode::kLimit, "kMaxLevelDepth");
}

TEST_F(HostileDirTest, MissingCollectionDirectoryIsAnError) {
  Write("td/meta.json", std::string(R"({"gone":{"type":"TensorDict"},"shape":[],"device":"cpu","_type":")") + kTdType + "\"}");
  ExpectError([&] { Read(); }, ErrorCode::kNotFound, "collection 'gone'");
}

}  // namespace
}  // namespace trove::tdtest
