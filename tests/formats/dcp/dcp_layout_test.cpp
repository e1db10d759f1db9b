// The DCP tiling check and the copy of a chunk into its global tensor (formats/dcp/dcp_layout.h),
// and the .metadata reader's refusals on pickles made here byte by byte.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "expect_error.h"
#include "formats/dcp/dcp_layout.h"
#include "formats/dcp/dcp_metadata.h"

namespace trove {
namespace {

DcpBox Box(std::vector<int64_t> offsets, std::vector<int64_t> sizes) { return {std::move(offsets), std::move(sizes)}; }

TEST(DcpTiling, RowsColumnsAndGridsTile) {
  CheckDcpTiling("t", {7, 5}, {Box({0, 0}, {4, 5}), Box({4, 0}, {3, 5})});
  CheckDcpTiling("t", {3, 9}, {Box({0, 5}, {3, 4}), Box({0, 0}, {3, 5})});
  CheckDcpTiling("t", {4, 4}, {Box({0, 0}, {2, 2}), Box({0, 2}, {2, 2}), Box({2, 0}, {2, 2}), Box({2, 2}, {2, 2})});
  // Not a grid: rows split differently in each half.
  CheckDcpTiling("t", {4, 6}, {Box({0, 0}, {2, 1}), Box({0, 1}, {2, 5}), Box({2, 0}, {2, 4}), Box({2, 4}, {2, 2})});
  CheckDcpTiling("scalar", {}, {Box({}, {})});
  CheckDcpTiling("empty", {0, 3}, {});
  CheckDcpTiling("empty", {0, 3}, {Box({0, 0}, {0, 3})});
}

TEST(DcpTiling, HolesOverlapsAndOutsideAreNamed) {
  ExpectError([] { CheckDcpTiling("w", {7, 5}, {Box({0, 0}, {4, 5})}); }, ErrorCode::kCorrupt,
              "tensor 'w': no chunk holds the elements at (4, 0)");
  ExpectError([] { CheckDcpTiling("w", {7, 5}, {Box({0, 0}, {5, 5}), Box({4, 0}, {3, 5})}); }, ErrorCode::kCorrupt,
              "chunk 1 (offsets (4, 0), sizes (3, 5)) overlaps an earlier chunk at (4, 0)");
  // Overlap and hole of equal volume: the sum of sizes alone would pass.
  ExpectError([] { CheckDcpTiling("w", {2, 2}, {Box({0, 0}, {1, 2}), Box({0, 0}, {1, 2})}); }, ErrorCode::kCorrupt,
              "overlaps");
  ExpectError([] { CheckDcpTiling("w", {7, 5}, {Box({0, 0}, {4, 5}), Box({4, 0}, {4, 5})}); }, ErrorCode::kCorrupt,
              "lies outside the tensor's shape (7, 5)");
  ExpectError([] { CheckDcpTiling("w", {7, 5}, {Box({0}, {7})}); }, ErrorCode::kCorrupt, "another rank");
  ExpectError([] { CheckDcpTiling("w", {7, 5}, {Box({-1, 0}, {7, 5})}); }, ErrorCode::kCorrupt, "outside");
  ExpectError([] { CheckDcpTiling("w", {4}, {Box({INT64_MAX}, {INT64_MAX})}); }, ErrorCode::kCorrupt, "outside");
  ExpectError([] { CheckDcpTiling("s", {}, {}); }, ErrorCode::kCorrupt, "no chunk holds the elements at ()");
}

TEST(DcpTiling, IrregularGridsBeyondTheCapAreRefused) {
  // 5000 chunks, each a diagonal step: 5000^2 cells.
  std::vector<DcpBox> boxes;
  for (int64_t i = 0; i < 5000; ++i) boxes.push_back(Box({i, i}, {1, 1}));
  ExpectError([&] { CheckDcpTiling("d", {5000, 5000}, boxes); }, ErrorCode::kLimit, "kMaxDcpTilingCells");
}

TEST(DcpTiling, CopyPutsAChunkInPlace) {
  std::vector<int32_t> global(3 * 9, -1);
  std::vector<int32_t> right(3 * 4);
  std::iota(right.begin(), right.end(), 100);
  CopyDcpBox(reinterpret_cast<uint8_t*>(global.data()), {3, 9}, 4, Box({0, 5}, {3, 4}),
             reinterpret_cast<const uint8_t*>(right.data()));
  EXPECT_EQ(global[4], -1);
  EXPECT_EQ(global[5], 100);
  EXPECT_EQ(global[8], 103);
  EXPECT_EQ(global[9 + 5], 104);
  EXPECT_EQ(global[2 * 9 + 8], 111);
  int64_t scalar = 0, value = 42;
  CopyDcpBox(reinterpret_cast<uint8_t*>(&scalar), {}, 8, Box({}, {}), reinterpret_cast<const uint8_t*>(&value));
  EXPECT_EQ(scalar, 42);
}

// A chunk cut along dim 0 only (later dimensions whole, earlier ones of size 1) is one run of the
// tensor's elements, which the reader hands out as the chunk's stored bytes; any other cut is not.
TEST(DcpTiling, ChunksAlongDimZeroAreRunsOfTheTensor) {
  EXPECT_EQ(DcpBoxRun({7, 5}, Box({4, 0}, {3, 5})), std::optional<uint64_t>(20));
  EXPECT_EQ(DcpBoxRun({7, 5}, Box({0, 0}, {7, 5})), std::optional<uint64_t>(0));
  EXPECT_EQ(DcpBoxRun({7, 5}, Box({0, 2}, {7, 3})), std::nullopt);  // a column split
  EXPECT_EQ(DcpBoxRun({7, 5}, Box({2, 1}, {1, 4})), std::optional<uint64_t>(11));  // part of one row
  EXPECT_EQ(DcpBoxRun({7, 5}, Box({2, 1}, {2, 4})), std::nullopt);  // two rows' parts
  EXPECT_EQ(DcpBoxRun({2, 3, 4}, Box({1, 1, 0}, {1, 2, 4})), std::optional<uint64_t>(16));
  EXPECT_EQ(DcpBoxRun({9}, Box({3}, {6})), std::optional<uint64_t>(3));
  EXPECT_EQ(DcpBoxRun({}, Box({}, {})), std::optional<uint64_t>(0));
}

using namespace std::string_literals;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(DcpMetadata, OtherGlobalsAndGetattrAreRefusedByName) {
  // pickle.dumps of os.system('true'): protocol 2 GLOBAL.
  const auto system = Bytes("\x80\x02" "cposix\nsystem\n" "X\x04\x00\x00\x00true" "\x85R."s);
  ExpectError([&] { ParseDcpMetadata(system.data(), system.size()); }, ErrorCode::kRefused, "refused global 'posix.system'");
  // getattr(posix, 'system'): getattr is read only as an allowlisted enum's member.
  const auto getattr = Bytes("\x80\x02" "cbuiltins\ngetattr\n" "cposix\nsystem\n" "X\x06\x00\x00\x00system" "\x86R."s);
  ExpectError([&] { ParseDcpMetadata(getattr.data(), getattr.size()); }, ErrorCode::kRefused, "posix.system");
  const std::string enum_class = "ctorch.distributed._shard.sharded_tensor.metadata\nMEM_FORMAT_ENCODING\n";
  const auto member = Bytes("\x80\x02" "cbuiltins\ngetattr\n"s + enum_class + "X\x08\x00\x00\x00__init__" "\x86R."s);
  ExpectError([&] { ParseDcpMetadata(member.data(), member.size()); }, ErrorCode::kRefused,
              "refused global 'builtins.getattr'");
  // The member itself reads (and then is no Metadata).
  const auto good = Bytes("\x80\x02" "cbuiltins\ngetattr\n"s + enum_class + "X\x17\x00\x00\x00TORCH_CONTIGUOUS_FORMAT" "\x86R."s);
  ExpectError([&] { ParseDcpMetadata(good.data(), good.size()); }, ErrorCode::kCorrupt,
              "the pickle is 'torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT', "
              "not DCP's Metadata");
}

}  // namespace
}  // namespace trove
