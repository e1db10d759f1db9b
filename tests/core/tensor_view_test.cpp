// tests/core/tensor_view_test.cpp: TensorView: validation against its storage, gathering strided
// views, byte order and chunks.
#include <gtest/gtest.h>

#include <vector>

#include "trove/dtype.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/tensor.h"

namespace trove {
namespace {

TensorView MakeView(std::vector<uint8_t> bytes, DType dt, std::vector<int64_t> shape, std::vector<int64_t> strides,
                    int64_t offset = 0) {
  TensorView v;
  v.dtype = dt;
  v.storage = SharedBytes::FromVector(std::move(bytes));
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  v.storage_offset = offset;
  return v;
}

TEST(TensorViewTest, ValidateRejectsLies) {
  EXPECT_NO_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {3, 4}, {4, 1}).Validate());
  EXPECT_THROW(MakeView(std::vector<uint8_t>(46), DType::kFloat32, {3, 4}, {4, 1}).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {3, 4}, {4, 1}, 1).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {-1}, {1}).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {2}, {-1}).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}, {1, 1}).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {int64_t{1} << 62}, {0}).Validate(), Error);
  EXPECT_NO_THROW(MakeView(std::vector<uint8_t>(0), DType::kFloat32, {0, 5}, {5, 1}).Validate());
  EXPECT_THROW(MakeView(std::vector<uint8_t>(4), DType::kFloat32, {1}, {1, 1}).Validate(), Error);
}

TEST(TensorViewTest, AnEmptyViewTakesAnyOffsetAsTorchDoes) {
  // torch takes any storage offset for a view of no element, even one whose bytes overflow
  // (torch.empty(0).set_(storage, 2**62, (0,))); nothing then reads at that offset.
  auto far = MakeView(std::vector<uint8_t>(16), DType::kFloat32, {3, 0}, {0, 1}, int64_t{1} << 62);
  EXPECT_NO_THROW(far.Validate());
  EXPECT_EQ(far.StoredBytes()->size(), 0u);
  EXPECT_EQ(far.ContiguousLittleEndian().size(), 0u);
  EXPECT_EQ(far.first_element(), far.storage.data());
  EXPECT_NO_THROW(MakeView(std::vector<uint8_t>(0), DType::kFloat64, {0}, {int64_t{1} << 62}, 100).Validate());
  // A view of elements still needs them inside its storage, and its offset's bytes to fit.
  EXPECT_THROW(MakeView(std::vector<uint8_t>(16), DType::kFloat32, {1}, {1}, 4).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(16), DType::kFloat32, {1}, {1}, int64_t{1} << 62).Validate(), Error);
}

TEST(TensorViewTest, ContiguousStridesCountZerosAsOnesAndRefuseOverflow) {
  EXPECT_EQ(ContiguousStrides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(ContiguousStrides({2, 3, 4}, /*fortran_order=*/true), (std::vector<int64_t>{1, 2, 6}));
  EXPECT_EQ(ContiguousStrides({3, 0, 5}), (std::vector<int64_t>{5, 5, 1}));  // torch.empty(3, 0, 5).stride()
  EXPECT_EQ(ContiguousStrides({}), (std::vector<int64_t>{}));
  // The largest stride is the product of all but one dimension: the last one never multiplies.
  EXPECT_EQ(ContiguousStrides({int64_t{1} << 62, 2}), (std::vector<int64_t>{2, 1}));
  const int64_t huge = int64_t{1} << 40;
  for (bool fortran : {false, true}) {
    try {
      ContiguousStrides({0, huge, huge, 0}, fortran);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kCorrupt);
      EXPECT_NE(e.message().find("[0, 1099511627776, 1099511627776, 0]: its strides do not fit in 64 bits"), std::string::npos)
          << e.message();
    }
  }
  // An empty view is contiguous whatever its strides, and asking does not multiply the sizes.
  EXPECT_TRUE(MakeView({}, DType::kFloat32, {0, int64_t{1} << 62, huge}, {1, huge, 1}).is_contiguous());
}

TEST(TensorViewTest, GathersTransposeAndSwapsBigEndian) {
  std::vector<uint8_t> bytes(12 * 2);
  for (int i = 0; i < 12; ++i) { bytes[2 * i] = static_cast<uint8_t>(i); bytes[2 * i + 1] = 0; }
  auto t = MakeView(bytes, DType::kInt16, {4, 3}, {1, 4});  // transpose of a 3x4
  ASSERT_NO_THROW(t.Validate());
  EXPECT_FALSE(t.is_contiguous());
  auto c = t.ContiguousLittleEndian();
  ASSERT_EQ(c.size(), 24u);
  std::vector<int> got;
  for (int i = 0; i < 12; ++i) got.push_back(c.data()[2 * i]);
  EXPECT_EQ(got, (std::vector<int>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  auto be = MakeView({0, 1, 0, 2}, DType::kInt16, {2}, {1});
  be.byte_order = ByteOrder::kBig;
  auto s = be.ContiguousLittleEndian();
  EXPECT_EQ(std::vector<uint8_t>(s.data(), s.data() + 4), (std::vector<uint8_t>{1, 0, 2, 0}));
  // Small chunks must give the same bytes.
  std::vector<uint8_t> chunked;
  t.ForEachChunk([&](const uint8_t* p, size_t n) { chunked.insert(chunked.end(), p, p + n); }, 4);
  EXPECT_EQ(chunked, std::vector<uint8_t>(c.data(), c.data() + c.size()));
}

}  // namespace
}  // namespace trove
