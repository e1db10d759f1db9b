// Hostile archives, built byte by byte or patched from good ones: each must end in a
// trove::Error whose message says what is wrong and where, never a crash.
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <string>
#include <vector>

#include "expect_error.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"
#include "trove/zip_writer.h"
#include "zip/zip_compress.h"
#include "zip_peers.h"

namespace trove {
namespace {

using ziptest::TempDir;

void Put(std::string& s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void Set(std::string& s, uint64_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.at(at + i) = static_cast<char>((v >> (8 * i)) & 0xFF);
}

uint32_t Crc(const std::string& s) {
  return static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

struct Spec {
  std::string name;
  std::string stored;  // the payload bytes as they sit in the file
  uint16_t method = 0;
  uint64_t usize = UINT64_MAX;  // default: stored.size()
  uint32_t crc = 0;             // default: CRC of stored (right for method 0)
  bool crc_set = false;
};

std::string LocalHeader(const Spec& e, uint64_t usize, uint32_t crc) {
  std::string h;
  Put(h, 0x04034b50, 4);
  Put(h, 20, 2);
  Put(h, 0, 2);
  Put(h, e.method, 2);
  Put(h, 0, 4);
  Put(h, crc, 4);
  Put(h, e.stored.size(), 4);
  Put(h, usize, 4);
  Put(h, e.name.size(), 2);
  Put(h, 0, 2);
  return h + e.name;
}

// A plain archive (no zip64, no descriptors) plus where each record starts, for patching.
struct Built {
  std::string bytes;
  std::vector<uint64_t> local;
  std::vector<uint64_t> central;
  uint64_t eocd = 0;
};

Built Build(const std::vector<Spec>& specs) {
  Built b;
  std::string cd;
  std::vector<uint64_t> cd_rel;
  for (const Spec& e : specs) {
    const uint64_t usize = e.usize == UINT64_MAX ? e.stored.size() : e.usize;
    const uint32_t crc = e.crc_set ? e.crc : Crc(e.stored);
    b.local.push_back(b.bytes.size());
    const uint64_t offset = b.bytes.size();
    b.bytes += LocalHeader(e, usize, crc) + e.stored;
    cd_rel.push_back(cd.size());
    Put(cd, 0x02014b50, 4);
    Put(cd, 20, 2);
    Put(cd, 20, 2);
    Put(cd, 0, 2);
    Put(cd, e.method, 2);
    Put(cd, 0, 4);
    Put(cd, crc, 4);
    Put(cd, e.stored.size(), 4);
    Put(cd, usize, 4);
    Put(cd, e.name.size(), 2);
    Put(cd, 0, 2);
    Put(cd, 0, 2);
    Put(cd, 0, 2);
    Put(cd, 0, 2);
    Put(cd, 0, 4);
    Put(cd, offset, 4);
    cd += e.name;
  }
  const uint64_t cd_offset = b.bytes.size();
  for (uint64_t r : cd_rel) b.central.push_back(cd_offset + r);
  b.bytes += cd;
  b.eocd = b.bytes.size();
  Put(b.bytes, 0x06054b50, 4);
  Put(b.bytes, 0, 4);
  Put(b.bytes, specs.size(), 2);
  Put(b.bytes, specs.size(), 2);
  Put(b.bytes, cd.size(), 4);
  Put(b.bytes, cd_offset, 4);
  Put(b.bytes, 0, 2);
  return b;
}

ZipReader Open(const std::string& bytes) { return ZipReader(SharedBytes::CopyOf(bytes.data(), bytes.size())); }

void ExpectOpenError(const std::string& bytes, ErrorCode code, const std::string& needle) {
  ExpectError([&] { Open(bytes); }, code, needle);
}

std::vector<Spec> TwoEntries() { return {{"a", "hello", 0}, {"dir/b", "world!", 0}}; }

TEST(ZipHostile, BaselineIsFine) {
  Built b = Build(TwoEntries());
  ZipReader r = Open(b.bytes);
  ASSERT_EQ(r.entries().size(), 2u);
  EXPECT_EQ(r.Read(*r.Find("dir/b")).view(), "world!");
  EXPECT_TRUE(r.anomalies().empty());
}

TEST(ZipHostile, GapsAreAnomaliesNotErrors) {
  Built b = Build(TwoEntries());
  // "JUNK" before the first entry and "PAD" between the two, with every offset moved along.
  std::string s = "JUNK" + b.bytes.substr(0, b.local[1]) + "PAD" + b.bytes.substr(b.local[1]);
  const uint64_t shift_cd = 7;
  Set(s, b.central[0] + shift_cd + 42, b.local[0] + 4, 4);
  Set(s, b.central[1] + shift_cd + 42, b.local[1] + 7, 4);
  Set(s, b.eocd + shift_cd + 16, b.central[0] + shift_cd, 4);
  ZipReader r = Open(s);
  ASSERT_EQ(r.entries().size(), 2u);
  EXPECT_EQ(r.entries()[1].central_offset, b.central[1] + shift_cd);
  ASSERT_EQ(r.anomalies().size(), 2u);
  EXPECT_EQ(r.anomalies()[0].message, "4 bytes before entry 'a'");
  EXPECT_EQ(r.anomalies()[0].offset, 0u);
  EXPECT_EQ(r.anomalies()[1].message, "3 bytes between entry 'a' and entry 'dir/b'");
  EXPECT_EQ(r.Read(*r.Find("dir/b")).view(), "world!");
}

TEST(ZipHostile, TrailingBytesAfterTheEndRecordAreAnAnomaly) {
  Built b = Build(TwoEntries());
  ZipReader r = Open(b.bytes + "tail");
  ASSERT_EQ(r.anomalies().size(), 1u);
  EXPECT_EQ(r.anomalies()[0].message, "4 bytes after the end record and its comment");
  EXPECT_EQ(r.anomalies()[0].offset, b.bytes.size());
}

TEST(ZipHostile, EncryptedFlags) {
  Built b = Build(TwoEntries());
  std::string both = b.bytes;
  Set(both, b.local[1] + 6, 1, 2);
  Set(both, b.central[1] + 8, 1, 2);
  ExpectOpenError(both, ErrorCode::kRefused, "entry 'dir/b' @ " + std::to_string(b.central[1]) + ": encrypted entry (flags 0x1)");
  std::string local_only = b.bytes;  // picklescan: a flag that makes one tool bail and not another
  Set(local_only, b.local[1] + 6, 1, 2);
  ExpectOpenError(local_only, ErrorCode::kRefused, "entry 'dir/b' @ " + std::to_string(b.local[1]) + ": local header marks the entry encrypted");
  std::string strong = b.bytes;
  Set(strong, b.central[0] + 8, 0x40, 2);
  ExpectOpenError(strong, ErrorCode::kRefused, "encrypted entry (flags 0x40)");
}

TEST(ZipHostile, LocalNameDiffersFromCentralName) {
  Built b = Build({{"archive/data/0", "xyz", 0}});
  b.bytes[b.local[0] + 30 + 13] = 'X';
  ExpectOpenError(b.bytes, ErrorCode::kCorrupt,
                  "entry 'archive/data/0' @ 0: local header name 'archive/data/X' differs from central directory "
                  "name 'archive/data/0'");
}

TEST(ZipHostile, LocalMethodSizesAndCrcMustAgree) {
  Built b = Build(TwoEntries());
  std::string method = b.bytes;
  Set(method, b.local[0] + 8, 8, 2);
  ExpectOpenError(method, ErrorCode::kCorrupt, "entry 'a' @ 0: local header method 8 differs from central directory method 0");
  std::string crc = b.bytes;
  Set(crc, b.local[0] + 14, 0x12345678, 4);
  ExpectOpenError(crc, ErrorCode::kCorrupt, "entry 'a' @ 0: local header says crc 0x12345678");
  std::string zeros = b.bytes;  // all-zero local values are only an anomaly
  Set(zeros, b.local[0] + 14, 0, 12);
  ZipReader r = Open(zeros);
  ASSERT_FALSE(r.anomalies().empty());
  EXPECT_NE(r.anomalies().back().message.find("zero CRC and sizes"), std::string::npos);
}

TEST(ZipHostile, DuplicateNames) {
  Built b = Build({{"x", "1", 0}, {"y", "2", 0}, {"x", "3", 0}});
  ExpectOpenError(b.bytes, ErrorCode::kRefused, "entry 'x' @ " + std::to_string(b.local[2]) + ": duplicate entry name (also at 0)");
}

TEST(ZipHostile, OverlappingEntries) {
  // The non-recursive bomb shape: entry b's local header lives inside entry a's payload.
  Spec inner{"b", "x", 0};
  std::string inner_bytes = LocalHeader(inner, 1, Crc("x")) + "x";
  Built b = Build({{"a", inner_bytes, 0}, inner});
  Set(b.bytes, b.central[1] + 42, 30 + 1, 4);  // b now points at the header inside a
  ExpectOpenError(b.bytes, ErrorCode::kCorrupt, "overlaps entry 'a'");
  // Two central entries for one local header.
  Built twice = Build({{"a", "1", 0}, {"a2", "2", 0}});
  Set(twice.bytes, twice.central[1] + 42, 0, 4);
  ExpectOpenError(twice.bytes, ErrorCode::kCorrupt, "local header name 'a' differs from central directory name 'a2'");
  // A declared size that runs into the next entry.
  Built grow = Build(TwoEntries());
  for (uint64_t at : {grow.local[0] + 18, grow.local[0] + 22}) Set(grow.bytes, at, 20, 4);
  for (uint64_t at : {grow.central[0] + 20, grow.central[0] + 24}) Set(grow.bytes, at, 20, 4);
  ExpectOpenError(grow.bytes, ErrorCode::kCorrupt, "overlaps entry 'a'");
  // A payload that runs into the central directory.
  Built into_cd = Build({{"a", "hello", 0}});
  for (uint64_t at : {into_cd.local[0] + 18, into_cd.local[0] + 22, into_cd.central[0] + 20, into_cd.central[0] + 24}) {
    Set(into_cd.bytes, at, 10, 4);
  }
  ExpectOpenError(into_cd.bytes, ErrorCode::kCorrupt, "the central directory");
}

TEST(ZipHostile, PayloadOrHeaderPastTheEnd) {
  Built b = Build(TwoEntries());
  std::string big = b.bytes;
  for (uint64_t at : {b.local[1] + 18, b.local[1] + 22, b.central[1] + 20, b.central[1] + 24}) Set(big, at, 0x7FFFFFF0, 4);
  ExpectOpenError(big, ErrorCode::kCorrupt, "entry 'dir/b' @ " + std::to_string(b.local[1]) + ": payload [");
  ExpectOpenError(big, ErrorCode::kCorrupt, "runs past the end of the file");
  std::string header = b.bytes;
  Set(header, b.central[1] + 42, b.bytes.size() - 10, 4);
  ExpectOpenError(header, ErrorCode::kCorrupt, "local header runs past the end of the file");
  std::string cd = b.bytes;
  Set(cd, b.eocd + 16, 0x10000000, 4);
  ExpectOpenError(cd, ErrorCode::kCorrupt, "central directory @ 268435456");
  std::string cd_size = b.bytes;
  Set(cd_size, b.eocd + 12, 0xFFFFFF00, 4);
  ExpectOpenError(cd_size, ErrorCode::kCorrupt, "runs past the end records");
  std::string count = b.bytes;
  Set(count, b.eocd + 8, 50, 2);
  Set(count, b.eocd + 10, 50, 2);
  ExpectOpenError(count, ErrorCode::kCorrupt, "50 entries cannot fit");
  std::string fewer = b.bytes;  // an entry hidden after the counted ones
  Set(fewer, b.eocd + 8, 1, 2);
  Set(fewer, b.eocd + 10, 1, 2);
  ExpectOpenError(fewer, ErrorCode::kCorrupt, "bytes after the last of its 1 entries");
}

TEST(ZipHostile, EscapingAndMalformedNames) {
  ExpectOpenError(Build({{"../x", "1", 0}}).bytes, ErrorCode::kRefused, "entry '../x' @ 35: refused name: '..' component");
  ExpectOpenError(Build({{"a/../../x", "1", 0}}).bytes, ErrorCode::kRefused, "'..' component");
  ExpectOpenError(Build({{"/abs", "1", 0}}).bytes, ErrorCode::kRefused, "entry '/abs' @ 35: refused name: absolute name");
  ExpectOpenError(Build({{"a\\b", "1", 0}}).bytes, ErrorCode::kRefused, "entry 'a\\\\b' @ 34: refused name: backslash");
  ExpectOpenError(Build({{std::string("a\0b", 3), "1", 0}}).bytes, ErrorCode::kRefused, "entry 'a\\x00b' @ 34: refused name: NUL");
  ExpectOpenError(Build({{"", "1", 0}}).bytes, ErrorCode::kRefused, "empty name");
  // "..." and "a..b" are ordinary names.
  EXPECT_EQ(Open(Build({{"...", "1", 0}, {"a..b/c", "2", 0}}).bytes).entries().size(), 2u);
}

TEST(ZipHostile, UnknownMethodAndMultiDisk) {
  Built b = Build(TwoEntries());
  std::string m = b.bytes;
  Set(m, b.local[0] + 8, 99, 2);
  Set(m, b.central[0] + 10, 99, 2);
  ExpectOpenError(m, ErrorCode::kUnsupported, "entry 'a' @ " + std::to_string(b.central[0]) + ": compression method 99 is not supported");
  std::string disk = b.bytes;
  Set(disk, b.eocd + 4, 1, 2);
  ExpectOpenError(disk, ErrorCode::kUnsupported, "multi-disk");
}

std::string Compress(ZipMethod method, const std::string& data) {
  std::string out;
  auto c = ZipCompressor::Make(method);
  auto sink = [&](const uint8_t* p, uint64_t n) { out.append(reinterpret_cast<const char*>(p), n); };
  c->Push(reinterpret_cast<const uint8_t*>(data.data()), data.size(), sink);
  c->Finish(sink);
  return out;
}

TEST(ZipHostile, BombsAndSizeLiesStopAtTheDeclaredSize) {
  const std::string zeros(10 << 20, '\0');
  for (ZipMethod method : {ZipMethod::kDeflate, ZipMethod::kBzip2, ZipMethod::kLzma}) {
    SCOPED_TRACE(static_cast<int>(method));
    const std::string packed = Compress(method, zeros);
    ASSERT_LT(packed.size(), 64u << 10);
    Spec bomb{"bomb", packed, static_cast<uint16_t>(method), 1000, Crc(zeros.substr(0, 1000)), true};
    ZipReader r = Open(Build({bomb}).bytes);  // metadata alone is fine
    ExpectError([&] { r.Read(r.entries()[0]); }, ErrorCode::kCorrupt,
                "entry 'bomb' @ 0: decompresses to more than the declared 1000 bytes");
    Spec more{"more", packed, static_cast<uint16_t>(method), zeros.size() + 1, Crc(zeros), true};
    ZipReader r2 = Open(Build({more}).bytes);
    ExpectError([&] { r2.Read(r2.entries()[0]); }, ErrorCode::kCorrupt,
                "decompresses to 10485760 bytes, declared 10485761");
    Spec trailing{"trailing", packed + "junk", static_cast<uint16_t>(method), zeros.size(), Crc(zeros), true};
    ZipReader r3 = Open(Build({trailing}).bytes);
    ExpectError([&] { r3.Read(r3.entries()[0]); }, ErrorCode::kCorrupt, "4 bytes follow the end of the compressed stream");
    Spec cut{"cut", packed.substr(0, packed.size() / 2), static_cast<uint16_t>(method), zeros.size(), Crc(zeros), true};
    ZipReader r4 = Open(Build({cut}).bytes);
    EXPECT_THROW(r4.Read(r4.entries()[0]), Error);
    Spec good{"good", packed, static_cast<uint16_t>(method), zeros.size(), Crc(zeros), true};
    ZipReader r5 = Open(Build({good}).bytes);
    EXPECT_TRUE(r5.CheckCrc(r5.entries()[0]));
    Spec liar{"liar", packed, static_cast<uint16_t>(method), zeros.size(), Crc(zeros) ^ 1, true};
    ZipReader r6 = Open(Build({liar}).bytes);
    EXPECT_FALSE(r6.CheckCrc(r6.entries()[0]));
  }
  // A declared size beyond the cap is refused before any work.
  Spec huge{"huge", Compress(ZipMethod::kDeflate, "x"), 8, 0, 0, true};
  Built h = Build({huge});
  ZipReader r = Open(h.bytes);
  ZipEntry e = r.entries()[0];
  e.uncompressed_size = kMaxInflatedEntryBytes + 1;
  ExpectError([&] { r.Read(e); }, ErrorCode::kLimit, "kMaxInflatedEntryBytes");
}

TEST(ZipHostile, LzmaDictionaryIsCappedByTheEntrySize) {
  const std::string text = "small lzma entry";
  std::string packed = Compress(ZipMethod::kLzma, text);
  Set(packed, 5, 0xFFFFFFFF, 4);  // properties ask for a 4 GiB dictionary
  Spec e{"l", packed, 14, text.size(), Crc(text), true};
  ZipReader r = Open(Build({e}).bytes);
  EXPECT_EQ(r.Read(r.entries()[0]).view(), text);
  std::string bad_props = Compress(ZipMethod::kLzma, text);
  Set(bad_props, 2, 4, 2);
  Spec e2{"p", bad_props, 14, text.size(), Crc(text), true};
  ZipReader r2 = Open(Build({e2}).bytes);
  ExpectError([&] { r2.Read(r2.entries()[0]); }, ErrorCode::kCorrupt, "LZMA properties size 4, expected 5");
}

std::string WriterArchive(const TempDir& dir, ZipLayout layout) {
  const std::string path = dir / "w.zip";
  {
    AtomicFile out(path);
    ZipWriter w(out, layout);
    w.AddEntry("archive/data.pkl", "pickle", 6, ZipMethod::kStored, 64);
    w.AddEntry("archive/data/0", "0123456789", 10, ZipMethod::kStored, 64);
    w.AddEntry("archive/version", "3\n", 2, ZipMethod::kDeflate, 64);
    w.Finish();
    out.Commit();
  }
  return ziptest::ReadFile(path);
}

TEST(ZipHostile, Zip64EndRecordsMustAgreeWithTheEndRecord) {
  TempDir dir;
  const std::string good = WriterArchive(dir, ZipLayout::kPyTorch);
  const uint64_t eocd = good.size() - 22;
  const uint64_t z = eocd - 20 - 56;
  EXPECT_EQ(Open(good).entries().size(), 3u);
  std::string count = good;
  Set(count, eocd + 10, 2, 2);
  ExpectOpenError(count, ErrorCode::kCorrupt, "zip64 end record @ " + std::to_string(z) + ": entry count 3 disagrees with the end record's 2");
  std::string offset = good;
  Set(offset, eocd + 16, 7, 4);
  ExpectOpenError(offset, ErrorCode::kCorrupt, "central directory offset");
  std::string sentinel = good;  // sentinels defer to the zip64 record
  Set(sentinel, eocd + 8, 0xFFFF, 2);
  Set(sentinel, eocd + 10, 0xFFFF, 2);
  Set(sentinel, eocd + 12, 0xFFFFFFFF, 4);
  Set(sentinel, eocd + 16, 0xFFFFFFFF, 4);
  EXPECT_EQ(Open(sentinel).entries().size(), 3u);
  std::string many = sentinel;
  Set(many, z + 24, kMaxZipEntries + 1, 8);
  Set(many, z + 32, kMaxZipEntries + 1, 8);
  ExpectOpenError(many, ErrorCode::kLimit, "exceed kMaxZipEntries");
  std::string locator = good;
  Set(locator, eocd - 20 + 8, good.size(), 8);
  ExpectOpenError(locator, ErrorCode::kCorrupt, "zip64 end locator @ ");
  std::string sig = good;
  sig[z] = 'X';
  ExpectOpenError(sig, ErrorCode::kCorrupt, "zip64 end record @ " + std::to_string(z) + ": bad signature");
  std::string cd_size = good;
  Set(cd_size, z + 40, 1ull << 40, 8);
  Set(cd_size, eocd + 12, 0xFFFFFFFF, 4);
  ExpectOpenError(cd_size, ErrorCode::kCorrupt, "runs past the end records");
}

TEST(ZipHostile, Zip64ExtraFieldsMustBeThere) {
  Built b = Build(TwoEntries());
  std::string s = b.bytes;
  Set(s, b.central[0] + 42, 0xFFFFFFFF, 4);
  ExpectOpenError(s, ErrorCode::kCorrupt, "entry 'a' @ " + std::to_string(b.central[0]) + ": a size or offset is 0xFFFFFFFF but there is no zip64 extra");
  // A tensordict archive whose zip64 block is too short for the sizes it must hold.
  TempDir dir;
  std::string t = WriterArchive(dir, ZipLayout::kTensordict);
  ZipReader r = Open(t);
  const ZipEntry& e = r.entries()[1];
  const uint64_t zip64_at = e.data_offset - 20;
  Set(t, zip64_at + 2, 8, 2);  // length 16 -> 8: the compressed size is now missing
  ExpectOpenError(t, ErrorCode::kCorrupt, "entry 'archive/data/0' @ " + std::to_string(e.local_header_offset) + ": local zip64 extra: truncated");
}

TEST(ZipHostile, DataDescriptorMustMatch) {
  TempDir dir;
  std::string p = WriterArchive(dir, ZipLayout::kPyTorch);
  ZipReader r = Open(p);
  const ZipEntry& e = r.entries()[1];
  std::string bad = p;
  Set(bad, e.data_offset + e.compressed_size + 4, 0xDEADBEEF, 4);
  ExpectOpenError(bad, ErrorCode::kCorrupt, "entry 'archive/data/0' @ " + std::to_string(e.local_header_offset) + ": data descriptor @ ");
  // The flag must be the same in both headers.
  std::string flag = p;
  Set(flag, e.local_header_offset + 6, 0x0800, 2);
  ExpectOpenError(flag, ErrorCode::kCorrupt, "disagree on the data descriptor bit");
}

TEST(ZipHostile, NotAZip) {
  ExpectOpenError("", ErrorCode::kCorrupt, "not a zip archive");
  ExpectOpenError(std::string(100, 'x'), ErrorCode::kCorrupt, "not a zip archive: no end of central directory record");
  // Empty archive: just an end record.
  std::string empty;
  Put(empty, 0x06054b50, 4);
  empty.append(18, '\0');
  EXPECT_TRUE(Open(empty).entries().empty());
}

// Every prefix of a good archive is a truncated archive: an error each time, never a crash.
TEST(ZipHostile, TruncatedAtEveryLength) {
  TempDir dir;
  for (ZipLayout layout : {ZipLayout::kPyTorch, ZipLayout::kTensordict}) {
    const std::string good = WriterArchive(dir, layout);
    for (size_t n = 0; n < good.size(); ++n) {
      EXPECT_THROW(Open(good.substr(0, n)), Error) << "cut at " << n;
    }
    // Bytes cut from the front shift every offset.
    for (size_t n = 1; n < good.size(); n += 7) {
      EXPECT_THROW(Open(good.substr(n)), Error) << "front cut " << n;
    }
  }
}

void OpenAndReadEverything(const std::string& bytes) {
  try {
    ZipReader r = Open(bytes);
    for (const ZipEntry& e : r.entries()) {
      try {
        (void)r.CheckCrc(e);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
}

TEST(ZipHostile, RandomBytesAndMutationsNeverCrash) {
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 600, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    if (i % 2 == 1) {
      s.append("PK\x05\x06", 4);  // an end-of-central-directory signature and 18 random bytes
      s.append(18, static_cast<char>(rng()));
    }
    OpenAndReadEverything(s);
  }
  TempDir dir;
  for (ZipLayout layout : {ZipLayout::kPyTorch, ZipLayout::kTensordict}) {
    const std::string good = WriterArchive(dir, layout);
    for (int i = 0; i < 3000; ++i) {
      std::string s = good;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) s[rng() % s.size()] = static_cast<char>(rng());
      OpenAndReadEverything(s);
    }
  }
}

}  // namespace
}  // namespace trove
