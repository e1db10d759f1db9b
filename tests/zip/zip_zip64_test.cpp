// zip64 beyond 4 GiB without writing 4 GiB: the layout functions are checked at large offsets
// and sizes, then assembled into a sparse file (a 5 GiB hole as payload) that our reader and
// Python's zipfile both open.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <string>

#include "core/byte_reader.h"
#include "trove/error.h"
#include "trove/zip_reader.h"
#include "zip/zip_layout.h"
#include "zip_peers.h"

namespace trove {
namespace {

using namespace zip;
using ziptest::TempDir;

constexpr uint64_t kGiB = uint64_t{1} << 30;

uint64_t Le(const std::string& s, uint64_t at, int n) {
  ByteReader r(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  r.Seek(at);
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{r.U8()} << (8 * i);
  return v;
}

// PyTorch's detail::getPadding (the "FB" extra field that aligns payloads to 64 bytes), written
// out again from its description in docs/, independently of src/zip.
uint64_t TorchPadding(uint64_t cursor, uint64_t name_size, uint64_t size) {
  uint64_t start = cursor + 30 + name_size + 4;
  if (size >= 0xFFFFFFFF || cursor >= 0xFFFFFFFF) {
    start += 4;
    if (size >= 0xFFFFFFFF) start += 16;
    if (cursor >= 0xFFFFFFFF) start += 8;
  }
  return (64 - start % 64) % 64;
}

TEST(Zip64Layout, PyTorchLocalHeaderFollowsGetPadding) {
  const std::string name = "archive/data/17";
  struct Case {
    uint64_t offset, size, zip64_len;
  };
  for (Case c : {Case{100, 10, 0}, Case{100, 5 * kGiB, 16}, Case{5 * kGiB + 3, 10, 8}, Case{5 * kGiB + 3, 5 * kGiB, 24},
                 Case{0xFFFFFFFE, 0xFFFFFFFE, 0}, Case{0xFFFFFFFF, 0xFFFFFFFF, 24}}) {
    SCOPED_TRACE(std::to_string(c.offset) + " " + std::to_string(c.size));
    LocalPlan p = PlanLocal(ZipLayout::kPyTorch, name, ZipMethod::kStored, c.offset, 64, c.size);
    const uint64_t pad = TorchPadding(c.offset, name.size(), c.size);
    const uint64_t zip64_block = c.zip64_len == 0 ? 0 : 4 + c.zip64_len;
    EXPECT_EQ(p.data_offset, c.offset + 30 + name.size() + zip64_block + 4 + pad);
    EXPECT_EQ(p.data_offset % 64, 0u);
    EXPECT_EQ(p.zip64, c.zip64_len != 0);
    const uint64_t x = 30 + name.size();
    EXPECT_EQ(Le(p.header, 28, 2), zip64_block + 4 + pad);
    if (c.zip64_len != 0) {
      EXPECT_EQ(Le(p.header, x, 2), 1u);  // zip64 first
      EXPECT_EQ(Le(p.header, x + 2, 2), c.zip64_len);
      if (c.offset >= 0xFFFFFFFF) {
        EXPECT_EQ(Le(p.header, x + 4 + c.zip64_len - 8, 8), c.offset);
      }
    }
    EXPECT_EQ(p.header.substr(x + zip64_block, 2), "FB");
    EXPECT_EQ(Le(p.header, x + zip64_block + 2, 2), pad);
    EXPECT_EQ(p.header.substr(x + zip64_block + 4), std::string(pad, 'Z'));
    EXPECT_EQ(DataDescriptor(p.zip64, 0, c.size, c.size).size(), p.zip64 ? 24u : 16u);
  }
}

TEST(Zip64Layout, CentralEntriesMoveOnlyWhatDoesNotFit) {
  ZipEntry e;
  e.name = "n";
  e.flags = 0x0808;
  e.uncompressed_size = 5 * kGiB;
  e.compressed_size = 5 * kGiB;
  e.local_header_offset = 100;
  std::string c = CentralEntry(ZipLayout::kPyTorch, e);
  EXPECT_EQ(Le(c, 20, 4), 0xFFFFFFFFu);
  EXPECT_EQ(Le(c, 24, 4), 0xFFFFFFFFu);
  EXPECT_EQ(Le(c, 42, 4), 100u);
  EXPECT_EQ(Le(c, 30, 2), 20u);
  EXPECT_EQ(Le(c, 47, 2), 1u);
  EXPECT_EQ(Le(c, 49, 2), 16u);
  EXPECT_EQ(Le(c, 51, 8), 5 * kGiB);
  e.uncompressed_size = e.compressed_size = 10;
  e.local_header_offset = 6 * kGiB;
  c = CentralEntry(ZipLayout::kPyTorch, e);
  EXPECT_EQ(Le(c, 20, 4), 10u);
  EXPECT_EQ(Le(c, 42, 4), 0xFFFFFFFFu);
  EXPECT_EQ(Le(c, 49, 2), 8u);
  EXPECT_EQ(Le(c, 51, 8), 6 * kGiB);
  // Python moves both sizes past 2 GiB - 1 and keeps the local padding block after the zip64 one.
  e.uncompressed_size = e.compressed_size = 3 * kGiB;
  e.local_header_offset = 10;
  e.local_extra = std::string("\x74\x64\x02\x00\x00\x00", 6) + std::string("\x01\x00\x10\x00", 4) + std::string(16, '\0');
  c = CentralEntry(ZipLayout::kTensordict, e);
  EXPECT_EQ(Le(c, 20, 4), 0xFFFFFFFFu);
  EXPECT_EQ(Le(c, 30, 2), 20u + 6u);
  EXPECT_EQ(Le(c, 47, 2), 1u);
  EXPECT_EQ(Le(c, 51, 8), 3 * kGiB);
  EXPECT_EQ(c.substr(47 + 20), std::string("\x74\x64\x02\x00\x00\x00", 6));
  // End records: PyTorch always zip64; Python only past its limits.
  EXPECT_EQ(EndRecords(ZipLayout::kPyTorch, 1, 10, 10).size(), 98u);
  EXPECT_EQ(EndRecords(ZipLayout::kTensordict, 1, 10, 10).size(), 22u);
  std::string big = EndRecords(ZipLayout::kTensordict, 1, 3 * kGiB, 10);
  ASSERT_EQ(big.size(), 98u);
  EXPECT_EQ(Le(big, 48, 8), 3 * kGiB);
  EXPECT_EQ(Le(big, 76 + 16, 4), 0xC0000000u);  // the classic field still fits 32 bits
}

uint32_t ZeroCrc(uint64_t n) {
  uint32_t result = 0;
  const Bytef zero = 0;
  uLong block = crc32(0, &zero, 1);
  uint64_t block_len = 1;
  while (n > 0) {
    if (n & 1) result = static_cast<uint32_t>(crc32_combine(result, block, static_cast<z_off_t>(block_len)));
    block = crc32_combine(block, block, static_cast<z_off_t>(block_len));
    block_len *= 2;
    n >>= 1;
  }
  return result;
}

// Two entries: "a/big" (5 GiB of zeros, a hole in the file) and "a/small" behind it, past 4 GiB.
std::string WriteSparse(const TempDir& dir, ZipLayout layout) {
  const std::string path = dir / (layout == ZipLayout::kPyTorch ? "sparse.pt" : "sparse.tdz");
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  EXPECT_GE(fd, 0);
  auto put = [&](uint64_t at, const std::string& s) {
    EXPECT_EQ(::pwrite(fd, s.data(), s.size(), static_cast<off_t>(at)), static_cast<ssize_t>(s.size()));
  };
  struct Item {
    std::string name;
    uint64_t size;
    uint32_t crc;
    std::string bytes;  // empty for the hole
  };
  const uint64_t big = 5 * kGiB;
  const std::string hi = "hi";
  const Item items[] = {{"a/big", big, ZeroCrc(big), ""},
                        {"a/small", 2, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(hi.data()), 2)), hi}};
  std::vector<ZipEntry> written;
  uint64_t cursor = 0;
  for (const Item& it : items) {
    LocalPlan p = PlanLocal(layout, it.name, ZipMethod::kStored, cursor, 64, it.size);
    std::string header = p.header;
    for (const Patch& patch : LocalPatches(layout, p, it.crc, it.size, it.size)) {
      header.replace(patch.at, patch.bytes.size(), patch.bytes);
    }
    put(cursor, header);
    if (!it.bytes.empty()) put(p.data_offset, it.bytes);
    ZipEntry e;
    e.name = it.name;
    e.flags = static_cast<uint16_t>(Le(header, 6, 2));
    e.crc32 = it.crc;
    e.compressed_size = e.uncompressed_size = it.size;
    e.local_header_offset = cursor;
    e.data_offset = p.data_offset;
    e.local_extra = header.substr(30 + it.name.size());
    written.push_back(e);
    cursor = p.data_offset + it.size;
    if (layout == ZipLayout::kPyTorch) {
      const std::string d = DataDescriptor(p.zip64, it.crc, it.size, it.size);
      put(cursor, d);
      cursor += d.size();
    }
  }
  const uint64_t cd_offset = cursor;
  for (const ZipEntry& e : written) {
    const std::string c = CentralEntry(layout, e);
    put(cursor, c);
    cursor += c.size();
  }
  put(cursor, EndRecords(layout, written.size(), cd_offset, cursor - cd_offset));
  ::close(fd);
  return path;
}

TEST(Zip64Sparse, OurReaderAndPythonOpenEntriesPastFourGiB) {
  TempDir dir;
  for (ZipLayout layout : {ZipLayout::kPyTorch, ZipLayout::kTensordict}) {
    const std::string path = WriteSparse(dir, layout);
    SCOPED_TRACE(path);
    ZipReader reader(MappedFile::Open(path));
    ASSERT_EQ(reader.entries().size(), 2u);
    const ZipEntry* big = reader.Find("a/big");
    const ZipEntry* small = reader.Find("a/small");
    ASSERT_TRUE(big && small);
    EXPECT_EQ(big->uncompressed_size, 5 * kGiB);
    EXPECT_TRUE(big->zip64);
    EXPECT_TRUE(small->zip64);
    EXPECT_GT(small->local_header_offset, 4 * kGiB);
    EXPECT_EQ(big->data_offset % 64, 0u);
    EXPECT_EQ(small->data_offset % 64, 0u);
    EXPECT_EQ(reader.Read(*big).size(), 5 * kGiB);  // a view: nothing is read
    EXPECT_EQ(reader.Read(*small).view(), "hi");
    EXPECT_TRUE(reader.CheckCrc(*small));
    auto r = ziptest::Python(dir, R"PY(
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
b, s = z.getinfo('a/big'), z.getinfo('a/small')
print(b.file_size, s.header_offset > 2**32, z.read('a/small'))
)PY",
                             {path});
    EXPECT_EQ(r.out, std::to_string(5 * kGiB) + " True b'hi'\n");
  }
}

}  // namespace
}  // namespace trove
