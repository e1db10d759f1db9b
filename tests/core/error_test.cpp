// trove::Error: fields, rendering, setters, the context chain and copies.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "trove/error.h"
#include "trove/findings.h"

namespace trove {
namespace {

TEST(ErrorFieldsTest, ReasonAloneRendersAsItself) {
  Error e(ErrorCode::kCorrupt, "truncated");
  EXPECT_EQ(e.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(e.reason(), "truncated");
  EXPECT_EQ(e.message(), "truncated");
  EXPECT_STREQ(e.what(), "truncated");
  EXPECT_EQ(e.file(), "");
  EXPECT_EQ(e.entry(), "");
  EXPECT_FALSE(e.offset().has_value());
  EXPECT_FALSE(e.spec_code().has_value());
  EXPECT_EQ(e.refused_global(), "");
  EXPECT_TRUE(e.contexts().empty());
  EXPECT_TRUE(e.parts().empty());
}

TEST(ErrorFieldsTest, PickleRefusalRendersFileEntryOffsetReason) {
  Error e(ErrorCode::kRefused, "refused global 'posix.system'");
  e.SetRefusedGlobal("posix.system").SetOffset(57).SetEntry("archive/data.pkl").SetFile("model.pt");
  EXPECT_EQ(e.message(), "model.pt: archive/data.pkl @ 57: refused global 'posix.system'");
  EXPECT_EQ(e.file(), "model.pt");
  EXPECT_EQ(e.entry(), "archive/data.pkl");
  EXPECT_EQ(e.offset(), 57u);
  EXPECT_EQ(e.refused_global(), "posix.system");
  EXPECT_EQ(e.reason(), "refused global 'posix.system'");
}

TEST(ErrorFieldsTest, SetFileNamesTheFile) {
  Error e(ErrorCode::kIo, "changed while being read");
  Error& same = e.SetFile("w.bin");
  EXPECT_EQ(&same, &e);
  EXPECT_EQ(e.file(), "w.bin");
  EXPECT_EQ(e.message(), "w.bin: changed while being read");
}

TEST(ErrorFieldsTest, FileIsSetOnceSoItDoesNotRepeat) {
  Error e(ErrorCode::kCorrupt, "bad");
  e.SetFile("victim").SetFile("victim").SetFile("outer");
  EXPECT_EQ(e.file(), "victim");
  EXPECT_EQ(e.message(), "victim: bad");
  e.SetFile("");
  EXPECT_EQ(e.message(), "victim: bad");
}

TEST(ErrorFieldsTest, AContextNamingTheFileItselfIsNotSaidTwice) {
  // A confined directory names the file it refused as a context; the outer layer's file is
  // usually another (the index that listed it), but when it is the same, once is enough.
  Error same(ErrorCode::kRefused, "leads out of its directory through a symbolic link");
  same.AddContext("'dcp/.metadata'").SetFile("dcp/.metadata");
  EXPECT_EQ(same.message(), "dcp/.metadata: leads out of its directory through a symbolic link");
  Error other(ErrorCode::kNotFound, "No such file or directory");
  other.AddContext("'ckpt/x.safetensors'").AddContext("shard of tensor 'w'").SetFile("ckpt/index.json");
  EXPECT_EQ(other.message(), "ckpt/index.json: shard of tensor 'w': 'ckpt/x.safetensors': No such file or directory");
}

TEST(ErrorFieldsTest, SetEntryAndOffsetAreSetOnce) {
  Error e(ErrorCode::kCorrupt, "bad opcode");
  e.SetOffset(3).SetOffset(99).SetEntry("data.pkl").SetEntry("other.pkl");
  EXPECT_EQ(e.offset(), 3u);
  EXPECT_EQ(e.entry(), "data.pkl");
  EXPECT_EQ(e.message(), "data.pkl @ 3: bad opcode");
}

TEST(ErrorFieldsTest, OffsetAloneLeadsTheMessage) {
  Error e(ErrorCode::kCorrupt, "bad opcode");
  e.SetOffset(0);
  EXPECT_EQ(e.offset(), 0u);
  EXPECT_EQ(e.message(), "@ 0: bad opcode");
}

TEST(ErrorFieldsTest, ContextChainIsOutermostFirst) {
  Error e(ErrorCode::kCorrupt, "short read");
  e.AddContext("storage '3'").AddContext("while reading entry x").AddContext("");
  EXPECT_EQ(e.contexts(), (std::vector<std::string>{"while reading entry x", "storage '3'"}));
  EXPECT_EQ(e.message(), "while reading entry x: storage '3': short read");
  e.SetFile("m.pt");
  EXPECT_EQ(e.message(), "m.pt: while reading entry x: storage '3': short read");
  EXPECT_EQ(e.contexts().size(), 2u);
  ASSERT_EQ(e.parts().size(), 3u);
  EXPECT_EQ(e.parts()[0].kind, Error::PartKind::kFile);
}

TEST(ErrorFieldsTest, OffsetJoinsWhatPrecedesItWithASpace) {
  Error e(ErrorCode::kCorrupt, "truncated");
  e.SetOffset(12).AddContext("storage '3'").SetFile("old.pt");
  EXPECT_EQ(e.message(), "old.pt: storage '3' @ 12: truncated");
}

TEST(ErrorFieldsTest, SpecCodeComesRightBeforeTheReason) {
  Error e(ErrorCode::kCorrupt, "64 is not below 64");
  e.SetSpecCode(9004).AddContext("line 3").SetFile("in.txt");
  EXPECT_EQ(e.spec_code(), 9004);
  EXPECT_EQ(e.message(), "in.txt: line 3: E9004: 64 is not below 64");
  EXPECT_EQ(e.MessageWithoutSpecCode(), "in.txt: line 3: 64 is not below 64");
}

TEST(ErrorFieldsTest, NoteFileSetsTheFieldWithoutRenderingIt) {
  Error e(ErrorCode::kCorrupt, "d/meta.json: not a JSON object");
  e.NoteFile("d").SetFile("d");
  EXPECT_EQ(e.file(), "d");
  EXPECT_EQ(e.message(), "d/meta.json: not a JSON object");
}

TEST(ErrorFieldsTest, WithContextWithFileWithEntryPropagate) {
  try {
    WithFile("m.pt", [] { WithEntry("a/data.pkl", [] { WithContext("tensor 'w'", [] { Fail(ErrorCode::kCorrupt, "x"); }); }); });
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.file(), "m.pt");
    EXPECT_EQ(e.entry(), "a/data.pkl");
    EXPECT_EQ(e.contexts(), std::vector<std::string>{"tensor 'w'"});
    EXPECT_EQ(e.message(), "m.pt: a/data.pkl: tensor 'w': x");
  }
}

TEST(ErrorFieldsTest, CopiesCarryEveryFieldAndStayIndependent) {
  Error e(ErrorCode::kRefused, "refused global 'os.system'");
  e.SetRefusedGlobal("os.system").SetOffset(5).SetEntry("p.pkl").SetSpecCode(9001).AddContext("c").SetFile("f");
  Error copy = e;
  EXPECT_EQ(copy.message(), e.message());
  EXPECT_STREQ(copy.what(), e.what());
  EXPECT_EQ(copy.code(), e.code());
  EXPECT_EQ(copy.file(), "f");
  EXPECT_EQ(copy.entry(), "p.pkl");
  EXPECT_EQ(copy.offset(), 5u);
  EXPECT_EQ(copy.spec_code(), 9001);
  EXPECT_EQ(copy.refused_global(), "os.system");
  EXPECT_EQ(copy.contexts(), e.contexts());
  copy.AddContext("more");
  EXPECT_NE(copy.message(), e.message());
  Error moved = std::move(copy);
  EXPECT_EQ(moved.contexts().front(), "more");
  EXPECT_EQ(moved.message(), "more: f: c: p.pkl @ 5: E9001: refused global 'os.system'");
}

TEST(ErrorFieldsTest, ThrowingASetterResultThrowsTheError) {
  try {
    Error e(ErrorCode::kNotFound, "missing");
    throw e.SetFile("gone.pt");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_EQ(e.file(), "gone.pt");
    EXPECT_EQ(e.message(), "gone.pt: missing");
  }
}

TEST(ErrorFieldsTest, FindingsTakeTheErrorsEntryAndOffset) {
  CheckReport report;
  report.path = "m.pt";
  Error e(ErrorCode::kRefused, "refused global 'posix.system'");
  e.SetOffset(57).SetEntry("archive/data.pkl").SetFile("m.pt");
  report.AddError(Severity::kHigh, "", e);
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].entry, "archive/data.pkl");
  EXPECT_EQ(report.findings[0].offset, 57u);
  EXPECT_EQ(report.findings[0].message, "refused global 'posix.system'");
  // A finding about another entry keeps the error's own entry and offset in its message.
  report.AddError(Severity::kMedium, "other", e, "seen: ");
  EXPECT_EQ(report.findings[1].entry, "other");
  EXPECT_EQ(report.findings[1].offset, 0u);
  EXPECT_EQ(report.findings[1].message, "seen: archive/data.pkl @ 57: refused global 'posix.system'");
  // An offset without an entry is in the finding's entry.
  Error bare(ErrorCode::kCorrupt, "TUPLE without a MARK");
  bare.SetOffset(2);
  report.AddError(Severity::kMedium, "data.pkl", bare, "pickle not fully readable: ");
  EXPECT_EQ(report.findings[2].entry, "data.pkl");
  EXPECT_EQ(report.findings[2].offset, 2u);
  EXPECT_EQ(report.findings[2].message, "pickle not fully readable: TUPLE without a MARK");
  // Another file than the report's stays named.
  Error shard(ErrorCode::kCorrupt, "bad");
  shard.SetFile("shard-1.bin");
  report.AddError(Severity::kMedium, "", shard);
  EXPECT_EQ(report.findings[3].message, "shard-1.bin: bad");
}

TEST(ErrorTest, ContextJoinsWithOffsetRule) {
  Error e(ErrorCode::kRefused, "refused global 'posix.system'");
  e.SetOffset(57).SetEntry("archive/data.pkl").SetFile("model.pt");
  EXPECT_EQ(e.message(), "model.pt: archive/data.pkl @ 57: refused global 'posix.system'");
  EXPECT_EQ(e.offset(), 57u);
}

}  // namespace
}  // namespace trove
