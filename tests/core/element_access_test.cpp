// TensorView::Element / At<T> and Document::FindValue: typed access to one element whatever the
// stored layout, and lookup of any value by its key path.
#include <gtest/gtest.h>

#include <complex>
#include <cstring>
#include <vector>

#include "trove/document.h"
#include "trove/error.h"
#include "trove/tensor.h"
#include "trove/value.h"

namespace trove {
namespace {

TensorView ViewOf(DType dtype, std::vector<uint8_t> bytes, std::vector<int64_t> shape, std::vector<int64_t> strides,
                  ByteOrder order = ByteOrder::kLittle, int64_t offset = 0) {
  TensorView v;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  v.storage_offset = offset;
  v.byte_order = order;
  v.storage = SharedBytes::FromVector(std::move(bytes));
  v.Validate();
  return v;
}

std::vector<uint8_t> FloatsLE(std::initializer_list<float> values) {
  std::vector<uint8_t> out;
  for (float f : values) {
    uint8_t b[4];
    std::memcpy(b, &f, 4);
    out.insert(out.end(), b, b + 4);
  }
  return out;
}

TEST(ElementAccessTest, StridedViewReadsLogicalElements) {
  // storage 0..5 as a 2x3 matrix; the view is its transpose (3x2, strides 1, 3)
  TensorView t = ViewOf(DType::kFloat32, FloatsLE({0, 1, 2, 3, 4, 5}), {3, 2}, {1, 3});
  EXPECT_EQ(t.At<float>(0, 1), 3.0f);
  EXPECT_EQ(t.At<float>(2, 0), 2.0f);
  EXPECT_EQ(t.At<double>(2, 1), 5.0);
  EXPECT_EQ(t.At<int>(1, 1), 4);
}

TEST(ElementAccessTest, OffsetAndBroadcastViews) {
  TensorView t = ViewOf(DType::kFloat32, FloatsLE({9, 7}), {4, 3}, {0, 0}, ByteOrder::kLittle, 1);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(t.At<float>(i, j), 7.0f);
}

TEST(ElementAccessTest, BigEndianIsSwapped) {
  std::vector<uint8_t> be = {0x3f, 0x80, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00};  // 1.0f, -2.0f big-endian
  TensorView t = ViewOf(DType::kFloat32, be, {2}, {1}, ByteOrder::kBig);
  EXPECT_EQ(t.At<float>(0), 1.0f);
  EXPECT_EQ(t.At<float>(1), -2.0f);
  std::vector<uint8_t> i16 = {0x01, 0x02};  // 0x0102 big-endian
  EXPECT_EQ(ViewOf(DType::kInt16, i16, {1}, {1}, ByteOrder::kBig).At<int>(0), 0x0102);
}

TEST(ElementAccessTest, NarrowFloatsConvertExactly) {
  // bfloat16 0x3fc0 = 1.5; float16 0xc500 = -5; float8 e4m3fn 0x38 = 1.0; e5m2 0x3c = 1.0
  EXPECT_EQ(ViewOf(DType::kBFloat16, {0xc0, 0x3f}, {1}, {1}).At<float>(0), 1.5f);
  EXPECT_EQ(ViewOf(DType::kFloat16, {0x00, 0xc5}, {1}, {1}).At<double>(0), -5.0);
  EXPECT_EQ(ViewOf(DType::kFloat8E4M3FN, {0x38}, {1}, {1}).At<float>(0), 1.0f);
  EXPECT_EQ(ViewOf(DType::kFloat8E5M2, {0x3c}, {1}, {1}).At<float>(0), 1.0f);
  EXPECT_EQ(ViewOf(DType::kBool, {0, 2}, {2}, {1}).At<bool>(1), true);
  EXPECT_EQ(ViewOf(DType::kUInt8, {200}, {1}, {1}).At<int>(0), 200);
  EXPECT_EQ(ViewOf(DType::kInt8, {0xff}, {1}, {1}).At<int>(0), -1);
}

TEST(ElementAccessTest, ComplexOnlyAsComplex) {
  TensorView c = ViewOf(DType::kComplex64, FloatsLE({1, -2}), {1}, {1});
  EXPECT_EQ(c.At<std::complex<double>>(0), std::complex<double>(1, -2));
  EXPECT_THROW(c.At<float>(0), Error);
  TensorView r = ViewOf(DType::kFloat32, FloatsLE({3}), {1}, {1});
  EXPECT_EQ(r.At<std::complex<float>>(0), std::complex<float>(3, 0));
}

TEST(ElementAccessTest, IndexIsChecked) {
  TensorView t = ViewOf(DType::kFloat32, FloatsLE({0, 1, 2, 3, 4, 5}), {2, 3}, {3, 1});
  EXPECT_THROW(t.At<float>(2, 0), Error);
  EXPECT_THROW(t.At<float>(0, -1), Error);
  EXPECT_THROW(t.At<float>(0), Error);
  EXPECT_THROW(t.At<float>(0, 0, 0), Error);
  try {
    t.At<float>(0, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUsage);
  }
}

TEST(ElementAccessTest, CastViewRoundsAsItStreams) {
  TensorView src = ViewOf(DType::kFloat32, FloatsLE({1.0f / 3, 70000.0f}), {2}, {1});
  TensorView half = CastView(src, DType::kFloat16);
  std::vector<uint8_t> streamed;
  half.ForEachChunk([&](const uint8_t* p, size_t n) { streamed.insert(streamed.end(), p, p + n); });
  ASSERT_EQ(streamed.size(), 4u);
  for (int i = 0; i < 2; ++i) {
    TensorView one = ViewOf(DType::kFloat16, {streamed[2 * i], streamed[2 * i + 1]}, {1}, {1});
    EXPECT_EQ(half.At<double>(i), one.At<double>(0));
  }
}

TEST(FindValueTest, ReachesEveryKindOfNodeByItsPath) {
  Document doc;
  ValueArena& a = *doc.arena;
  Value* root = a.Dict();
  Value* config = a.Dict();
  config->entries.push_back({a.Str("lr"), a.Float(0.5)});
  config->entries.push_back({a.Str("x/y"), a.Int(7)});
  root->entries.push_back({a.Str("config"), config});
  root->entries.push_back({a.Int(3), a.Str("three")});
  Value* list = a.List();
  list->items = {a.Int(10), a.Int(11)};
  Value* obj = a.Object("argparse.Namespace", a.Tuple());
  obj->state = a.Dict();
  obj->state->entries.push_back({a.Str("epochs"), list});
  root->entries.push_back({a.Str("hparams"), obj});
  doc.root = root;

  EXPECT_EQ(doc.FindValue(""), root);
  EXPECT_EQ(doc.FindValue("config"), config);
  EXPECT_EQ(doc.FindValue("config/lr")->real, 0.5);
  EXPECT_EQ(doc.FindValue("config/x%2Fy")->integer, 7);
  EXPECT_EQ(doc.FindValue("3")->text, "three");
  EXPECT_EQ(doc.FindValue("hparams/epochs/1")->integer, 11);
  EXPECT_EQ(doc.FindValue("hparams"), obj);
  EXPECT_EQ(doc.FindValue("config/missing"), nullptr);
  EXPECT_EQ(doc.FindValue("hparams/epochs/2"), nullptr);
  EXPECT_EQ(doc.FindValue("hparams/epochs/01"), nullptr);
  EXPECT_EQ(doc.FindValue("config/lr/deeper"), nullptr);
}

TEST(FindValueTest, CyclesEndTheLookup) {
  Document doc;
  ValueArena& a = *doc.arena;
  Value* o = a.Object("m.C", nullptr);
  o->state = a.Tuple();
  Value* inner = a.Object("m.D", nullptr);
  inner->state = o;  // o -> state tuple; inner -> o: a cycle of objects
  o->args = a.Tuple({inner});
  doc.root = o;
  EXPECT_EQ(doc.FindValue("nothing"), nullptr);
}

}  // namespace
}  // namespace trove
