// Diff between documents: equal, one element changed, shapes that differ, keys on one side only;
// and the same tensors read from two formats.
#include <cmath>

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
  const TensorDiff* dtype = Find(r, "ids");
  ASSERT_NE(dtype, nullptr);
  EXPECT_FALSE(dtype->comparable);
  EXPECT_EQ(dtype->a_dtype, "int64");
  EXPECT_EQ(dtype->b_dtype, "float32");
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
