// Verify: a sound file has no findings; a flipped byte in a stored record is a CRC finding naming
// the record and where its bytes start; a truncated zip cannot be read at all.
#include <filesystem>
#include <fstream>

#include "ops_fixtures.h"
#include "trove/checks.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/safetensors.h"
#include "trove/zip_reader.h"

namespace trove::opstest {
namespace {

namespace fs = std::filesystem;

class VerifyTest : public OpsTest {
 protected:
  static void FlipByte(const std::string& path, uint64_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&c, 1);
  }
};

TEST_F(VerifyTest, SoundFilesHaveNoFindings) {
  const std::string pt = SamplePt();
  CheckReport report = Verify(pt);
  EXPECT_EQ(report.path, pt);
  EXPECT_EQ(report.format, "pt");
  EXPECT_TRUE(report.findings.empty()) << report.findings[0].message;
  EXPECT_EQ(report.entries_checked, ZipReader(MappedFile::Open(pt)).entries().size());
  EXPECT_GT(report.bytes_checked, 0u);

  WriteSafetensors(MakeDocument(SampleLeaves()), P("m.safetensors"));
  report = Verify(P("m.safetensors"));
  EXPECT_EQ(report.format, "safetensors");
  EXPECT_TRUE(report.findings.empty()) << report.findings[0].message;

  Torch("torch.save({'a': torch.arange(4.0)}, ROOT + '/torch.pt')\n");
  report = Verify(P("torch.pt"));
  EXPECT_TRUE(report.findings.empty()) << report.findings[0].message;
}

TEST_F(VerifyTest, AFlippedByteInAStoredRecordIsACrcFindingAtThatRecord) {
  const std::string pt = SamplePt();
  const ContainerRecord* target = nullptr;
  Document doc = Open(pt);
  for (const ContainerRecord& r : doc.records) {
    if (r.name.ends_with("/data/2")) target = &r;  // enc/1/weight's storage: 10..15 as float32
  }
  ASSERT_NE(target, nullptr);
  ASSERT_EQ(target->method, "stored");
  ASSERT_EQ(target->size, 24u);
  const std::string name = target->name;
  const uint64_t offset = target->offset;
  doc = {};  // unmap before writing
  FlipByte(pt, offset + 5);

  CheckReport report = Verify(pt);
  ASSERT_EQ(report.findings.size(), 1u);
  const Finding& f = report.findings[0];
  EXPECT_EQ(f.severity, Severity::kMedium);
  EXPECT_EQ(f.entry, name);
  EXPECT_EQ(f.offset, offset);
  EXPECT_EQ(f.message, "CRC-32 mismatch: the bytes differ from what was written");
  // The file still opens: the bytes are wrong, not the structure.
  EXPECT_NO_THROW(Open(pt));
}

TEST_F(VerifyTest, ATruncatedZipIsAnErrorNotAFinding) {
  const std::string pt = SamplePt();
  fs::resize_file(pt, fs::file_size(pt) / 2);
  EXPECT_EQ(DetectFormat(pt), Format::kPt);
  try {
    Verify(pt);
    ADD_FAILURE() << "Verify read half a zip";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorrupt) << e.message();
    EXPECT_EQ(e.message().rfind(pt + ": ", 0), 0u) << e.message();
  }
}

TEST_F(VerifyTest, UnknownFilesAreAnError) {
  Write("notes.txt", "plain text");
  ExpectError([&] { Verify(P("notes.txt")); }, ErrorCode::kUnsupported, P("notes.txt") + ": not a checkpoint");
}

}  // namespace
}  // namespace trove::opstest
