// Diff between documents: equal, one element changed, shapes that differ, keys on one side only;
// and the same tensors read from two formats.
#include <algorithm>
#include <cmath>

#include "trove/element_codec.h"
#include "trove/error.h"

#include "ops_fixtures.h"
#include "trove/diff.h"
#include "trove/open.h"
#include "trove/safetensors.h"
#include "trove/tensordict.h"

namespace trove::opstest {
namespace {

const TensorDiff* Find(const DiffReport& r, const std::string& key) {
  for (const auto& t : r.tensors)
    if (t.key == key) return &t;
  return nullptr;
}

TEST(DiffTest, EqualDocuments) {
  DiffReport r = Diff(MakeDocument(SampleLeaves()), MakeDocument(SampleLeaves()), {});
  EXPECT_TRUE(r.equal());
  EXPECT_TRUE(r.only_in_a.empty());
  EXPECT_TRUE(r.only_in_b.empty());
  EXPECT_TRUE(r.values.empty());
  ASSERT_EQ(r.tensors.size(), 5u);
  for (const auto& t : r.tensors) {
    EXPECT_TRUE(t.comparable) << t.key;
    EXPECT_TRUE(t.identical) << t.key;
    EXPECT_EQ(t.elements_differing, 0u) << t.key;
  }
  EXPECT_EQ(r.bytes_compared, 24 + 8 + 24 + 16 + 16u);  // each tensor's bytes once
}

TEST(DiffTest, OneElementChanged) {
  std::vector<Leaf> changed = SampleLeaves();
  changed[0].values[5] = 5.5;  // enc/0/weight[1][2]
  const Document a = MakeDocument(SampleLeaves()), b = MakeDocument(changed);
  DiffReport r = Diff(a, b, {});
  EXPECT_FALSE(r.equal());
  const TensorDiff* t = Find(r, "enc/0/weight");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->comparable);
  EXPECT_FALSE(t->identical);
  EXPECT_FALSE(t->within_tolerance);
  EXPECT_EQ(t->elements_differing, 1u);
  EXPECT_DOUBLE_EQ(t->max_abs, 0.5);
  EXPECT_DOUBLE_EQ(t->l2, 0.5);
  EXPECT_DOUBLE_EQ(t->l2_a, std::sqrt(55.0));  // 0² + 1² + ... + 5²
  EXPECT_EQ(t->a_dtype, "float32");
  for (const auto& other : r.tensors) {
    if (other.key != "enc/0/weight") {
      EXPECT_TRUE(other.identical) << other.key;
    }
  }

  // Within atol: not identical, but within tolerance.
  DiffOptions loose;
  loose.atol = 0.5;
  r = Diff(a, b, loose);
  t = Find(r, "enc/0/weight");
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->identical);
  EXPECT_TRUE(t->within_tolerance);
  loose.atol = 0.25;
  EXPECT_FALSE(Find(Diff(a, b, loose), "enc/0/weight")->within_tolerance);
}

TEST(DiffTest, ShapesOrDtypesDiffer) {
  std::vector<Leaf> other = SampleLeaves();
  other[2].shape = {3, 2};               // enc/1/weight
  other[4].dtype = DType::kFloat32;      // ids
  DiffReport r = Diff(MakeDocument(SampleLeaves()), MakeDocument(other), {});
  EXPECT_FALSE(r.equal());
  const TensorDiff* shape = Find(r, "enc/1/weight");
  ASSERT_NE(shape, nullptr);
  EXPECT_FALSE(shape->comparable);
  EXPECT_EQ(shape->a_shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(shape->b_shape, (std::vector<int64_t>{3, 2}));
  // int64 against float32: both real, compared by value; equal values, but the dtype changed.
  const TensorDiff* dtype = Find(r, "ids");
  ASSERT_NE(dtype, nullptr);
  EXPECT_TRUE(dtype->comparable);
  EXPECT_TRUE(dtype->dtype_changed());
  EXPECT_FALSE(dtype->identical);
  EXPECT_TRUE(dtype->within_tolerance);
  EXPECT_EQ(dtype->elements_differing, 0u);
  EXPECT_EQ(dtype->a_dtype, "int64");
  EXPECT_EQ(dtype->b_dtype, "float32");
}

TEST(DiffTest, AcrossDtypesValuesAreComparedInFloat64) {
  // float32 against its bfloat16 cast: the cast's error, element by element.
  const std::vector<double> values = {0.1, 1.0, -3.14159, 1000.5, 0, 2.0 / 3.0};
  std::vector<Leaf> a = {{"w", DType::kFloat32, {2, 3}, values}};
  std::vector<Leaf> b = {{"w", DType::kBFloat16, {2, 3}, values}};
  double max_abs = 0, sum_sq = 0, sum_sq_a = 0;
  uint64_t differing = 0;
  for (double v : values) {
    const double x = static_cast<float>(v), y = BFloat16ToDouble(FloatToBFloat16(static_cast<float>(v)));
    max_abs = std::max(max_abs, std::fabs(x - y));
    sum_sq += (x - y) * (x - y);
    sum_sq_a += x * x;
    differing += x != y;
  }
  ASSERT_GT(differing, 0u);
  ASSERT_LT(differing, values.size());  // 1.0 and 0 are exact
  DiffReport r = Diff(MakeDocument(a), MakeDocument(b), {});
  const TensorDiff* t = Find(r, "w");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->comparable);
  EXPECT_TRUE(t->dtype_changed());
  EXPECT_EQ(t->b_dtype, "bfloat16");
  EXPECT_FALSE(t->identical);
  EXPECT_FALSE(t->within_tolerance);
  EXPECT_EQ(t->elements, 6u);
  EXPECT_EQ(t->elements_differing, differing);
  EXPECT_DOUBLE_EQ(t->max_abs, max_abs);
  EXPECT_DOUBLE_EQ(t->l2, std::sqrt(sum_sq));
  EXPECT_DOUBLE_EQ(t->l2_a, std::sqrt(sum_sq_a));
  EXPECT_DOUBLE_EQ(t->relative(), std::sqrt(sum_sq) / std::sqrt(sum_sq_a));
  EXPECT_FALSE(r.equal());

  // bfloat16 keeps 8 bits of mantissa: within rtol 2^-8; and with ignore_dtype, equal.
  DiffOptions loose;
  loose.rtol = 1.0 / 256;
  r = Diff(MakeDocument(a), MakeDocument(b), loose);
  EXPECT_TRUE(Find(r, "w")->within_tolerance);
  EXPECT_FALSE(r.equal());  // the dtype changed
  loose.ignore_dtype = true;
  EXPECT_TRUE(Diff(MakeDocument(a), MakeDocument(b), loose).equal());
  loose.rtol = 1.0 / 1024;
  EXPECT_FALSE(Diff(MakeDocument(a), MakeDocument(b), loose).equal());
}

TEST(DiffTest, RealAgainstComplexIsNotComparable) {
  DiffReport r = Diff(MakeDocument({{"z", DType::kFloat32, {2}, {1, 2}}}),
                      MakeDocument({{"z", DType::kComplex64, {2}, {1, 2}}}), {});
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_FALSE(r.tensors[0].comparable);
  EXPECT_FALSE(r.equal());
}

TEST(DiffTest, StripPrefixMatchesKeysAcrossLayouts) {
  // model/blocks.0.w (nested) in A, model.blocks.0.w (flat) in B.
  std::vector<Leaf> a = {{"model/blocks.0.w", DType::kFloat32, {2}, {1, 2}}, {"model/b", DType::kFloat32, {1}, {3}},
                         {"modelx", DType::kFloat32, {1}, {4}}};
  std::vector<Leaf> b = {{"blocks.0.w", DType::kFloat32, {2}, {1, 2}}, {"b", DType::kFloat32, {1}, {3}},
                         {"modelx", DType::kFloat32, {1}, {4}}};
  DiffReport r = Diff(MakeDocument(a), MakeDocument(b), {});
  EXPECT_EQ(r.tensors.size(), 1u);  // modelx
  DiffOptions o;
  o.strip_prefix_a = {"model"};
  r = Diff(MakeDocument(a), MakeDocument(b), o);
  EXPECT_TRUE(r.only_in_a.empty());
  EXPECT_TRUE(r.only_in_b.empty());
  ASSERT_EQ(r.tensors.size(), 3u);
  EXPECT_EQ(r.tensors[0].key, "blocks.0.w");
  EXPECT_EQ(r.tensors[2].key, "modelx");  // "model" strips only at a separator
  EXPECT_TRUE(r.equal());
  o.strip_prefix_a = {"model/"};
  EXPECT_TRUE(Diff(MakeDocument(a), MakeDocument(b), o).equal());
  // Prefixes on both sides: stripped where they apply.
  o.strip_prefix_b = o.strip_prefix_a = {"model"};
  EXPECT_TRUE(Diff(MakeDocument(a), MakeDocument(a), o).equal());
  // Two keys that strip to one: an error, not a silent pick.
  std::vector<Leaf> clash = {{"model/b", DType::kFloat32, {1}, {3}}, {"b", DType::kFloat32, {1}, {3}}};
  EXPECT_THROW(Diff(MakeDocument(clash), MakeDocument(b), o), Error);
}

TEST(DiffTest, SelectChoosesWhichTensorsAreCompared) {
  std::vector<Leaf> changed = SampleLeaves();
  changed[0].values[5] = 5.5;  // enc/0/weight
  changed.pop_back();          // no ids
  DiffOptions o;
  o.select = [](const std::string& key) { return key.rfind("enc/0/", 0) != 0 && key != "ids"; };
  DiffReport r = Diff(MakeDocument(SampleLeaves()), MakeDocument(changed), o);
  EXPECT_TRUE(r.equal());
  EXPECT_EQ(r.tensors.size(), 2u);        // enc/1/weight, head.w
  EXPECT_EQ(r.tensors_skipped, 2u + 3u);  // A: enc/0/weight, enc/0/bias, ids; B: both enc/0
  EXPECT_TRUE(r.only_in_a.empty());
  o.select = [](const std::string& key) { return key != "ids"; };
  EXPECT_FALSE(Diff(MakeDocument(SampleLeaves()), MakeDocument(changed), o).equal());
}

TEST(DiffTest, KeysOnlyInOneDocument) {
  std::vector<Leaf> other = SampleLeaves();
  other.pop_back();  // no ids
  other.push_back({"extra/x", DType::kFloat64, {1}, {9}});
  DiffReport r = Diff(MakeDocument(SampleLeaves()), MakeDocument(other), {});
  EXPECT_FALSE(r.equal());
  EXPECT_EQ(r.only_in_a, (std::vector<std::string>{"ids"}));
  EXPECT_EQ(r.only_in_b, (std::vector<std::string>{"extra/x"}));
  ASSERT_EQ(r.tensors.size(), 4u);  // the common keys, in A's order
  EXPECT_EQ(r.tensors[0].key, "enc/0/weight");
  EXPECT_EQ(r.tensors[3].key, "head.w");
}

class DiffFilesTest : public OpsTest {};

TEST_F(DiffFilesTest, TheSameTensorsInTwoFormatsAreEqual) {
  WriteTdz(MakeDocument(SampleLeaves()), P("m.tdz"));
  DiffReport r = Diff(Open(SamplePt()), Open(P("m.tdz")), {});
  EXPECT_TRUE(r.equal());
  EXPECT_EQ(r.tensors.size(), 5u);
  // safetensors names a tensor by its whole path: a nested .pt and it share only top-level keys.
  WriteSafetensors(MakeDocument(SampleLeaves()), P("m.safetensors"));
  r = Diff(Open(SamplePt()), Open(P("m.safetensors")), {});
  EXPECT_FALSE(r.equal());
  EXPECT_EQ(r.tensors.size(), 2u);  // head.w, ids
  EXPECT_EQ(r.only_in_a, (std::vector<std::string>{"enc/0/weight", "enc/0/bias", "enc/1/weight"}));
  EXPECT_EQ(r.only_in_b.size(), 3u);
  for (const auto& t : r.tensors) EXPECT_TRUE(t.identical) << t.key;
}

}  // namespace
}  // namespace trove::opstest
