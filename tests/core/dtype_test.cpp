// tests/core/dtype_test.cpp: The dtype table: names, torch names and storage classes round-trip.
#include <gtest/gtest.h>

#include "trove/dtype.h"

namespace trove {
namespace {

TEST(DTypeTest, TableIsInEnumOrderAndLookupsRoundTrip) {
  auto all = AllDTypes();
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(all[i].dtype), i) << all[i].name;
    EXPECT_EQ(DTypeFromName(all[i].name), all[i].dtype);
    if (all[i].torch_name.empty()) {  // ggml's block types: no torch dtype
      EXPECT_EQ(DTypeFromTorchString("torch." + std::string(all[i].torch_name)), std::nullopt) << all[i].name;
    } else {
      EXPECT_EQ(DTypeFromTorchString("torch." + std::string(all[i].torch_name)), all[i].dtype);
    }
    if (!all[i].storage_class.empty()) {
      EXPECT_EQ(DTypeFromStorageClass(all[i].storage_class), all[i].dtype);
    }
  }
  EXPECT_EQ(Name(DType::kFloat4E2M1FNx2), "float4_e2m1fn");
  EXPECT_EQ(DTypeFromName("float4_e2m1fn_x2"), DType::kFloat4E2M1FNx2);
  EXPECT_EQ(ElementSize(DType::kComplex128), 16u);
  EXPECT_FALSE(Info(DType::kQUInt8).readable);
  EXPECT_EQ(DTypeFromTorchString("torch.float128"), std::nullopt);
  EXPECT_EQ(DTypeFromStorageClass("EvilStorage"), std::nullopt);
}

}  // namespace
}  // namespace trove
