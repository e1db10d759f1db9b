// The end-record search shared by ZipReader (FindEnd) and ZipfilePrefixBytes (zip/zip_records.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trove/zip_reader.h"
#include "zip/zip_records.h"

namespace trove {
namespace {

using zip::ForEachEndSignature;
using zip::LastWholeEndRecord;

const uint8_t* U8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// A bare end record: signature, then zeros except the central directory size and offset.
std::string EndRecord(uint32_t cd_size = 0, uint32_t cd_offset = 0, uint16_t comment = 0) {
  std::string r;
  zip::PutU32(r, zip::kEndSig);
  zip::PutU16(r, 0);
  zip::PutU16(r, 0);
  zip::PutU16(r, 0);
  zip::PutU16(r, 0);
  zip::PutU32(r, cd_size);
  zip::PutU32(r, cd_offset);
  zip::PutU16(r, comment);
  return r;
}

std::vector<uint64_t> Signatures(const std::string& s, uint64_t window) {
  std::vector<uint64_t> out;
  ForEachEndSignature(U8(s), s.size(), window, [&](uint64_t pos) {
    out.push_back(pos);
    return true;
  });
  return out;
}

TEST(EndRecordSearch, VisitsSignaturesLastFirstWithinTheWindow) {
  const std::string file = std::string(10, 'x') + EndRecord() + std::string(5, 'y') + EndRecord() + "PK\x05\x06";
  const uint64_t first = 10, second = 10 + 22 + 5, truncated = second + 22;
  EXPECT_EQ(Signatures(file, UINT64_MAX), (std::vector<uint64_t>{truncated, second, first}));
  // The window counts back from the end: a signature starting exactly `window` bytes back is in.
  EXPECT_EQ(Signatures(file, file.size() - second), (std::vector<uint64_t>{truncated, second}));
  EXPECT_EQ(Signatures(file, file.size() - second - 1), (std::vector<uint64_t>{truncated}));
  EXPECT_TRUE(Signatures("PK\x05", UINT64_MAX).empty());
  EXPECT_TRUE(Signatures("", UINT64_MAX).empty());
}

TEST(EndRecordSearch, StopsWhenTheCallbackSaysSo) {
  const std::string file = EndRecord() + EndRecord();
  int calls = 0;
  ForEachEndSignature(U8(file), file.size(), UINT64_MAX, [&](uint64_t) { return ++calls < 1; });
  EXPECT_EQ(calls, 1);
}

TEST(EndRecordSearch, LastWholeRecordSkipsATruncatedSignature) {
  const std::string file = std::string(3, 'z') + EndRecord() + "PK\x05\x06" + std::string(17, '\0');  // 21 bytes after
  EXPECT_EQ(LastWholeEndRecord(U8(file), file.size(), UINT64_MAX), 3u);
  EXPECT_EQ(LastWholeEndRecord(U8(file), file.size(), 21), UINT64_MAX);  // the whole one is out of the window
  const std::string none(100, 'a');
  EXPECT_EQ(LastWholeEndRecord(U8(none), none.size(), UINT64_MAX), UINT64_MAX);
}

TEST(EndRecordSearch, ZipfilePrefixBytesUsesTheLastWholeRecord) {
  // 7 bytes of prefix, a 4-byte "central directory" the end record places at offset 0.
  const std::string file = std::string(7, 'p') + "CDCD" + EndRecord(4, 0) + "PK\x05\x06";
  EXPECT_EQ(ZipfilePrefixBytes(U8(file), file.size()), 7u);
  const std::string zip64 = "CDCD" + EndRecord(4, 0xFFFFFFFF);
  EXPECT_EQ(ZipfilePrefixBytes(U8(zip64), zip64.size()), 0u);
  const std::string impossible = EndRecord(100, 0);  // the directory would start before the file
  EXPECT_EQ(ZipfilePrefixBytes(U8(impossible), impossible.size()), 0u);
  // zipfile looks at most 22 + 0xFFFF bytes back for the signature.
  const std::string far = std::string(5, 'p') + EndRecord(0, 0) + std::string(0xFFFF, '\0');
  EXPECT_EQ(ZipfilePrefixBytes(U8(far), far.size()), 5u);
  const std::string too_far = std::string(5, 'p') + EndRecord(0, 0) + std::string(0x10000, '\0');
  EXPECT_EQ(ZipfilePrefixBytes(U8(too_far), too_far.size()), 0u);
}

}  // namespace
}  // namespace trove
