// Reading archives that other tools made: Python's zipfile in every method, zip64 forced,
// data descriptors, non-ASCII names, comments, and PyTorch's own checkpoints.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"
#include "zip_peers.h"

namespace trove {
namespace {

using ziptest::Python;
using ziptest::TempDir;

// The same payloads are built by the Python script below.
std::map<std::string, std::string> Payloads() {
  std::string ramp;
  for (int rep = 0; rep < 50; ++rep) {
    for (int i = 0; i < 256; ++i) ramp.push_back(static_cast<char>(i));
  }
  std::string hello;
  for (int i = 0; i < 100; ++i) hello += "hello";
  return {
      {"a.txt", hello},
      {"empty", ""},
      {"dir/b.bin", ramp},
      {"h\xc3\xa9llo/\xe4\xb8\x96\xe7\x95\x8c.txt", "\xc3\xbcn\xc3\xaf" "code"},
  };
}

constexpr const char* kMakeArchives = R"PY(
import io, sys, zipfile
d = sys.argv[1]
payloads = {
    'a.txt': b'hello' * 100,
    'empty': b'',
    'dir/b.bin': bytes(range(256)) * 50,
    'h\u00e9llo/\u4e16\u754c.txt': '\u00fcn\u00efcode'.encode(),
}
methods = {'stored': zipfile.ZIP_STORED, 'deflate': zipfile.ZIP_DEFLATED,
           'bzip2': zipfile.ZIP_BZIP2, 'lzma': zipfile.ZIP_LZMA}
for tag, m in methods.items():
    with zipfile.ZipFile(f'{d}/{tag}.zip', 'w', m) as z:
        for n, b in payloads.items():
            z.writestr(n, b)
    with zipfile.ZipFile(f'{d}/{tag}-zip64.zip', 'w', m) as z:
        for n, b in payloads.items():
            with z.open(n, 'w', force_zip64=True) as f:
                f.write(b)

class Unseekable(io.RawIOBase):
    def __init__(self, f): self.f = f
    def writable(self): return True
    def write(self, b): return self.f.write(b)

for tag, m in methods.items():
    with open(f'{d}/{tag}-descriptor.zip', 'wb') as raw:
        with zipfile.ZipFile(Unseekable(raw), 'w', m) as z:
            for n, b in payloads.items():
                with z.open(n, 'w') as f:
                    f.write(b)

with zipfile.ZipFile(f'{d}/comment.zip', 'w') as z:
    z.writestr('x', b'1')
    z.comment = b'made for a test'
print('ok')
)PY";

void ExpectPayloads(const std::string& path, bool expect_descriptor) {
  SCOPED_TRACE(path);
  ZipReader reader(MappedFile::Open(path));
  auto expected = Payloads();
  ASSERT_EQ(reader.entries().size(), expected.size());
  for (const auto& [name, bytes] : expected) {
    const ZipEntry* e = reader.Find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->uncompressed_size, bytes.size());
    EXPECT_EQ(reader.Read(*e).view(), bytes) << name;
    EXPECT_TRUE(reader.CheckCrc(*e)) << name;
  }
  bool saw_descriptor = false;
  for (const ZipProblem& p : reader.anomalies()) {
    if (p.message.find("data descriptor") != std::string::npos) saw_descriptor = true;
  }
  EXPECT_EQ(saw_descriptor, expect_descriptor);
  EXPECT_EQ(reader.Find("missing"), nullptr);
}

TEST(ZipReaderPeers, ReadsEveryPythonMethodAndVariant) {
  TempDir dir;
  auto r = Python(dir, kMakeArchives, {dir.path().string()});
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* tag : {"stored", "deflate", "bzip2", "lzma"}) {
    ExpectPayloads(dir / (std::string(tag) + ".zip"), false);
    ExpectPayloads(dir / (std::string(tag) + "-zip64.zip"), false);
    ExpectPayloads(dir / (std::string(tag) + "-descriptor.zip"), true);
  }
}

TEST(ZipReaderPeers, StoredEntriesAreViewsOfTheMapping) {
  TempDir dir;
  ASSERT_EQ(Python(dir, kMakeArchives, {dir.path().string()}).status, 0);
  auto file = MappedFile::Open(dir / "stored.zip");
  ZipReader reader(file);
  const ZipEntry* e = reader.Find("dir/b.bin");
  ASSERT_NE(e, nullptr);
  SharedBytes b = reader.Read(*e);
  EXPECT_TRUE(b.SameOwner(file->bytes()));
  EXPECT_EQ(b.data(), file->data() + e->data_offset);
  EXPECT_EQ(reader.shared_file(), file);
}

TEST(ZipReaderPeers, ZipFlagAndLocalExtraFromForcedZip64) {
  TempDir dir;
  ASSERT_EQ(Python(dir, kMakeArchives, {dir.path().string()}).status, 0);
  ZipReader reader(MappedFile::Open(dir / "stored-zip64.zip"));
  for (const ZipEntry& e : reader.entries()) {
    EXPECT_TRUE(e.zip64) << e.name;
    ASSERT_EQ(e.local_extra.size(), 20u) << e.name;
    EXPECT_EQ(e.local_extra.substr(0, 4), std::string("\x01\x00\x10\x00", 4));
  }
}

TEST(ZipReaderPeers, NonAsciiNamesKeepTheirUtf8Bytes) {
  TempDir dir;
  ASSERT_EQ(Python(dir, kMakeArchives, {dir.path().string()}).status, 0);
  ZipReader reader(MappedFile::Open(dir / "deflate.zip"));
  const ZipEntry* e = reader.Find("h\xc3\xa9llo/\xe4\xb8\x96\xe7\x95\x8c.txt");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->flags & 0x800, 0x800);
  EXPECT_EQ(e->method, 8);
}

TEST(ZipReaderPeers, ArchiveCommentIsAnAnomaly) {
  TempDir dir;
  ASSERT_EQ(Python(dir, kMakeArchives, {dir.path().string()}).status, 0);
  ZipReader reader(MappedFile::Open(dir / "comment.zip"));
  ASSERT_EQ(reader.entries().size(), 1u);
  bool saw = false;
  for (const ZipProblem& p : reader.anomalies()) saw |= p.message.find("archive comment of 15 bytes") != std::string::npos;
  EXPECT_TRUE(saw);
}

TEST(ZipReaderPeers, InMemoryArchiveReadsTheSame) {
  TempDir dir;
  ASSERT_EQ(Python(dir, kMakeArchives, {dir.path().string()}).status, 0);
  std::string bytes = ziptest::ReadFile(dir / "lzma-zip64.zip");
  ZipReader reader(SharedBytes::CopyOf(bytes.data(), bytes.size()));
  EXPECT_EQ(reader.shared_file(), nullptr);
  const ZipEntry* e = reader.Find("a.txt");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(reader.Read(*e).view(), Payloads()["a.txt"]);
}

TEST(ZipReaderPeers, ReadsTorchSaveCheckpoint) {
  TempDir dir;
  auto r = Python(dir, R"PY(
import sys, torch
torch.save({'w': torch.arange(6, dtype=torch.float32), 'e': torch.zeros(0)}, sys.argv[1])
)PY",
                  {dir / "model.pt"});
  if (r.status != 0) GTEST_SKIP() << "torch not importable: " << r.out;
  ZipReader reader(MappedFile::Open(dir / "model.pt"));
  ASSERT_NE(reader.Find("model/data.pkl"), nullptr);
  ASSERT_NE(reader.Find("model/version"), nullptr);
  EXPECT_EQ(reader.Read(*reader.Find("model/version")).view(), "3\n");
  for (const ZipEntry& e : reader.entries()) {
    EXPECT_EQ(e.data_offset % 64, 0u) << e.name;
    EXPECT_TRUE(reader.CheckCrc(e)) << e.name;
    EXPECT_EQ(e.local_extra.substr(0, 2), "FB") << e.name;
  }
  const ZipEntry* w = reader.Find("model/data/0");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->uncompressed_size, 24u);
  EXPECT_EQ(w->flags, 0x0808);
}

TEST(ZipReaderPeers, Crc32MatchesZlibAndContinues) {
  const std::string s = "123456789";
  EXPECT_EQ(Crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0xCBF43926u);
  uint32_t part = Crc32(reinterpret_cast<const uint8_t*>(s.data()), 4);
  EXPECT_EQ(Crc32(reinterpret_cast<const uint8_t*>(s.data()) + 4, 5, part), 0xCBF43926u);
  EXPECT_EQ(Crc32(nullptr, 0), 0u);
}

}  // namespace
}  // namespace trove
