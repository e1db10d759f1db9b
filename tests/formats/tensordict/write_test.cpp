// Writing directories (format version 1) from Documents: exact bytes, refusals, round trips.
#include <cmath>

#include "formats/tensordict/tensordict_reader.h"
#include "td_fixtures.h"

namespace trove::tdtest {
namespace {

class WriteDirTest : public TdTest {
 protected:
  // {"obs": float32 [3,4] (a transposed view), "next": {"reward": int64 [3]}, "name": "cartpole",
  //  "steps": [1, 2.5], "flag": true}
  Document SampleDoc() {
    Document doc;
    auto& a = *doc.arena;
    Value* root = a.Dict("collections.OrderedDict");
    std::vector<float> base(12);
    for (int i = 0; i < 12; ++i) base[i] = static_cast<float>(i);
    TensorView obs = MakeTensorOf(DType::kFloat32, {4, 3}, base);
    obs.shape = {3, 4};  // transpose: non-contiguous view
    obs.strides = {1, 3};
    Put(a, root, "obs", a.Tensor(obs));
    Value* next = a.Dict("dict");
    Put(a, next, "reward", a.Tensor(MakeTensorOf<int64_t>(DType::kInt64, {3}, {10, 20, 30})));
    Put(a, root, "next", next);
    Put(a, root, "name", a.Str("cartpole"));
    Value* steps = a.List();
    steps->items = {a.Int(1), a.Float(2.5)};
    Put(a, root, "steps", steps);
    Put(a, root, "flag", a.Bool(true));
    doc.root = root;
    return doc;
  }
};

TEST_F(WriteDirTest, ExactFilesOfVersion1) {
  Document doc = SampleDoc();
  WriteTensordictDir(doc, P("out"));
  EXPECT_EQ(Slurp(P("out/meta.json")),
            R"({"obs":{"device":"cpu","shape":[3,4],"dtype":"torch.float32","is_nested":false},"next":{"type":"TensorDict"},"name":{"type":"NonTensorData"},"steps":{"type":"TensorDict"},"flag":{"type":"NonTensorData"},"shape":[],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>","_format_version":1,"_class":"tensordict:TensorDict"})");
  EXPECT_EQ(Slurp(P("out/next/meta.json")),
            R"({"reward":{"device":"cpu","shape":[3],"dtype":"torch.int64","is_nested":false},"shape":[],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>","_format_version":1,"_class":"tensordict:TensorDict"})");
  EXPECT_EQ(Slurp(P("out/name/meta.json")),
            R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","data":"cartpole","_metadata":null,"_is_non_tensor":true})");
  EXPECT_EQ(Slurp(P("out/steps/meta.json")),
            R"({"0":{"type":"NonTensorData"},"1":{"type":"NonTensorData"},"shape":[],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>","_format_version":1,"_class":"tensordict:TensorDict","_trove_sequence":"list"})");
  // The transposed view is written in C order: element [r][c] = base[c*3 + r].
  std::string obs = Slurp(P("out/obs.memmap"));
  ASSERT_EQ(obs.size(), 48u);
  const float* f = reinterpret_cast<const float*>(obs.data());
  EXPECT_EQ(f[1], 3.0f);
  EXPECT_EQ(f[4], 1.0f);
  EXPECT_EQ(fs::file_size(P("out/next/reward.memmap")), 24u);
  // No temporary directory is left beside it.
  size_t entries = 0;
  for (auto& e : fs::directory_iterator(root_)) entries += e.path().filename().string()[0] == '.';
  EXPECT_EQ(entries, 0u);
}

TEST_F(WriteDirTest, ReadsBackThroughTheDocumentModel) {
  WriteTensordictDir(SampleDoc(), P("out"));
  Document back = ReadTensordictDir(P("out"), {});
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.tensors[0].key, "obs");
  EXPECT_EQ(back.tensors[1].key, "next/reward");
  EXPECT_EQ(Get(Get(back.root, "name"), "data")->text, "cartpole");
  const Value* steps = back.root->Find("steps");
  ASSERT_EQ(steps->kind, ValueKind::kList);
  EXPECT_EQ(Get(steps->items[1], "data")->real, 2.5);
  // Directory -> directory keeps every leaf byte for byte (and the files are identical).
  WriteTensordictDir(back, P("again"));
  for (const char* f : {"meta.json", "obs.memmap", "next/meta.json", "next/reward.memmap", "name/meta.json",
                        "steps/meta.json", "steps/0/meta.json"})
    EXPECT_EQ(Slurp(P(std::string("out/") + f)), Slurp(P(std::string("again/") + f))) << f;
}

TEST_F(WriteDirTest, PythonLoadsTheLeavesWithNumpy) {
  WriteTensordictDir(SampleDoc(), P("out"));
  std::string out;
  int rc = Python(
      "import json, numpy as np\n"
      "p = '" + P("out") + "'\n"
      "m = json.load(open(p + '/meta.json'))\n"
      "e = m['obs']\n"
      "a = np.fromfile(p + '/obs.memmap', dtype=np.float32).reshape(e['shape'])\n"
      "assert (a == np.arange(12, dtype=np.float32).reshape(4, 3).T).all(), a\n"
      "r = np.fromfile(p + '/next/reward.memmap', dtype=np.int64)\n"
      "assert list(r) == [10, 20, 30]\n"
      "assert m['_format_version'] == 1 and m['_class'] == 'tensordict:TensorDict'\n"
      "print('ok')\n",
      &out);
  EXPECT_EQ(rc, 0) << out;
}

TEST_F(WriteDirTest, KeysTheFormatWouldLoseAreErrors) {
  auto attempt = [&](const std::vector<std::pair<std::string, bool>>& keys) {
    Document doc;
    auto& a = *doc.arena;
    Value* root = a.Dict();
    for (const auto& [k, nested] : keys) {
      Value* v = nested ? a.Dict() : a.Tensor(MakeTensorOf<float>(DType::kFloat32, {1}, {1}));
      if (nested) Put(a, v, "z", a.Tensor(MakeTensorOf<float>(DType::kFloat32, {1}, {1})));
      Put(a, root, k, v);
    }
    doc.root = root;
    WriteTensordictDir(doc, P("bad"));
  };
  for (const char* reserved : {"shape", "device", "_type"})
    ExpectError([&] { attempt({{reserved, false}}); }, ErrorCode::kUsage, std::string("named '") + reserved);
  ExpectError([&] { attempt({{"a", false}, {"a.memmap", true}}); }, ErrorCode::kUsage, "collides");
  ExpectError([&] { attempt({{"meta.json", true}}); }, ErrorCode::kUsage, "collides");
  // A nested tensor "x" writes x.shape.memmap, the file of a plain key "x.shape".
  {
    Document doc;
    auto& a = *doc.arena;
    Value* root = a.Dict();
    Value* nt = a.Object("torch:NestedTensor", nullptr);
    nt->state = a.List();
    nt->state->items.push_back(a.Tensor(MakeTensorOf<float>(DType::kFloat32, {2}, {1, 2})));
    Put(a, root, "x", nt);
    Put(a, root, "x.shape", a.Tensor(MakeTensorOf<float>(DType::kFloat32, {1}, {1})));
    doc.root = root;
    ExpectError([&] { WriteTensordictDir(doc, P("bad")); }, ErrorCode::kUsage, "x.shape.memmap");
  }
  // Two keys with one text (int 1 and str "1").
  {
    Document doc;
    auto& a = *doc.arena;
    Value* root = a.Dict();
    root->entries.emplace_back(a.Int(1), a.Tensor(MakeTensorOf<float>(DType::kFloat32, {1}, {1})));
    root->entries.emplace_back(a.Str("1"), a.Tensor(MakeTensorOf<float>(DType::kFloat32, {1}, {1})));
    doc.root = root;
    ExpectError([&] { WriteTensordictDir(doc, P("bad")); }, ErrorCode::kUsage, "two keys");
  }
  EXPECT_FALSE(fs::exists(P("bad")));
}

TEST_F(WriteDirTest, ValuesJsonCannotHoldAreErrorsNamingTheKey) {
  auto attempt = [&](auto make) {
    Document doc;
    auto& a = *doc.arena;
    Value* root = a.Dict();
    Value* inner = a.Dict();
    Put(a, inner, "v", make(a));
    Put(a, root, "cfg", inner);
    doc.root = root;
    WriteTensordictDir(doc, P("bad"));
  };
  ExpectError([&] { attempt([](ValueArena& a) { return a.Bytes("\x01"); }); }, ErrorCode::kUnsupported, "cfg/v");
  ExpectError([&] { attempt([](ValueArena& a) { return a.Float(std::nan("")); }); }, ErrorCode::kUnsupported, "non-finite");
  ExpectError([&] { attempt([](ValueArena& a) { return a.Object("foo.Bar", nullptr); }); }, ErrorCode::kUnsupported,
              "foo.Bar");
  ExpectError([&] { attempt([](ValueArena& a) {
                 Value* c = a.New(ValueKind::kComplex);
                 return c;
               }); },
              ErrorCode::kUnsupported, "cfg/v");
  // Ints up to 64 bits are exact JSON integers (Python's json reads them exactly).
  Document doc;
  auto& a = *doc.arena;
  doc.root = a.Dict();
  Put(a, doc.root, "big", a.Int(INT64_MAX));
  // Beyond 64 bits too: JSON numbers have no size limit, and Python's json reads them exactly.
  Put(a, doc.root, "bigger", a.IntFromDecimal("1180591620717411303424", false));
  Put(a, doc.root, "lower", a.IntFromDecimal("10000000000000000000000000000000000000001", true));
  WriteTensordictDir(doc, P("ok"));
  EXPECT_NE(Slurp(P("ok/big/meta.json")).find("9223372036854775807"), std::string::npos);
  EXPECT_NE(Slurp(P("ok/bigger/meta.json")).find(":1180591620717411303424"), std::string::npos);
  EXPECT_NE(Slurp(P("ok/lower/meta.json")).find(":-10000000000000000000000000000000000000001"), std::string::npos);
  Document back = ReadTensordictDir(P("ok"), {});
  for (const auto& [key, digits] : {std::pair<const char*, const char*>{"bigger", "1180591620717411303424"},
                                     {"lower", "-10000000000000000000000000000000000000001"}}) {
    const Value* data = Get(Get(back.root, key), "data");  // a NonTensorData leaf
    ASSERT_NE(data, nullptr) << key;
    EXPECT_TRUE(data->is_big_int()) << key;
    EXPECT_EQ(data->IntToString(), digits);
  }
}

TEST_F(WriteDirTest, ZeroElementNestedAndEveryDtypeRoundTrip) {
  Document doc;
  auto& a = *doc.arena;
  Value* root = a.Dict();
  Put(a, root, "empty", a.Tensor(MakeTensor(DType::kFloat32, {2, 0}, {})));
  Value* nt = a.Object("torch:NestedTensor", nullptr);
  nt->state = a.List();
  nt->state->items.push_back(a.Tensor(MakeTensorOf<int16_t>(DType::kInt16, {1, 2}, {1, 2})));
  nt->state->items.push_back(a.Tensor(MakeTensorOf<int16_t>(DType::kInt16, {3, 1}, {3, 4, 5})));
  Put(a, root, "jag", nt);
  for (DType d : {DType::kBool, DType::kBFloat16, DType::kComplex32, DType::kComplex64, DType::kComplex128,
                  DType::kUInt16, DType::kUInt32, DType::kUInt64, DType::kFloat16, DType::kInt8}) {
    std::vector<uint8_t> bytes(ElementSize(d) * 2);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(d == DType::kBool ? i % 2 : i + 3);
    Put(a, root, std::string(Name(d)), a.Tensor(MakeTensor(d, {2}, bytes)));
    Put(a, root, std::string(Name(d)) + "_0d", a.Tensor(MakeTensor(d, {}, std::vector<uint8_t>(bytes.begin(), bytes.begin() + ElementSize(d)))));
  }
  doc.root = root;
  doc.tensors = CollectTensors(root);
  WriteTensordictDir(doc, P("out"));
  EXPECT_FALSE(fs::exists(P("out/empty.memmap")));
  EXPECT_EQ(Slurp(P("out/jag.shape.memmap")).size(), 32u);
  EXPECT_NE(Slurp(P("out/meta.json")).find(R"("jag":{"device":"cpu","shape":[2,2],"dtype":"torch.int16","is_nested":true})"),
            std::string::npos);
  Document back = ReadTensordictDir(P("out"), {});
  ASSERT_EQ(back.tensors.size(), doc.tensors.size());
  for (size_t i = 0; i < doc.tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].key, doc.tensors[i].key);
    EXPECT_EQ(back.tensors[i].view->dtype, doc.tensors[i].view->dtype);
    EXPECT_EQ(back.tensors[i].view->shape, doc.tensors[i].view->shape);
    EXPECT_EQ(TensorBytes(*back.tensors[i].view), TensorBytes(*doc.tensors[i].view)) << doc.tensors[i].key;
  }
}

TEST_F(WriteDirTest, TensordictKindsRoundTrip) {
  // Read a tree of every kind, write it, read it again: same tree, same leaves.
  const std::string td = "<class 'tensordict._td.TensorDict'>";
  Write("src/meta.json", R"({"stack":{"type":"LazyStackedTensorDict"},"nts":{"type":"NonTensorStack"},"sub":{"type":"_SubTensorDict"},"tc":{"type":"MyClass"},"shape":[],"device":"cpu","_type":")" + td + "\"}");
  Write("src/stack/meta.json", R"({"_type":"<class 'tensordict._lazy.LazyStackedTensorDict'>","stack_dim":0})");
  for (const char* i : {"0", "1"}) {
    Write(std::string("src/stack/") + i + "/meta.json",
          R"({"x":{"device":"cpu","shape":[2],"dtype":"torch.float32","is_nested":false},"shape":[2],"device":"cpu","_type":")" + td + "\"}");
    WriteArray<float>(std::string("src/stack/") + i + "/x.memmap", {1, 2});
  }
  Write("src/nts/meta.json", R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,"device":null,"data":[[0,1],[0,1]]})");
  Write("src/sub/meta.json", R"({"_type":"<class 'tensordict._td._SubTensorDict'>","index":["tuple",[1]]})");
  Write("src/sub/_source/meta.json", R"({"y":{"device":"cpu","shape":[3],"dtype":"torch.uint8","is_nested":false},"shape":[3],"device":"cpu","_type":")" + td + "\"}");
  Write("src/sub/_source/y.memmap", "abc");
  Write("src/tc/meta.json", R"({"_type":"<class 'my.mod.MyClass'>","opt":null})");
  Write("src/tc/_tensordict/meta.json", R"({"w":{"device":"cpu","shape":[1],"dtype":"torch.int32","is_nested":false},"label":{"type":"NonTensorData"},"shape":[],"device":"cpu","_type":")" + td + "\"}");
  WriteArray<int32_t>("src/tc/_tensordict/w.memmap", {5});
  Write("src/tc/_tensordict/label/meta.json", R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","data":"txt","_metadata":null,"_is_non_tensor":true})");
  Document first = ReadTensordictDir(P("src"), {});
  WriteTensordictDir(first, P("out"));
  EXPECT_EQ(Slurp(P("out/stack/meta.json")),
            R"({"_type":"<class 'tensordict._lazy.LazyStackedTensorDict'>","stack_dim":0,"stack_dim_name":null,"_format_version":1,"_class":"tensordict:LazyStackedTensorDict"})");
  EXPECT_EQ(Slurp(P("out/tc/meta.json")), R"({"_type":"<class 'my.mod.MyClass'>","opt":null})");
  EXPECT_EQ(Slurp(P("out/nts/meta.json")),
            R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,"device":null,"data":[[0,1],[0,1]],"_format_version":1,"_class":"tensordict:NonTensorStack"})");
  EXPECT_EQ(Slurp(P("out/sub/meta.json")),
            R"({"_type":"<class 'tensordict._td._SubTensorDict'>","index":["tuple",[1]],"_format_version":1,"_class":"tensordict._td:_SubTensorDict"})");
  Document second = ReadTensordictDir(P("out"), {});
  ASSERT_EQ(second.tensors.size(), first.tensors.size());
  for (size_t i = 0; i < first.tensors.size(); ++i) {
    EXPECT_EQ(second.tensors[i].key, first.tensors[i].key);
    EXPECT_EQ(TensorBytes(*second.tensors[i].view), TensorBytes(*first.tensors[i].view));
  }
  EXPECT_EQ(Get(Get(second.root, "tc"), "label")->type_name, "tensordict:NonTensorData");
}

TEST_F(WriteDirTest, PickledNotReadIsNotSilentlyConverted) {
  Write("src/meta.json", R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","_metadata":null})");
  Write("src/other.pickle", "\x80\x04}\x94.");
  Document doc = ReadTensordictDir(P("src"), {});
  ExpectError([&] { WriteTensordictDir(doc, P("out")); }, ErrorCode::kUnsupported, "allow_pickle");
}

TEST_F(WriteDirTest, ReplacingAnExistingDirectoryIsAtomic) {
  Write("out/stale.memmap", "old");
  Write("out/meta.json", "{}");  // a tensordict: what a directory writer may replace
  WriteTensordictDir(SampleDoc(), P("out"));
  EXPECT_FALSE(fs::exists(P("out/stale.memmap")));  // orphans of an older save do not survive
  EXPECT_TRUE(fs::exists(P("out/meta.json")));
}

}  // namespace
}  // namespace trove::tdtest
