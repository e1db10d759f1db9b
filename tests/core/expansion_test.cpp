// tests/core/expansion_test.cpp: the expansion rule (CheckExpansion in trove/document.h) judged
// from sizes alone: views written whole, storages shared by many keys, compressed storages.
// The storages here are sizes without bytes behind them: the rule never touches bytes.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trove/document.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/tensor.h"

namespace trove {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Bytes of `size` at a made-up address, owned by nothing: sizes for the rule, never read.
SharedBytes Sized(uintptr_t at, uint64_t size) {
  return SharedBytes(nullptr, reinterpret_cast<const uint8_t*>(at), size);
}

// A compressed entry of `compressed` bytes inflating to `inflated`, never produced.
class Compressed final : public DeferredSource {
 public:
  explicit Compressed(uint64_t compressed) : compressed_(compressed) {}
  SharedBytes Produce() const override { throw std::logic_error("the rule must not inflate"); }
  std::unique_ptr<DeferredReader> Open(uint64_t) const override { throw std::logic_error("the rule must not inflate"); }
  std::optional<uint64_t> compressed_size() const override { return compressed_; }

 private:
  uint64_t compressed_;
};

TensorView View(SharedBytes storage, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  TensorView v;
  v.dtype = DType::kUInt8;
  v.storage = std::move(storage);
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  v.storage_key = "data/0";
  return v;
}

std::string Refusal(const std::vector<NamedTensor>& tensors, bool views_kept) {
  try {
    CheckExpansion(tensors, views_kept);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimit);
    return e.message();
  }
  return "";
}

TEST(ExpansionTest, AStrideZeroViewBeyondTheRatio) {
  const TensorView v = View(Sized(0x1000, 4), {int64_t{1} << 30}, {0});
  EXPECT_NE(Refusal({{"x", &v}}, false).find("kMaxExpandRatio"), std::string::npos);
  EXPECT_EQ(Refusal({{"x", &v}}, true), "");  // .pt keeps the view
  const TensorView small = View(Sized(0x1000, 4), {int64_t{1} << 20}, {0});  // under kExpandFreeBytes
  EXPECT_EQ(Refusal({{"x", &small}}, false), "");
}

TEST(ExpansionTest, AStorageSharedByManyKeysCountsOncePerKey) {
  const TensorView whole = View(Sized(0x1000, kMiB), {static_cast<int64_t>(kMiB)}, {1});
  std::vector<NamedTensor> tensors;
  for (int i = 0; i < 100; ++i) tensors.push_back({"l/" + std::to_string(i), &whole});
  const std::string why = Refusal(tensors, false);
  EXPECT_NE(why.find("100 tensors would write 104857600 bytes from the 1048576 bytes"), std::string::npos) << why;
  EXPECT_NE(why.find("'l/0' alone 100 times"), std::string::npos) << why;
  EXPECT_EQ(Refusal(tensors, true), "");  // .pt writes the storage once
  tensors.resize(16);  // tied weights and the like: within the ratio
  EXPECT_EQ(Refusal(tensors, false), "");
}

TEST(ExpansionTest, AnEmptyStorageWhereAnotherBeginsIsAStorageOfItsOwn) {
  // safetensors slices an empty tensor where the next one begins: not the same storage.
  const TensorView empty = View(Sized(0x1000, 0), {0}, {1});
  const TensorView big = View(Sized(0x1000, 100 * kMiB), {static_cast<int64_t>(100 * kMiB)}, {1});
  EXPECT_EQ(Refusal({{"a", &empty}, {"b", &big}}, false), "");
}

TEST(ExpansionTest, CompressedStoragesAreJudgedOverTheWholeFile) {
  auto bomb = SharedBytes::Deferred(std::make_shared<Compressed>(kMiB), 1024 * kMiB);  // 1024:1
  const TensorView x = View(bomb, {static_cast<int64_t>(1024 * kMiB)}, {1});
  for (bool kept : {false, true}) {
    const std::string why = Refusal({{"x", &x}}, kept);
    EXPECT_NE(why.find("inflates 1048576 bytes to 1073741824 (1024:1)"), std::string::npos) << why;
    EXPECT_NE(why.find("kMaxInflateRatio (256:1)"), std::string::npos) << why;
    EXPECT_NE(why.find("'data/0'"), std::string::npos) << why;
  }
  // The same zeros beside 8 MiB of weights stored as they are: 1 GiB from 9 MiB, 113:1.
  const TensorView w = View(Sized(0x9000, 8 * kMiB), {static_cast<int64_t>(8 * kMiB)}, {1});
  EXPECT_EQ(Refusal({{"x", &x}, {"w", &w}}, true), "");
  // Below kExpandFreeBytes no ratio is judged.
  auto small = SharedBytes::Deferred(std::make_shared<Compressed>(1024), 32 * kMiB);
  const TensorView s = View(small, {static_cast<int64_t>(32 * kMiB)}, {1});
  EXPECT_EQ(Refusal({{"s", &s}}, false), "");
}

}  // namespace
}  // namespace trove
