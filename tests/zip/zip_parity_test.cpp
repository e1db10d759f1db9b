// The reader's zip parity with torch's reader (miniz): which end record, where the zip64 end
// record is, name lookup ignoring case; and every point where Python's zipfile would read the
// archive differently refused (kRefuse) or listed (kReport). Python's and torch's own views of
// such archives are compared in tests/python/test_scan_parity.py.
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

void Put(std::string& s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

struct Entry {
  std::string name;
  std::string data;
};

// Local headers from `base`, then (returned separately) their central directory.
struct Laid {
  std::string body;
  std::string central;
  uint64_t count = 0;
};

Laid Lay(const std::vector<Entry>& entries, uint64_t base = 0) {
  Laid l;
  for (const Entry& e : entries) {
    const uint64_t at = base + l.body.size();
    const auto crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(e.data.data()), static_cast<uInt>(e.data.size())));
    Put(l.body, 0x04034b50, 4);
    Put(l.body, 20, 2);
    Put(l.body, 0, 2);
    Put(l.body, 0, 2);
    Put(l.body, 0, 4);
    Put(l.body, crc, 4);
    Put(l.body, e.data.size(), 4);
    Put(l.body, e.data.size(), 4);
    Put(l.body, e.name.size(), 2);
    Put(l.body, 0, 2);
    l.body += e.name + e.data;
    Put(l.central, 0x02014b50, 4);
    Put(l.central, 20, 2);
    Put(l.central, 20, 2);
    Put(l.central, 0, 2);
    Put(l.central, 0, 2);
    Put(l.central, 0, 4);
    Put(l.central, crc, 4);
    Put(l.central, e.data.size(), 4);
    Put(l.central, e.data.size(), 4);
    Put(l.central, e.name.size(), 2);
    Put(l.central, 0, 2);
    Put(l.central, 0, 2);
    Put(l.central, 0, 2);
    Put(l.central, 0, 2);
    Put(l.central, 0, 4);
    Put(l.central, at, 4);
    l.central += e.name;
    ++l.count;
  }
  return l;
}

std::string EndRecord(uint64_t count, uint64_t cd_size, uint64_t cd_offset, const std::string& comment = "") {
  std::string s;
  Put(s, 0x06054b50, 4);
  Put(s, 0, 4);
  Put(s, count, 2);
  Put(s, count, 2);
  Put(s, cd_size, 4);
  Put(s, cd_offset, 4);
  Put(s, comment.size(), 2);
  return s + comment;
}

std::string Whole(const std::vector<Entry>& entries, const std::string& comment = "", uint64_t base = 0) {
  Laid l = Lay(entries, base);
  return l.body + l.central + EndRecord(l.count, l.central.size(), base + l.body.size(), comment);
}

SharedBytes Bytes(const std::string& s) { return SharedBytes::CopyOf(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

std::string RefusedMessage(const std::string& archive) {
  try {
    ZipReader r(Bytes(archive));
  } catch (const Error& e) {
    return e.message();
  }
  return "(accepted)";
}

bool Listed(const ZipReader& r, const std::string& needle) {
  for (const ZipProblem& p : r.disagreements()) {
    if (p.message.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(ZipParity, LooksNamesUpIgnoringAsciiCase) {
  ZipReader r(Bytes(Whole({{"archive/version", "3\n"}, {"archive/DATA.PKL", "x"}})));
  EXPECT_EQ(r.Find("archive/data.pkl"), nullptr);
  ASSERT_NE(r.FindIgnoringCase("archive/data.pkl"), nullptr);
  EXPECT_EQ(r.FindIgnoringCase("archive/data.pkl")->name, "archive/DATA.PKL");
  EXPECT_EQ(r.FindIgnoringCase("ARCHIVE/Data.Pkl")->name, "archive/DATA.PKL");
  EXPECT_EQ(r.FindIgnoringCase("archive/data.pk"), nullptr);
  EXPECT_TRUE(r.case_collisions().empty());
}

TEST(ZipParity, CaseVariantsAreCollisionsAndTheExactSpellingWins) {
  ZipReader r(Bytes(Whole({{"archive/data.pkl", "a"}, {"archive/DATA.PKL", "b"}, {"archive/Data.pkl", "c"}})));
  ASSERT_EQ(r.case_collisions().size(), 2u);
  EXPECT_NE(r.case_collisions()[0].message.find("differs only in case"), std::string::npos);
  EXPECT_EQ(r.FindIgnoringCase("archive/DATA.PKL")->name, "archive/DATA.PKL");
  EXPECT_EQ(r.FindIgnoringCase("archive/data.pkl")->name, "archive/data.pkl");
  EXPECT_EQ(r.FindIgnoringCase("ARCHIVE/DATA.pkl")->name, "archive/data.pkl");  // first in directory order
}

TEST(ZipParity, DuplicatesAreRefusedOrListed) {
  const std::string a = Whole({{"x", "1"}, {"x", "2"}});
  EXPECT_NE(RefusedMessage(a).find("duplicate entry name"), std::string::npos);
  ZipReader r(Bytes(a), ZipDisagreement::kReport);
  EXPECT_TRUE(Listed(r, "duplicate entry name"));
  EXPECT_EQ(r.entries().size(), 2u);
}

TEST(ZipParity, TakesTheLastEndRecordAndListsOneWhoseCommentReachesTheEnd) {
  // A benign archive whose comment is a second archive with offsets absolute in the file.
  Laid outer = Lay({{"a/data.pkl", "benign"}});
  const std::string head = outer.body + outer.central;
  const std::string inner = Whole({{"a/data.pkl", "HOSTILE"}}, "", head.size() + 22);
  const std::string file = head + EndRecord(1, outer.central.size(), outer.body.size(), inner);
  EXPECT_NE(RefusedMessage(file).find("two end records"), std::string::npos);
  ZipReader r(Bytes(file), ZipDisagreement::kReport);
  ASSERT_EQ(r.entries().size(), 1u);
  EXPECT_EQ(r.Read(r.entries()[0]).view(), "HOSTILE");
  EXPECT_TRUE(Listed(r, "two end records"));
}

TEST(ZipParity, SignatureTooCloseToTheEndIsADisagreement) {
  std::string sig;
  Put(sig, 0x06054b50, 4);
  const std::string file = Whole({{"a", "1"}}, "note" + sig + "123456");
  EXPECT_NE(RefusedMessage(file).find("Python's zipfile stops there"), std::string::npos);
  ZipReader r(Bytes(file), ZipDisagreement::kReport);
  EXPECT_EQ(r.entries().size(), 1u);
}

TEST(ZipParity, CommentWithoutEndRecordIsOnlyAComment) {
  ZipReader r(Bytes(Whole({{"a", "1"}}, "just words")));
  EXPECT_TRUE(r.disagreements().empty());
}

TEST(ZipParity, Zip64EndRecordWithExtensibleDataIsADisagreement) {
  Laid l = Lay({{"a/data.pkl", "x"}});
  const uint64_t cd_at = l.body.size();
  const uint64_t z_at = cd_at + l.central.size();
  std::string z;
  const std::string extensible(64, 'E');
  Put(z, 0x06064b50, 4);
  Put(z, 44 + extensible.size(), 8);
  Put(z, 45, 2);
  Put(z, 45, 2);
  Put(z, 0, 4);
  Put(z, 0, 4);
  Put(z, 1, 8);
  Put(z, 1, 8);
  Put(z, l.central.size(), 8);
  Put(z, cd_at, 8);
  z += extensible;
  std::string loc;
  Put(loc, 0x07064b50, 4);
  Put(loc, 0, 4);
  Put(loc, z_at, 8);
  Put(loc, 1, 4);
  const std::string file = l.body + l.central + z + loc + EndRecord(0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF);
  EXPECT_NE(RefusedMessage(file).find("64 bytes of extensible data"), std::string::npos);
  ZipReader r(Bytes(file), ZipDisagreement::kReport);
  EXPECT_EQ(r.entries().size(), 1u);
  EXPECT_TRUE(Listed(r, "Python's zipfile reads a record @ "));
}

TEST(ZipParity, BytesBeforeTheEndRecordsShiftZipfilesOffsets) {
  Laid l = Lay({{"a", "1"}});
  const std::string file = l.body + l.central + std::string(8, '\0') + EndRecord(1, l.central.size(), l.body.size());
  EXPECT_NE(RefusedMessage(file).find("8 bytes between the central directory and the end records"), std::string::npos);
  ZipReader r(Bytes(file), ZipDisagreement::kReport);
  EXPECT_TRUE(Listed(r, "reads every entry 8 bytes further on"));
}

TEST(ZipParity, LocalNameMismatchIsListedAndReadAsTorchDoes) {
  std::string file = Whole({{"a/data.pkl", "payload"}});
  file[30 + 9] = 'x';  // the local header's copy of the name: "a/data.pxl"
  ZipReader r(Bytes(file), ZipDisagreement::kReport);
  EXPECT_TRUE(Listed(r, "local header name"));
  EXPECT_EQ(r.Read(r.entries()[0]).view(), "payload");
}

TEST(ZipParity, CentralDirectoryPastTheCountIsADisagreement) {
  Laid l = Lay({{"a", "1"}, {"b", "2"}});
  const std::string file = l.body + l.central + EndRecord(1, l.central.size(), l.body.size());
  EXPECT_NE(RefusedMessage(file).find("bytes after the last of its 1 entries"), std::string::npos);
  ZipReader r(Bytes(file), ZipDisagreement::kReport);
  EXPECT_EQ(r.entries().size(), 1u);
}

}  // namespace
}  // namespace trove
