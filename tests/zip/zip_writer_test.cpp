// Archives our writer makes, judged by other tools: Python's zipfile (testzip, extractall, the
// local header offsets), Info-ZIP's unzip -t, torch.save's own bytes, and the .tdz layout of
// the tensordict notes checked byte by byte.
#include <gtest/gtest.h>
#include <zlib.h>

#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/byte_reader.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/zip_reader.h"
#include "trove/zip_writer.h"
#include "zip_peers.h"

namespace trove {
namespace {

using ziptest::Python;
using ziptest::TempDir;

struct Item {
  std::string name;
  std::string bytes;
  ZipMethod method = ZipMethod::kStored;
  uint64_t align = 64;
  uint64_t phase = 0;  // the payload lands this far past a multiple of align
};

std::string Pattern(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  // Half random, half repetitive, so compression has something to do either way.
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i < n / 2 ? rng() & 0xFF : (i / 7) & 0x3F);
  return s;
}

// Writes items, streaming each in uneven chunks.
void WriteArchive(const std::string& path, ZipLayout layout, const std::vector<Item>& items) {
  AtomicFile out(path);
  ZipWriter w(out, layout);
  std::mt19937 rng(7);
  for (const Item& it : items) {
    w.BeginEntry(it.name, it.method, it.align, kZipUnknownSize, it.phase);
    size_t pos = 0;
    while (pos < it.bytes.size()) {
      size_t n = std::min<size_t>(it.bytes.size() - pos, 1 + rng() % 300000);
      w.Write(it.bytes.data() + pos, n);
      pos += n;
    }
    w.EndEntry();
  }
  w.Finish();
  out.Commit();
}

// What Python sees: per entry, the name, where its payload starts (from the local header's own
// lengths), method, flags, size and CRC; and testzip's verdict. It also extracts everything.
constexpr const char* kInspect = R"PY(
import struct, sys, zipfile
p, out = sys.argv[1], sys.argv[2]
z = zipfile.ZipFile(p)
print('testzip', z.testzip())
z.extractall(out)
data = open(p, 'rb').read()
for i in z.infolist():
    h = i.header_offset
    n, m = struct.unpack('<HH', data[h + 26:h + 30])
    print(i.filename.encode('utf-8').hex(), h + 30 + n + m, i.compress_type, i.flag_bits, i.file_size, i.CRC)
)PY";

struct PyEntry {
  uint64_t data_offset, method, flags, size, crc;
};

std::string Unhex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}

std::map<std::string, PyEntry> InspectWithPython(const TempDir& dir, const std::string& archive) {
  auto r = Python(dir, kInspect, {archive, dir / "extracted"});
  EXPECT_EQ(r.status, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line;
  std::map<std::string, PyEntry> entries;
  std::getline(lines, line);
  EXPECT_EQ(line, "testzip None") << r.out;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string name;
    PyEntry e{};
    f >> name >> e.data_offset >> e.method >> e.flags >> e.size >> e.crc;
    entries[Unhex(name)] = e;
  }
  return entries;
}

std::vector<Item> MixedItems(ZipMethod method) {
  std::vector<Item> items;
  items.push_back({"root/meta.json", "{\"shape\":[3]}", ZipMethod::kStored, 0});
  items.push_back({"root/a.memmap", Pattern(12345, 1), method, 64});
  items.push_back({"root/empty.memmap", "", method, 64});
  items.push_back({"root/n\xc3\xa9st/\xe4\xb8\x96.memmap", Pattern(777, 2), method, 64});
  items.push_back({"root/big.memmap", Pattern(3'500'000, 3), method, 64});  // outgrows the staging buffer
  items.push_back({"root/unaligned", Pattern(33, 4), method, 0});
  items.push_back({"root/page-phased.memmap", Pattern(9000, 5), method, 4096, 640});
  for (int i = 0; i < 60; ++i) items.push_back({"root/many/" + std::to_string(i), Pattern(i * 3, 10 + i), method, 64});
  return items;
}

class WriterPeers : public ::testing::TestWithParam<std::tuple<ZipLayout, ZipMethod>> {};

TEST_P(WriterPeers, PythonAndUnzipAcceptAndReadBackIdenticalPayloads) {
  const auto [layout, method] = GetParam();
  TempDir dir;
  const std::string path = dir / "out.zip";
  const auto items = MixedItems(method);
  WriteArchive(path, layout, items);

  auto py = InspectWithPython(dir, path);
  ASSERT_EQ(py.size(), items.size());
  for (const Item& it : items) {
    SCOPED_TRACE(it.name);
    ASSERT_EQ(py.count(it.name), 1u);
    const PyEntry& e = py[it.name];
    EXPECT_EQ(e.size, it.bytes.size());
    EXPECT_EQ(e.crc, crc32(0, reinterpret_cast<const Bytef*>(it.bytes.data()), static_cast<uInt>(it.bytes.size())));
    EXPECT_EQ(ziptest::ReadFile((dir.path() / "extracted" / it.name).string()), it.bytes);
    if (it.method == ZipMethod::kStored && it.align != 0) {
      EXPECT_EQ(e.data_offset % 64, 0u);
      EXPECT_EQ(e.data_offset % it.align, it.phase);
    }
    EXPECT_EQ(e.method, static_cast<uint64_t>(it.method));
  }
  if (method != ZipMethod::kLzma) {  // Info-ZIP unzip 6.0 has no LZMA
    auto u = ziptest::UnzipTest(path);
    size_t ok = 0;
    for (size_t at = u.out.find(" OK\n"); at != std::string::npos; at = u.out.find(" OK\n", at + 1)) ++ok;
    EXPECT_EQ(ok, items.size()) << u.out;
    if (layout == ZipLayout::kPyTorch && u.out.find("mismatching \"local\" filename") != std::string::npos) {
      // PyTorch's own files do this too: "made by" MS-DOS (0) plus a local extra field makes
      // unzip 6.0 re-encode the local copy of a non-ASCII name from CP437, so it warns (exit 1)
      // and then tests the entry under its central name.
      EXPECT_EQ(u.status, 1) << u.out;
    } else {
      EXPECT_EQ(u.status, 0) << u.out;
      EXPECT_NE(u.out.find("No errors detected"), std::string::npos) << u.out;
    }
  }
  // And our own reader agrees with Python about where every payload is.
  ZipReader reader(MappedFile::Open(path));
  ASSERT_EQ(reader.entries().size(), items.size());
  for (const Item& it : items) {
    const ZipEntry* e = reader.Find(it.name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->data_offset, py[it.name].data_offset);
    EXPECT_EQ(reader.Read(*e).view(), it.bytes);
    EXPECT_TRUE(reader.CheckCrc(*e));
  }
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<ZipLayout, ZipMethod>>& param) {
  const char* method = "stored";
  switch (std::get<1>(param.param)) {
    case ZipMethod::kStored: method = "stored"; break;
    case ZipMethod::kDeflate: method = "deflate"; break;
    case ZipMethod::kBzip2: method = "bzip2"; break;
    case ZipMethod::kLzma: method = "lzma"; break;
  }
  return std::string(std::get<0>(param.param) == ZipLayout::kPyTorch ? "pytorch_" : "tensordict_") + method;
}

INSTANTIATE_TEST_SUITE_P(AllLayoutsAndMethods, WriterPeers,
                         ::testing::Combine(::testing::Values(ZipLayout::kPyTorch, ZipLayout::kTensordict),
                                            ::testing::Values(ZipMethod::kStored, ZipMethod::kDeflate,
                                                              ZipMethod::kBzip2, ZipMethod::kLzma)),
                         ParamName);

uint64_t Le(const std::string& s, uint64_t at, int n) {
  ByteReader r(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  r.Seek(at);
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{r.U8()} << (8 * i);
  return v;
}

TEST(WriterLayout, TensordictLocalHeadersAndCentralDirectoryMatchTheNotes) {
  TempDir dir;
  const std::string path = dir / "t.tdz";
  std::vector<Item> items = {
      {"meta.json", "{}", ZipMethod::kStored, 0},
      {"a.memmap", Pattern(100, 1), ZipMethod::kStored, 64},
      {"\xc3\xa9.memmap", Pattern(64, 2), ZipMethod::kStored, 64},
      {"c.memmap", Pattern(5000, 3), ZipMethod::kDeflate, 64},
      {"d.memmap", Pattern(5000, 3), ZipMethod::kLzma, 0},
      {"e.memmap", "", ZipMethod::kStored, 64},
  };
  WriteArchive(path, ZipLayout::kTensordict, items);
  const std::string f = ziptest::ReadFile(path);
  ZipReader reader(MappedFile::Open(path));
  ASSERT_EQ(reader.entries().size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    SCOPED_TRACE(it.name);
    const ZipEntry& e = reader.entries()[i];
    const uint64_t h = e.local_header_offset;
    const uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(it.bytes.data()), static_cast<uInt>(it.bytes.size()));
    EXPECT_EQ(Le(f, h, 4), 0x04034b50u);
    EXPECT_EQ(Le(f, h + 4, 2), it.method == ZipMethod::kLzma ? 63u : 45u);  // version needed
    const bool non_ascii = it.name[0] == '\xc3';
    EXPECT_EQ(Le(f, h + 6, 2), (non_ascii ? 0x800u : 0u) | (it.method == ZipMethod::kLzma ? 2u : 0u));
    EXPECT_EQ(Le(f, h + 8, 2), static_cast<uint64_t>(it.method));
    EXPECT_EQ(Le(f, h + 10, 2), 0u);       // 00:00
    EXPECT_EQ(Le(f, h + 12, 2), 0x0021u);  // 1980-01-01
    EXPECT_EQ(Le(f, h + 14, 4), crc);      // patched in after the payload
    EXPECT_EQ(Le(f, h + 18, 4), 0xFFFFFFFFu);
    EXPECT_EQ(Le(f, h + 22, 4), 0xFFFFFFFFu);
    const uint64_t name_len = Le(f, h + 26, 2);
    const uint64_t extra_len = Le(f, h + 28, 2);
    EXPECT_EQ(f.substr(h + 30, name_len), it.name);
    uint64_t x = h + 30 + name_len;
    const bool aligned = it.method == ZipMethod::kStored && it.align != 0;
    if (aligned) {
      EXPECT_EQ(Le(f, x, 2), 0x6474u);  // padding block first
      const uint64_t pad = Le(f, x + 2, 2);
      EXPECT_EQ(f.substr(x + 4, pad), std::string(pad, '\0'));
      x += 4 + pad;
    }
    EXPECT_EQ(Le(f, x, 2), 1u);  // then the zip64 block with both sizes
    EXPECT_EQ(Le(f, x + 2, 2), 16u);
    EXPECT_EQ(Le(f, x + 4, 8), it.bytes.size());
    EXPECT_EQ(Le(f, x + 12, 8), e.compressed_size);
    EXPECT_EQ(x + 20, h + 30 + name_len + extra_len);
    EXPECT_EQ(e.data_offset, x + 20);
    if (aligned) {
      EXPECT_EQ(e.data_offset % 64, 0u);
    }
    EXPECT_EQ(reader.Read(e).view(), it.bytes);
  }
  // Central directory: Python's versions and mode, the local extra minus its zip64 block.
  ByteReader end(reinterpret_cast<const uint8_t*>(f.data()), f.size());
  end.Seek(f.size() - 22);
  ASSERT_EQ(end.U32(), 0x06054b50u);
  end.Skip(8);
  const uint32_t cd_size = end.U32();
  const uint32_t cd_offset = end.U32();
  EXPECT_EQ(uint64_t{cd_offset} + cd_size, f.size() - 22) << "no zip64 end records for a small archive";
  uint64_t c = cd_offset;
  for (size_t i = 0; i < items.size(); ++i) {
    const ZipEntry& e = reader.entries()[i];
    SCOPED_TRACE(e.name);
    EXPECT_EQ(Le(f, c, 4), 0x02014b50u);
    const uint64_t v = items[i].method == ZipMethod::kLzma ? 63 : 45;
    EXPECT_EQ(Le(f, c + 4, 2), 0x300u | v);
    EXPECT_EQ(Le(f, c + 6, 2), v);
    EXPECT_EQ(Le(f, c + 14, 2), 0x0021u);
    EXPECT_EQ(Le(f, c + 16, 4), e.crc32);
    EXPECT_EQ(Le(f, c + 20, 4), e.compressed_size);
    EXPECT_EQ(Le(f, c + 24, 4), e.uncompressed_size);
    EXPECT_EQ(Le(f, c + 38, 4), 0100644u << 16);
    EXPECT_EQ(Le(f, c + 42, 4), e.local_header_offset);
    const uint64_t n = Le(f, c + 28, 2), m = Le(f, c + 30, 2);
    const std::string cd_extra = f.substr(c + 46 + n, m);
    const bool aligned = items[i].method == ZipMethod::kStored && items[i].align != 0;
    EXPECT_EQ(cd_extra, aligned ? e.local_extra.substr(0, e.local_extra.size() - 20) : std::string());
    c += 46 + n + m;
  }
  // Reproducible: the same entries give the same bytes.
  WriteArchive(dir / "again.tdz", ZipLayout::kTensordict, items);
  EXPECT_EQ(ziptest::ReadFile(dir / "again.tdz"), f);
}

TEST(WriterLayout, PyTorchLayoutMatchesTorchSaveByteForByte) {
  TempDir dir;
  auto r = Python(dir, R"PY(
import sys, torch
sd = {'w': torch.arange(12, dtype=torch.float32).reshape(3, 4), 'e': torch.zeros(0),
      'b': torch.ones(3, dtype=torch.bool), 'l': torch.arange(1000, dtype=torch.int64)}
torch.save(sd, sys.argv[1])
)PY",
                  {dir / "model.pt"});
  if (r.status != 0) GTEST_SKIP() << "torch not importable: " << r.out;
  const std::string original = ziptest::ReadFile(dir / "model.pt");
  ZipReader reader(MappedFile::Open(dir / "model.pt"));
  {
    AtomicFile out(dir / "copy.pt");
    ZipWriter w(out, ZipLayout::kPyTorch);
    for (const ZipEntry& e : reader.entries()) {
      SharedBytes b = reader.Read(e);
      w.AddEntry(e.name, b.data(), b.size(), ZipMethod::kStored, 64);
    }
    w.Finish();
    out.Commit();
  }
  const std::string copy = ziptest::ReadFile(dir / "copy.pt");
  ASSERT_EQ(copy.size(), original.size());
  for (size_t i = 0; i < copy.size(); ++i) ASSERT_EQ(copy[i], original[i]) << "first difference at byte " << i;
  auto load = Python(dir, "import sys, torch\nprint(torch.load(sys.argv[1])['l'].sum().item())\n", {dir / "copy.pt"});
  EXPECT_EQ(load.out, "499500\n");
}

TEST(WriterLayout, PyTorchEmptyEntryHasNoDescriptorAndEndRecordsAreZip64) {
  TempDir dir;
  const std::string path = dir / "p.pt";
  {
    AtomicFile out(path);
    ZipWriter w(out, ZipLayout::kPyTorch);
    w.AddEntry("p/data.pkl", "abc", 3, ZipMethod::kStored, 64);
    w.BeginEntry("p/data/0", ZipMethod::kStored, 64);  // streamed, turns out empty
    w.EndEntry();
    w.AddEntry("p/version", "3\n", 2, ZipMethod::kStored, 0);
    w.Finish();
    ASSERT_EQ(w.written().size(), 3u);
    EXPECT_EQ(w.written()[0].flags, 0x0808);
    EXPECT_EQ(w.written()[1].flags, 0x0800);
    EXPECT_EQ(w.written()[2].local_extra, "");  // no alignment asked: no FB block
    out.Commit();
  }
  const std::string f = ziptest::ReadFile(path);
  ZipReader reader(MappedFile::Open(path));
  const ZipEntry& a = reader.entries()[0];
  const ZipEntry& empty = reader.entries()[1];
  EXPECT_EQ(Le(f, a.data_offset + 3, 4), 0x08074b50u);         // 16-byte descriptor after "abc"
  EXPECT_EQ(empty.local_header_offset, a.data_offset + 3 + 16);  // ... and nothing else
  EXPECT_EQ(Le(f, empty.local_header_offset + 6, 2), 0x0800u);
  EXPECT_EQ(reader.entries()[2].local_header_offset, empty.data_offset);
  // zip64 end record, locator, end record, as PyTorch always writes them.
  EXPECT_EQ(Le(f, f.size() - 22 - 20, 4), 0x07064b50u);
  EXPECT_EQ(Le(f, f.size() - 22 - 20 - 56, 4), 0x06064b50u);
  EXPECT_EQ(Le(f, f.size() - 22 - 20 - 56 + 12, 2), 0x031Eu);
  EXPECT_EQ(ziptest::PythonTestzip(dir, path).out, "None\n");
}

TEST(WriterLayout, ManyEntriesGetZip64EndRecordsInTheTensordictLayout) {
  TempDir dir;
  const std::string path = dir / "many.tdz";
  constexpr int kCount = 66000;  // more than a 16-bit count
  {
    AtomicFile out(path);
    ZipWriter w(out, ZipLayout::kTensordict);
    for (int i = 0; i < kCount; ++i) {
      const std::string v = std::to_string(i);
      w.AddEntry("e/" + v, v.data(), v.size());
    }
    w.Finish();
    out.Commit();
  }
  const std::string f = ziptest::ReadFile(path);
  EXPECT_EQ(Le(f, f.size() - 22 + 10, 2), 0xFFFFu);
  EXPECT_EQ(Le(f, f.size() - 22 - 20, 4), 0x07064b50u);
  ZipReader reader(MappedFile::Open(path));
  ASSERT_EQ(reader.entries().size(), static_cast<size_t>(kCount));
  EXPECT_EQ(reader.Read(*reader.Find("e/65999")).view(), "65999");
  auto r = Python(dir, "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nprint(len(z.infolist()), z.read('e/65999'))\n",
                  {path});
  EXPECT_EQ(r.out, "66000 b'65999'\n");
  auto u = ziptest::Run("unzip -tqq " + ziptest::ShellQuote(path));
  EXPECT_EQ(u.status, 0) << u.out.substr(0, 500);
}

// Bytes read from a zip entry carry the CRC-32 it recorded; WriteBytes puts that value in the new
// entry without reading the bytes (a wrong recorded CRC stays wrong, so damage stays
// detectable), and computes the CRC of bytes that carry none.
TEST(WriterRecordedCrc, CarriedWithoutReadingComputedOtherwise) {
  TempDir dir;
  const std::string payload = Pattern(3 << 20, 11);
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
  WriteArchive(dir / "a.zip", ZipLayout::kTensordict, {{"a.memmap", payload}, {"d.memmap", payload, ZipMethod::kDeflate, 0}});
  ZipReader a(MappedFile::Open(dir / "a.zip"));
  SharedBytes read = a.Read(*a.Find("a.memmap"));
  ASSERT_TRUE(read.recorded_crc32().has_value());
  EXPECT_EQ(*read.recorded_crc32(), crc);
  EXPECT_EQ(a.Read(*a.Find("d.memmap")).recorded_crc32(), crc);  // the uncompressed bytes' CRC
  EXPECT_EQ(read.Slice(0, read.size()).recorded_crc32(), crc);
  EXPECT_FALSE(read.Slice(1, read.size() - 1).recorded_crc32().has_value());

  const SharedBytes lying = SharedBytes::CopyOf(payload.data(), payload.size()).WithRecordedCrc32(0x12345678u);
  {
    AtomicFile out(dir / "b.zip");
    ZipWriter w(out, ZipLayout::kPyTorch);
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, SharedBytes>>{
             {"b/data/0", read}, {"b/data/1", lying}, {"b/data/2", read.Slice(1, read.size() - 1)}}) {
      w.BeginEntry(name, ZipMethod::kStored, 64, bytes.size());
      w.WriteBytes(bytes);
      w.EndEntry();
    }
    w.BeginEntry("b/data/3", ZipMethod::kStored, 64);
    w.Write(payload.data(), 5);  // a recorded CRC after other bytes of the same entry combines
    w.WriteBytes(read.Slice(5, read.size() - 5).WithRecordedCrc32(static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(payload.data() + 5), static_cast<uInt>(payload.size() - 5)))));
    w.EndEntry();
    w.Finish();
    out.Commit();
  }
  ZipReader b(MappedFile::Open(dir / "b.zip"));
  EXPECT_EQ(b.Find("b/data/0")->crc32, crc);
  EXPECT_TRUE(b.CheckCrc(*b.Find("b/data/0")));
  EXPECT_EQ(b.Find("b/data/1")->crc32, 0x12345678u);
  EXPECT_FALSE(b.CheckCrc(*b.Find("b/data/1")));
  EXPECT_TRUE(b.CheckCrc(*b.Find("b/data/2")));
  EXPECT_EQ(b.Find("b/data/3")->crc32, crc);
  // Python's zipfile agrees on every entry but the lying one.
  EXPECT_EQ(ziptest::PythonTestzip(dir, dir / "b.zip").out, "b/data/1\n");
}

TEST(WriterUsage, RefusesBadNamesDuplicatesAndMisuse) {
  TempDir dir;
  AtomicFile out(dir / "x.zip");
  ZipWriter w(out, ZipLayout::kTensordict);
  auto code = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kIo;  // "did not throw"
  };
  EXPECT_EQ(code([&] { w.AddEntry("../x", "", 0); }), ErrorCode::kUsage);
  EXPECT_EQ(code([&] { w.AddEntry("/abs", "", 0); }), ErrorCode::kUsage);
  EXPECT_EQ(code([&] { w.AddEntry("a\\b", "", 0); }), ErrorCode::kUsage);
  EXPECT_EQ(code([&] { w.AddEntry(std::string("a\0b", 3), "", 0); }), ErrorCode::kUsage);
  EXPECT_EQ(code([&] { w.AddEntry("", "", 0); }), ErrorCode::kUsage);
  EXPECT_EQ(code([&] { w.AddEntry("x", "", 0, ZipMethod::kStored, 48); }), ErrorCode::kUsage);
  EXPECT_EQ(code([&] { w.BeginEntry("y", ZipMethod::kStored, 64, kZipUnknownSize, 64); }), ErrorCode::kUsage);
  EXPECT_EQ(code([&] { w.Write("a", 1); }), ErrorCode::kUsage);
  EXPECT_EQ(code([&] { w.EndEntry(); }), ErrorCode::kUsage);
  w.AddEntry("ok", "1", 1);
  EXPECT_EQ(code([&] { w.AddEntry("ok", "1", 1); }), ErrorCode::kUsage);
  w.BeginEntry("sized", ZipMethod::kStored, 0, 10);
  w.Write("12345", 5);
  EXPECT_EQ(code([&] { w.EndEntry(); }), ErrorCode::kUsage);
}

}  // namespace
}  // namespace trove
