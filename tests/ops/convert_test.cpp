// Convert's options: key selection by glob, the target format from the name or --to, floating
// casts, .tdz compression by name; checked by reopening what Convert wrote.
#include <filesystem>

#include "ops_fixtures.h"
#include "trove/convert.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/zip_reader.h"

namespace trove::opstest {
namespace {

namespace fs = std::filesystem;

class ConvertTest : public OpsTest {
 protected:
  // Converts the sample .pt to `dest` (format from its name) with `options`; returns it reopened.
  Document ConvertSample(const std::string& dest, const ConvertOptions& options) {
    Convert(SamplePt(), P(dest), TargetFormat(P(dest), ""), options);
    return Open(P(dest));
  }
};

TEST(KeyMatchesTest, StarStaysInAComponentDoubleStarCrossesQuestionMarkIsOneCharacter) {
  struct Case {
    const char* pattern;
    const char* key;
    bool matches;
  };
  const Case cases[] = {
      {"enc/0/weight", "enc/0/weight", true},
      {"enc/0/weight", "enc/0/weigh", false},
      {"enc/*/weight", "enc/0/weight", true},
      {"enc/*", "enc/0/weight", false},
      {"*", "head.w", true},
      {"*", "enc/0", false},
      {"enc/**", "enc/0/weight", true},
      {"**/weight", "enc/1/weight", true},
      {"**weight", "enc/1/weight", true},
      {"**/bias", "bias", false},
      {"enc/**/bias", "enc/0/bias", true},
      {"enc/?/bias", "enc/0/bias", true},
      {"enc/?/bias", "enc/10/bias", false},
      {"enc?0", "enc/0", false},
      {"head?w", "head.w", true},
      {"head.?", "head.w", true},
      {"", "", true},
      {"", "a", false},
  };
  for (const Case& c : cases) EXPECT_EQ(KeyMatches(c.pattern, c.key), c.matches) << c.pattern << " vs " << c.key;
}

TEST_F(ConvertTest, KeysKeepOnlyTheTensorsTheirGlobsMatch) {
  ConvertOptions options;
  options.keys = {"enc/*/weight", "ids"};
  Document doc = ConvertSample("star.pt", options);
  EXPECT_EQ(Keys(doc), (std::vector<std::string>{"enc/0/weight", "enc/1/weight", "ids"}));
  EXPECT_EQ(ValuesAt(doc, "enc/1/weight"), (std::vector<double>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(ValuesAt(doc, "ids"), (std::vector<double>{3, 7}));

  options.keys = {"**/bias", "head?w"};
  doc = ConvertSample("double-star.pt", options);
  EXPECT_EQ(Keys(doc), (std::vector<std::string>{"enc/0/bias", "head.w"}));
  EXPECT_EQ(ValuesAt(doc, "head.w"), (std::vector<double>{0.5, -1.25}));

  options.keys = {"enc/?/weight"};
  doc = ConvertSample("question.tdz", options);
  EXPECT_EQ(Keys(doc), (std::vector<std::string>{"enc/0/weight", "enc/1/weight"}));

  // Nothing matches: an error naming the glob, and nothing written (an empty checkpoint with
  // exit 0 would be a silent loss).
  options.keys = {"nothing/*"};
  ExpectError([&] { ConvertSample("none.pt", options); }, ErrorCode::kUsage, "--keys 'nothing/*' select none of the 5 tensors");
  EXPECT_FALSE(fs::exists(P("none.pt")));
}

TEST_F(ConvertTest, ExcludeDropsAndEmptiedDictsGo) {
  ConvertOptions options;
  options.exclude = {"enc/**"};
  Document doc = ConvertSample("no-enc.pt", options);
  EXPECT_EQ(Keys(doc), (std::vector<std::string>{"head.w", "ids"}));
  // enc held only tensors: emptied by the filter, it is dropped, not kept as {"0": {}, "1": {}}.
  EXPECT_EQ(doc.root->Find("enc"), nullptr);
  options.exclude = {"enc/*/bias"};
  options.keys = {"enc/**"};
  doc = ConvertSample("weights.pt", options);
  EXPECT_EQ(Keys(doc), (std::vector<std::string>{"enc/0/weight", "enc/1/weight"}));
}

// What a cast leaves alone by default: an optimizer's state (moments, step counters); the weights
// are cast. --cast-keys names the tensors instead.
TEST(ApplyConvertOptionsTest, CastsWeightsNotOptimizerStateUnlessAsked) {
  Document doc = MakeDocument({{"model/w", DType::kFloat32, {2}, {1, 2}},
                               {"optimizer/state/0/exp_avg_sq", DType::kFloat32, {2}, {1e-9, 2e-9}},
                               {"optimizer/state/0/step", DType::kFloat32, {}, {5}},
                               {"optimizer/param_groups/0/x", DType::kFloat32, {1}, {1}},
                               {"sched/step", DType::kFloat32, {}, {3}}});
  ConvertOptions options;
  options.floating_dtype = DType::kFloat16;
  EXPECT_EQ(ApplyConvertOptions(doc, options), 1u);
  EXPECT_EQ(DTypeAt(doc, "model/w"), DType::kFloat16);
  for (const char* key : {"optimizer/state/0/exp_avg_sq", "optimizer/state/0/step", "optimizer/param_groups/0/x",
                          "sched/step"}) {
    EXPECT_EQ(DTypeAt(doc, key), DType::kFloat32) << key;
  }
  Document again = MakeDocument({{"model/w", DType::kFloat32, {2}, {1, 2}},
                                 {"optimizer/state/0/exp_avg_sq", DType::kFloat32, {2}, {1e-9, 2e-9}}});
  options.cast_keys = {"optimizer/**"};
  EXPECT_EQ(ApplyConvertOptions(again, options), 1u);
  EXPECT_EQ(DTypeAt(again, "model/w"), DType::kFloat32);
  EXPECT_EQ(DTypeAt(again, "optimizer/state/0/exp_avg_sq"), DType::kFloat16);
}

// A dropped list item becomes None so that the items after it keep their indices (their keys).
TEST(ApplyConvertOptionsTest, DroppedListItemsLeaveNone) {
  Document doc = MakeDocument({{"a", DType::kFloat32, {1}, {1}}});
  ValueArena& arena = *doc.arena;
  Value* list = arena.List();
  for (double v : {10.0, 11.0, 12.0}) list->items.push_back(arena.Tensor(tdtest::MakeTensor(DType::kFloat64, {1}, Encode(DType::kFloat64, {v}))));
  tdtest::Put(arena, doc.root, "layers", list);
  ConvertOptions options;
  options.keys = {"layers/2", "layers/0"};
  ApplyConvertOptions(doc, options);
  EXPECT_EQ(Keys(doc), (std::vector<std::string>{"layers/0", "layers/2"}));
  ASSERT_EQ(list->items.size(), 3u);
  EXPECT_EQ(list->items[1]->kind, ValueKind::kNone);
  EXPECT_EQ(ValuesAt(doc, "layers/2"), (std::vector<double>{12}));
  EXPECT_EQ(doc.root->Find("a"), nullptr);  // a dict entry is removed
}

TEST_F(ConvertTest, TargetFormatFromTheNameOrTo) {
  for (const char* name : {"m.pt", "m.pth", "m.bin", "m.ckpt"}) EXPECT_EQ(TargetFormat(P(name), ""), Format::kPt) << name;
  EXPECT_EQ(TargetFormat(P("m.tdz"), ""), Format::kTdz);
  EXPECT_EQ(TargetFormat(P("m.psk.d"), ""), Format::kPskd);
  EXPECT_EQ(TargetFormat(P("m.psk.d/"), ""), Format::kPskd);
  EXPECT_EQ(TargetFormat(P("m.safetensors"), ""), Format::kSafetensors);
  EXPECT_EQ(TargetFormat(P("newdir"), ""), Format::kTensordictDir);
  fs::create_directories(P("existing.d"));
  EXPECT_EQ(TargetFormat(P("existing.d"), ""), Format::kTensordictDir);
  // --to wins over the name.
  EXPECT_EQ(TargetFormat(P("m.pt"), "safetensors"), Format::kSafetensors);
  EXPECT_EQ(TargetFormat(P("m.txt"), "pt"), Format::kPt);
  EXPECT_EQ(TargetFormat(P("m.pt"), "tensordict"), Format::kTensordictDir);
  EXPECT_EQ(TargetFormat(P("m.pt"), "tdz"), Format::kTdz);
  EXPECT_EQ(TargetFormat(P("m.pt"), "pskd"), Format::kPskd);
  ExpectError([&] { TargetFormat(P("m.txt"), ""); }, ErrorCode::kUsage, "cannot tell the output format from '" + P("m.txt") + "'");
  ExpectError([&] { TargetFormat(P("m.pt"), "onnx"); }, ErrorCode::kUsage, "(not 'onnx')");
}

TEST_F(ConvertTest, FloatingDtypeCastsFloatsOnlyAndKeepsValues) {
  ConvertOptions options;
  options.floating_dtype = DType::kBFloat16;
  Document doc = ConvertSample("bf16.pt", options);
  for (const char* key : {"enc/0/weight", "enc/0/bias", "enc/1/weight", "head.w"})
    EXPECT_EQ(DTypeAt(doc, key), DType::kBFloat16) << key;
  EXPECT_EQ(DTypeAt(doc, "ids"), DType::kInt64);
  // Every sample value is exact in bfloat16.
  EXPECT_EQ(ValuesAt(doc, "enc/1/weight"), (std::vector<double>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(ValuesAt(doc, "head.w"), (std::vector<double>{0.5, -1.25}));
  EXPECT_EQ(ValuesAt(doc, "ids"), (std::vector<double>{3, 7}));

  options.floating_dtype = DType::kFloat64;
  doc = ConvertSample("f64.safetensors", options);
  EXPECT_EQ(DTypeAt(doc, FlatKey("enc/0/weight")), DType::kFloat64);
  EXPECT_EQ(DTypeAt(doc, "head.w"), DType::kFloat64);
  EXPECT_EQ(DTypeAt(doc, "ids"), DType::kInt64);
  EXPECT_EQ(ValuesAt(doc, FlatKey("enc/0/weight")), (std::vector<double>{0, 1, 2, 3, 4, 5}));

  // Rounding to float16 is what the element codec does.
  std::vector<Leaf> leaves = {{"x", DType::kFloat32, {1}, {0.1}}};
  WritePt(MakeDocument(leaves), P("x.pt"));
  options.floating_dtype = DType::kFloat16;
  Convert(P("x.pt"), P("x.safetensors"), Format::kSafetensors, options);
  doc = Open(P("x.safetensors"));
  ASSERT_EQ(doc.tensors.size(), 1u);
  EXPECT_EQ(doc.tensors[0].view->dtype, DType::kFloat16);
  EXPECT_EQ(doc.tensors[0].view->At<double>(0), HalfToDouble(FloatToHalf(0.1f)));
  EXPECT_NE(doc.tensors[0].view->At<double>(0), static_cast<double>(0.1f));

  options.floating_dtype = DType::kInt32;
  ExpectError([&] { ConvertSample("int.pt", options); }, ErrorCode::kUsage, "--dtype must be a floating dtype");
  EXPECT_FALSE(fs::exists(P("int.pt")));
}

TEST_F(ConvertTest, CompressionByNameForTdzPayloads) {
  EXPECT_EQ(ZipMethodFromName(""), ZipMethod::kStored);
  EXPECT_EQ(ZipMethodFromName("stored"), ZipMethod::kStored);
  EXPECT_EQ(ZipMethodFromName("deflate"), ZipMethod::kDeflate);
  EXPECT_EQ(ZipMethodFromName("deflated"), ZipMethod::kDeflate);
  EXPECT_EQ(ZipMethodFromName("bzip2"), ZipMethod::kBzip2);
  EXPECT_EQ(ZipMethodFromName("lzma"), ZipMethod::kLzma);
  EXPECT_EQ(ZipMethodName(static_cast<uint16_t>(ZipMethod::kDeflate)), "deflate");
  ExpectError([] { ZipMethodFromName("zstd"); }, ErrorCode::kUsage, "zstd");

  ConvertOptions options;
  options.compression = ZipMethodFromName("deflate");
  Document doc = ConvertSample("packed.tdz", options);
  ExpectSample(doc);
  size_t payloads = 0;
  for (const ContainerRecord& r : doc.records) {
    if (r.name.ends_with(".memmap")) {
      ++payloads;
      EXPECT_EQ(r.method, "deflate") << r.name;
    } else if (r.name.ends_with("meta.json")) {
      EXPECT_EQ(r.method, "stored") << r.name;  // meta.json is always stored
    }
  }
  EXPECT_EQ(payloads, 5u);
}

}  // namespace
}  // namespace trove::opstest
