// The presk binary: every spec example byte for byte, every error code, no output left behind.
#include <filesystem>

#include "pskd_test_support.h"

namespace trove::pskd {
namespace {

using testing::ReadFile;
using testing::RunPresk;
using testing::TempDir;
using testing::WriteFile;

std::string TokensTxt() { return testing::SourceDir() + "/tests/data/tokens.txt"; }

TEST(PreskCliTest, SpecLmWindowsAndInfoExample) {
  TempDir tmp;
  std::filesystem::create_directories(tmp.dir() / "out");
  std::filesystem::create_directories(tmp.dir() / "tests/data");
  std::filesystem::copy_file(TokensTxt(), tmp.Path("tests/data/tokens.txt"));
  auto w = RunPresk({"data", "lm-windows", "--vocab", "64", "--seq", "8", "tests/data/tokens.txt", "-o",
                     "out/tokens.psk.d"},
                    tmp.dir().string());
  EXPECT_EQ(w.status, 0) << w.err;
  EXPECT_EQ(w.out,
            "presk data: wrote out/tokens.psk.d (24 windows of type (idx[64][seq: 8], idx[64][seq: 8]) from 200 "
            "tokens)\n");
  EXPECT_EQ(w.err, "");
  auto info = RunPresk({"data", "info", "out/tokens.psk.d", "--samples", "2"}, tmp.dir().string());
  EXPECT_EQ(info.status, 0) << info.err;
  EXPECT_EQ(info.out,
            "type    (idx[64][seq: 8], idx[64][seq: 8])\n"
            "count   24\n"
            "version 1\n"
            "sample  16 bytes, 2 leaves\n"
            "[0] ([41, 19, 50, 6, 9, 12, 46, 7], [19, 50, 6, 9, 12, 46, 7, 27])\n"
            "[1] ([27, 4, 11, 55, 53, 8, 30, 11], [4, 11, 55, 53, 8, 30, 11, 54])\n");
  // The file: header then 24 samples of 16 bytes, each the spec's window.
  std::string bytes = ReadFile(tmp.Path("out/tokens.psk.d"));
  const std::string type = "(idx[64][seq: 8], idx[64][seq: 8])";
  ASSERT_EQ(bytes.size(), 4 + 2 + 4 + type.size() + 8 + 24 * 16);
  EXPECT_EQ(bytes.substr(0, 18 + type.size()), testing::HeaderBytes(1, type, 24));
  std::vector<int> tokens;
  {
    std::string text = ReadFile(TokensTxt());
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find_first_of(" \n", pos);
      if (end == std::string::npos) end = text.size();
      if (end > pos) tokens.push_back(std::stoi(text.substr(pos, end - pos)));
      pos = end + 1;
    }
  }
  ASSERT_EQ(tokens.size(), 200u);
  const size_t data = 18 + type.size();
  for (size_t k = 0; k < 24; ++k) {
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(static_cast<uint8_t>(bytes[data + 16 * k + i]), tokens[8 * k + i]);
      EXPECT_EQ(static_cast<uint8_t>(bytes[data + 16 * k + 8 + i]), tokens[8 * k + i + 1]);
    }
  }
}

TEST(PreskCliTest, StrideOneGivesEveryWindowAndTrailingTokensAreCounted) {
  TempDir tmp;
  WriteFile(tmp.Path("t.txt"), "0 1 2 3\n4 5 6\n");
  auto r = RunPresk({"data", "lm-windows", "--vocab", "7", "--seq", "3", "--stride", "1", "t.txt", "-o", "w.psk.d"},
                    tmp.dir().string());
  EXPECT_EQ(r.out, "presk data: wrote w.psk.d (4 windows of type (idx[7][seq: 3], idx[7][seq: 3]) from 7 tokens)\n");
  auto info = RunPresk({"data", "info", "w.psk.d", "--samples", "9"}, tmp.dir().string());
  EXPECT_NE(info.out.find("[3] ([3, 4, 5], [4, 5, 6])\n"), std::string::npos) << info.out;
  auto wide = RunPresk({"data", "lm-windows", "--vocab", "7", "--seq", "2", "--stride", "4", "t.txt", "-o", "x.psk.d"},
                       tmp.dir().string());
  EXPECT_EQ(wide.out, "presk data: wrote x.psk.d (2 windows of type (idx[7][seq: 2], idx[7][seq: 2]) from 7 tokens)\n");
  auto xi = RunPresk({"data", "info", "x.psk.d"}, tmp.dir().string());
  EXPECT_NE(xi.out.find("[1] ([4, 5], [5, 6])\n"), std::string::npos) << xi.out;
}

TEST(PreskCliTest, CharsAndEncodeAreCodePoints) {
  TempDir tmp;
  WriteFile(tmp.Path("t.txt"), "Hé là!\nçà\n");
  auto c = RunPresk({"data", "chars", "t.txt", "-o", "v.json"}, tmp.dir().string());
  EXPECT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.out, "presk data: wrote v.json (8 characters over 10 of text)\n");
  EXPECT_EQ(ReadFile(tmp.Path("v.json")), "[\"\\n\",\" \",\"!\",\"H\",\"l\",\"à\",\"ç\",\"é\"]\n");
  auto e = RunPresk({"data", "encode", "t.txt", "--vocab", "v.json", "-o", "tok.txt"}, tmp.dir().string());
  EXPECT_EQ(e.out, "presk data: wrote tok.txt (10 tokens over a vocabulary of 8)\n");
  EXPECT_EQ(ReadFile(tmp.Path("tok.txt")), "3 7 1 4 5 2 0\n6 5 0\n");
  WriteFile(tmp.Path("bad.txt"), "Hé\nl€\n");
  auto bad = RunPresk({"data", "encode", "bad.txt", "--vocab", "v.json", "-o", "bad_tokens.txt"}, tmp.dir().string());
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err, "presk data: error[E9004]: bad.txt: line 2: character '€' (U+20AC) is not in the vocabulary v.json\n");
  EXPECT_FALSE(std::filesystem::exists(tmp.Path("bad_tokens.txt")));
  WriteFile(tmp.Path("sub.json"), "[\"ab\", \"c\"]");
  auto sub = RunPresk({"data", "encode", "t.txt", "--vocab", "sub.json", "-o", "o.txt"}, tmp.dir().string());
  EXPECT_EQ(sub.status, 2);
  EXPECT_NE(sub.err.find("is not one character"), std::string::npos) << sub.err;
  // A vocabulary is an array of strings: nesting is refused while parsing, not walked.
  WriteFile(tmp.Path("deep.json"), std::string(100000, '[') + std::string(100000, ']'));
  auto deep = RunPresk({"data", "encode", "t.txt", "--vocab", "deep.json", "-o", "d.txt"}, tmp.dir().string());
  EXPECT_EQ(deep.status, 2);
  EXPECT_NE(deep.err.find("vocabulary deep.json is not a JSON array of strings (JSON nested deeper than 1 level"),
            std::string::npos) << deep.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.Path("d.txt")));
  WriteFile(tmp.Path("latin1.txt"), "caf\xe9\n");
  auto l1 = RunPresk({"data", "chars", "latin1.txt", "-o", "l.json"}, tmp.dir().string());
  EXPECT_EQ(l1.err, "presk data: error[E9004]: latin1.txt: line 1 (byte offset 3): not UTF-8 text\n");
  EXPECT_FALSE(std::filesystem::exists(tmp.Path("l.json")));
}

TEST(PreskCliTest, PackWithSpecMessagesAndSkippedLines) {
  TempDir tmp;
  WriteFile(tmp.Path("s.txt"), "-- a comment\n1 0.5 0.25\n\n  3 1.5 -2\n64 1 1\n");
  auto bad = RunPresk({"data", "pack", "--type", "(idx[64][], ℝ[x: 2])", "s.txt", "-o", "s.psk.d"}, tmp.dir().string());
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err, "presk data: error[E9004]: s.txt: line 5: 64 is not below 64\n");
  EXPECT_FALSE(std::filesystem::exists(tmp.Path("s.psk.d")));
  WriteFile(tmp.Path("s.txt"), "-- a comment\n1 0.5 0.25\n\n  3 1.5 -2\n");
  auto ok = RunPresk({"data", "pack", "--type", "(idx[64][], ℝ[x: 2])", "s.txt", "-o", "s.psk.d"}, tmp.dir().string());
  EXPECT_EQ(ok.out, "presk data: wrote s.psk.d (2 samples of type (idx[64][], ℝ[x: 2]))\n");
  auto info = RunPresk({"data", "info", "s.psk.d"}, tmp.dir().string());
  EXPECT_EQ(info.out,
            "type    (idx[64][], ℝ[x: 2])\ncount   2\nversion 1\nsample  17 bytes, 2 leaves\n"
            "[0] (1, [0.5, 0.25])\n[1] (3, [1.5, -2.0])\n");
  struct Case {
    const char* line;
    const char* err;
  };
  for (const Case& c : {Case{"1 0.5\n", "presk data: error[E9004]: e.txt: line 1: too few values: 2, a sample holds 3\n"},
                        Case{"1 2 3 4\n", "presk data: error[E9004]: e.txt: line 1: too many values: 4, a sample holds 3\n"},
                        Case{"x 1 2\n", "presk data: error[E9004]: e.txt: line 1: 'x' is not an index\n"},
                        Case{"1.5 1 2\n", "presk data: error[E9004]: e.txt: line 1: '1.5' is not an index\n"},
                        Case{"-1 1 2\n", "presk data: error[E9004]: e.txt: line 1: '-1' is not an index\n"},
                        Case{"1 1 two\n", "presk data: error[E9004]: e.txt: line 1: 'two' is not a real\n"}}) {
    WriteFile(tmp.Path("e.txt"), c.line);
    auto r = RunPresk({"data", "pack", "--type", "(idx[64][], ℝ[x: 2])", "e.txt", "-o", "e.psk.d"}, tmp.dir().string());
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.err, c.err);
    EXPECT_FALSE(std::filesystem::exists(tmp.Path("e.psk.d")));
  }
}

TEST(PreskCliTest, Version2F32AndBf16ReadBackToTheSameNumbers) {
  TempDir tmp;
  WriteFile(tmp.Path("r.txt"), "0.5 -1.25 3\n65536 0.0078125 -0\n");
  for (const char* enc : {"f32", "bf16", "f64"}) {
    std::string out = std::string(enc) + ".psk.d";
    auto p = RunPresk({"data", "pack", "--type", "ℝ[3]", "--encoding", enc, "r.txt", "-o", out}, tmp.dir().string());
    ASSERT_EQ(p.status, 0) << p.err;
    auto info = RunPresk({"data", "info", out}, tmp.dir().string());
    std::string expected_header = std::string(enc) == "f64"
                                      ? "type    ℝ[3]\ncount   2\nversion 1\nsample  24 bytes, 1 leaf\n"
                                      : "type    ℝ[3]\ncount   2\nversion 2\nencodings " + std::string(enc) +
                                            "\nsample  " + (std::string(enc) == "f32" ? "12" : "6") +
                                            " bytes, 1 leaf\n";
    EXPECT_EQ(info.out, expected_header + "[0] [0.5, -1.25, 3.0]\n[1] [65536.0, 0.0078125, -0.0]\n") << enc;
  }
  auto d = RunPresk({"data", "diff", "f64.psk.d", "bf16.psk.d"}, tmp.dir().string());
  EXPECT_EQ(d.status, 0) << d.out << d.err;
  EXPECT_EQ(d.out, "reals            6 values compared\n‖a − b‖₂         0.0\n‖a − b‖₂ / ‖a‖₂  0.0\n");
  // 0.1 is not a number of f32: refused, nothing written.
  WriteFile(tmp.Path("t.txt"), "0.1\n");
  auto r = RunPresk({"data", "pack", "--type", "ℝ[]", "--encoding", "f32", "t.txt", "-o", "t.psk.d"}, tmp.dir().string());
  EXPECT_EQ(r.err, "presk data: error[E9004]: t.txt: line 1: 0.1 is not a number of f32\n");
  EXPECT_FALSE(std::filesystem::exists(tmp.Path("t.psk.d")));
}

TEST(PreskCliTest, DiffPrintsNormsAndExitsOneOnDifferences) {
  TempDir tmp;
  WriteFile(tmp.Path("a.txt"), "3 0\n0 4\n");
  WriteFile(tmp.Path("b.txt"), "3 0\n0 4.5\n");
  RunPresk({"data", "pack", "--type", "ℝ[2]", "a.txt", "-o", "a.psk.d"}, tmp.dir().string());
  RunPresk({"data", "pack", "--type", "ℝ[2]", "b.txt", "-o", "b.psk.d"}, tmp.dir().string());
  auto d = RunPresk({"data", "diff", "a.psk.d", "b.psk.d"}, tmp.dir().string());
  EXPECT_EQ(d.status, 1);
  EXPECT_EQ(d.out, "reals            4 values compared\n‖a − b‖₂         0.5\n‖a − b‖₂ / ‖a‖₂  0.1\n");
  RunPresk({"data", "pack", "--type", "ℝ[x: 2]", "a.txt", "-o", "c.psk.d"}, tmp.dir().string());
  EXPECT_EQ(RunPresk({"data", "diff", "a.psk.d", "c.psk.d"}, tmp.dir().string()).status, 0);  // names are not checked
  WriteFile(tmp.Path("c.txt"), "1 2 3\n");
  RunPresk({"data", "pack", "--type", "ℝ[3]", "c.txt", "-o", "d.psk.d"}, tmp.dir().string());
  auto mismatch = RunPresk({"data", "diff", "a.psk.d", "d.psk.d"}, tmp.dir().string());
  EXPECT_EQ(mismatch.status, 2);
  EXPECT_EQ(mismatch.err, "presk data: error[E9005]: a.psk.d is of type ℝ[2], d.psk.d of type ℝ[3]\n");
}

TEST(PreskCliTest, ExportIsOneJsonArrayCheckedByPython) {
  TempDir tmp;
  WriteFile(tmp.Path("s.txt"), "1 0 0.5 -2 true\n2 1 1 1e300 false\n");
  auto p = RunPresk({"data", "pack", "--type", "(idx[3][2], (ℝ[rows: 1, cols: 2], bool[]))", "s.txt", "-o", "s.psk.d"},
                    tmp.dir().string());
  ASSERT_EQ(p.status, 0) << p.err;
  auto e = RunPresk({"data", "export", "s.psk.d", "-o", "s.json"}, tmp.dir().string());
  EXPECT_EQ(e.out, "presk data: wrote s.json (2 samples)\n");
  std::string check = "/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                      "assert d == [[[1, 0], [[[0.5, -2.0]], 1]], [[2, 1], [[[1.0, 1e300]], 0]]], d' " +
                      tmp.Path("s.json");
  EXPECT_EQ(std::system(check.c_str()), 0);
}

TEST(PreskCliTest, BatchesPrintsThePipeline) {
  TempDir tmp;
  std::filesystem::copy_file(TokensTxt(), tmp.Path("tokens.txt"));
  RunPresk({"data", "lm-windows", "--vocab", "64", "--seq", "8", "tokens.txt", "-o", "t.psk.d"}, tmp.dir().string());
  auto b = RunPresk({"data", "batches", "t.psk.d", "--batch", "5", "--shuffle", "7"}, tmp.dir().string());
  EXPECT_EQ(b.out, "11 12 19 9 15\n22 23 8 10 20\n14 17 0 2 13\n4 16 5 7 18\n");
  auto t = RunPresk({"data", "batches", "t.psk.d", "--batch", "10", "--take", "1"}, tmp.dir().string());
  EXPECT_EQ(t.out, "0 1 2 3 4 5 6 7 8 9\n");
  auto e1 = RunPresk({"data", "batches", "t.psk.d", "--batch", "24", "--shuffle", "7", "--epoch", "0"}, tmp.dir().string());
  EXPECT_EQ(e1.out, "11 12 19 9 15 22 23 8 10 20 14 17 0 2 13 4 16 5 7 18 21 3 1 6\n");
  auto r = RunPresk({"data", "batches", "t.psk.d", "--batch", "4", "--shuffle", "3", "--read"}, tmp.dir().string());
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("read 6 batches of 4 samples (384 bytes", 0), 0u) << r.out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Three shards of 7, 0 and 10 samples as one dataset (by pattern, by list, by manifest), split
// among 3 ranks: rank r prints the whole epoch's lines r, r + 3, ...; the last 8 mod 3 lines go to
// no rank, which a note on stderr says.
TEST(PreskCliTest, BatchesOfManyShardsSplitAmongRanks) {
  TempDir tmp;
  const std::string d = tmp.dir().string();
  std::string text[3];
  const int counts[3] = {7, 0, 10};
  for (int k = 0, next = 0; k < 3; ++k) {
    for (int i = 0; i < counts[k]; ++i) text[k] += std::to_string(next++) + "\n";
    WriteFile(tmp.Path("t" + std::to_string(k) + ".txt"), text[k]);
    auto p = RunPresk({"data", "pack", "--type", "idx[100][]", "t" + std::to_string(k) + ".txt", "-o",
                       "s" + std::to_string(k) + ".psk.d"}, d);
    ASSERT_EQ(p.status, 0) << p.err;
  }
  WriteFile(tmp.Path("train.json"), R"({"shards": ["s0.psk.d", "s1.psk.d", "s2.psk.d"]})");
  auto whole = RunPresk({"data", "batches", "s*.psk.d", "--batch", "2", "--shuffle", "5", "--epoch", "1"}, d);
  ASSERT_EQ(whole.status, 0) << whole.err;
  EXPECT_EQ(whole.err, "");
  const std::vector<std::string> all = Lines(whole.out);
  ASSERT_EQ(all.size(), 8u);
  auto listed = RunPresk({"data", "batches", "s0.psk.d", "s1.psk.d", "s2.psk.d", "--batch", "2", "--shuffle", "5",
                          "--epoch", "1"}, d);
  EXPECT_EQ(listed.out, whole.out);
  auto manifest = RunPresk({"data", "batches", "train.json", "--batch", "2", "--shuffle", "5", "--epoch", "1"}, d);
  EXPECT_EQ(manifest.out, whole.out);
  for (int r = 0; r < 3; ++r) {
    auto mine = RunPresk({"data", "batches", "train.json", "--batch", "2", "--shuffle", "5", "--epoch", "1", "--rank",
                          std::to_string(r), "--world-size", "3"}, d);
    ASSERT_EQ(mine.status, 0) << mine.err;
    EXPECT_EQ(Lines(mine.out), (std::vector<std::string>{all[r], all[r + 3]}));
    EXPECT_EQ(mine.err, "presk data: note: 2 of the epoch's 8 batches go to no rank (every rank takes 2 steps)\n");
    auto read = RunPresk({"data", "batches", "train.json", "--batch", "2", "--shuffle", "5", "--epoch", "1", "--rank",
                          std::to_string(r), "--world-size", "3", "--read"}, d);
    EXPECT_EQ(read.out.rfind("read 2 batches of 2 samples (4 bytes", 0), 0u) << read.out;
  }
  auto w1 = RunPresk({"data", "batches", "train.json", "--batch", "2", "--shuffle", "5", "--epoch", "1", "--rank", "1",
                      "--world-size", "3", "--worker", "1", "--workers", "2"}, d);
  EXPECT_EQ(Lines(w1.out), (std::vector<std::string>{all[4]}));
  auto w0 = RunPresk({"data", "batches", "train.json", "--batch", "2", "--shuffle", "5", "--epoch", "1", "--rank", "1",
                      "--world-size", "3", "--worker", "0", "--workers", "2"}, d);
  EXPECT_EQ(Lines(w0.out), (std::vector<std::string>{all[1]}));

  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--rank", "1"}, {"--world-size", "2"}, {"--rank", "2", "--world-size", "2"},
        {"--worker", "0"}, {"--rank", "0", "--world-size", "0"}}) {
    std::vector<std::string> args = {"data", "batches", "train.json", "--batch", "2"};
    args.insert(args.end(), bad.begin(), bad.end());
    auto e = RunPresk(args, d);
    EXPECT_EQ(e.status, 2);
    EXPECT_EQ(e.err.rfind("presk data: error: batches", 0) == 0 || e.err.rfind("presk data: error: rank", 0) == 0 ||
                  e.err.rfind("presk data: error: a world", 0) == 0,
              true)
        << e.err;
  }
  auto none = RunPresk({"data", "batches", "x*.psk.d", "--batch", "2"}, d);
  EXPECT_EQ(none.err, "presk data: error[E9002]: no file matches 'x*.psk.d'\n");
  auto mixed = RunPresk({"data", "pack", "--type", "idx[101][]", "t0.txt", "-o", "other.psk.d"}, d);
  ASSERT_EQ(mixed.status, 0);
  auto e5 = RunPresk({"data", "batches", "s0.psk.d", "other.psk.d", "--batch", "2"}, d);
  EXPECT_EQ(e5.err, "presk data: error[E9005]: other.psk.d holds samples of type idx[101][], s0.psk.d of type idx[100][]: "
                    "the shards of a dataset have one sample type\n");
}

TEST(PreskCliTest, EveryErrorCodeThroughTheBinary) {
  TempDir tmp;
  const std::string d = tmp.dir().string();
  WriteFile(tmp.Path("t.txt"), "1 2\n");
  // E9001: a symbolic dimension, a params type without its program.
  auto e1 = RunPresk({"data", "pack", "--type", "ℝ[T]", "t.txt", "-o", "o.psk.d"}, d);
  EXPECT_EQ(e1.err, "presk data: error[E9001]: type 'ℝ[T]', offset 4: symbolic dimension 'T' (every dimension must be "
                    "a literal)\n");
  WriteFile(tmp.Path("params.psk.d"), testing::HeaderBytes(1, "params MiniGPT", 1) + "opaque");
  auto info = RunPresk({"data", "info", "params.psk.d"}, d);
  EXPECT_EQ(info.status, 0);
  EXPECT_EQ(info.out, "type    params MiniGPT\ncount   1\nversion 1\nsample  params MiniGPT: its leaf layout needs the "
                      "program that declares it (open the file from the program, e.g. presk train)\n");
  auto ex = RunPresk({"data", "export", "params.psk.d", "-o", "p.json"}, d);
  EXPECT_EQ(ex.status, 2);
  EXPECT_EQ(ex.err.rfind("presk data: error[E9001]: params.psk.d: params MiniGPT", 0), 0u) << ex.err;
  // E9002: bad magic, an unreadable path.
  WriteFile(tmp.Path("notpskd"), "hello world");
  EXPECT_EQ(RunPresk({"data", "info", "notpskd"}, d).err,
            "presk data: error[E9002]: notpskd: bad magic (not a .psk.d file)\n");
  EXPECT_EQ(RunPresk({"data", "info", "missing.psk.d"}, d).err,
            "presk data: error[E9002]: cannot read missing.psk.d: No such file or directory\n");
  // E9003: truncated; a count of 2^60.
  WriteFile(tmp.Path("short.psk.d"), testing::HeaderBytes(1, "ℝ[]", 2) + std::string(8, '\0'));
  EXPECT_EQ(RunPresk({"data", "info", "short.psk.d"}, d).err,
            "presk data: error[E9003]: short.psk.d: truncated: the header claims 2 samples of 8 bytes, 8 bytes of "
            "data follow offset 23\n");
  WriteFile(tmp.Path("huge.psk.d"), testing::HeaderBytes(1, "ℝ[]", uint64_t{1} << 60));
  auto huge = RunPresk({"data", "export", "huge.psk.d", "-o", "h.json"}, d);
  EXPECT_EQ(huge.status, 2);
  EXPECT_EQ(huge.err.rfind("presk data: error[E9003]: huge.psk.d: truncated: the header claims 1152921504606846976", 0),
            0u);
  // E9004: a stored index at or above its bound.
  WriteFile(tmp.Path("oob.psk.d"), testing::HeaderBytes(1, "idx[5][]", 1) + "\x07");
  EXPECT_EQ(RunPresk({"data", "info", "oob.psk.d"}, d).err,
            "presk data: error[E9004]: oob.psk.d: sample 0, leaf 0, element 0: 7 is not below 5\n");
  // E9005: trailing bytes; leaf count disagreeing with the type.
  WriteFile(tmp.Path("trail.psk.d"), testing::HeaderBytes(1, "idx[5][]", 1) + "\x01\x02");
  EXPECT_EQ(RunPresk({"data", "info", "trail.psk.d"}, d).err,
            "presk data: error[E9005]: trail.psk.d: 1 bytes after the last of 1 samples (offset 27)\n");
  WriteFile(tmp.Path("leaves.psk.d"), testing::HeaderBytes(2, "idx[5][]", 1, {0, 0}) + "\x01");
  EXPECT_EQ(RunPresk({"data", "info", "leaves.psk.d"}, d).status, 2);
  EXPECT_NE(RunPresk({"data", "info", "leaves.psk.d"}, d).err.find("error[E9005]"), std::string::npos);
  // Usage errors: exit 2, no code.
  auto usage = RunPresk({"data", "lm-windows", "--vocab", "64", "t.txt", "-o", "x.psk.d"}, d);
  EXPECT_EQ(usage.status, 2);
  EXPECT_EQ(usage.err.rfind("presk data: error: lm-windows: missing --seq\n", 0), 0u) << usage.err;
  EXPECT_EQ(RunPresk({"data", "frobnicate"}, d).status, 2);
  // A type whose one sample is 8 TB is refused before any allocation.
  auto big = RunPresk({"data", "pack", "--type", "ℝ[1000000000000]", "t.txt", "-o", "x.psk.d"}, d);
  EXPECT_EQ(big.status, 2);
  EXPECT_NE(big.err.find("kMaxEncodedSampleBytes"), std::string::npos) << big.err;
  // Nothing left behind by any of these.
  for (const char* name : {"o.psk.d", "p.json", "h.json", "x.psk.d"}) EXPECT_FALSE(std::filesystem::exists(tmp.Path(name)));
  for (const auto& entry : std::filesystem::directory_iterator(tmp.dir())) {
    EXPECT_EQ(entry.path().filename().string().find(".trove-tmp"), std::string::npos) << entry.path();
  }
}

TEST(PreskCliTest, FailedLmWindowsLeavesNoFileAndKeepsAnOldOne) {
  TempDir tmp;
  WriteFile(tmp.Path("t.txt"), "1 2 3 4 5 6 7 8 9 10\n1 2 99\n");
  WriteFile(tmp.Path("old.psk.d"), "previous contents");
  auto r = RunPresk({"data", "lm-windows", "--vocab", "64", "--seq", "2", "t.txt", "-o", "old.psk.d"}, tmp.dir().string());
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "presk data: error[E9004]: t.txt: line 2: 99 is not below 64\n");
  EXPECT_EQ(ReadFile(tmp.Path("old.psk.d")), "previous contents");
  WriteFile(tmp.Path("w.txt"), "1 2 x3\n");
  auto w = RunPresk({"data", "lm-windows", "--vocab", "64", "--seq", "2", "w.txt", "-o", "n.psk.d"}, tmp.dir().string());
  EXPECT_EQ(w.err, "presk data: error[E9004]: w.txt: line 1: 'x3' is not an index\n");
  EXPECT_FALSE(std::filesystem::exists(tmp.Path("n.psk.d")));
}

TEST(PreskCliTest, EachCommandHasItsHelpAndShortUsageErrors) {
  TempDir tmp;
  auto help = RunPresk({"data", "chars", "--help"}, tmp.dir().string());
  EXPECT_EQ(help.status, 0);
  EXPECT_EQ(help.out.rfind("usage: presk data chars INPUT.txt -o VOCAB.json\n", 0), 0u) << help.out;
  EXPECT_EQ(help.out.find("lm-windows"), std::string::npos);  // that command's help only
  EXPECT_EQ(RunPresk({"data", "help", "batches"}, tmp.dir().string()).out.rfind("usage: presk data batches", 0), 0u);
  auto usage = RunPresk({"data", "chars", "in.txt"}, tmp.dir().string());
  EXPECT_EQ(usage.status, 2);
  EXPECT_EQ(usage.err, "presk data: error: chars: missing -o OUTPUT\n(run 'presk data chars --help' for its usage)\n");
  auto typo = RunPresk({"data", "infp", "x.psk.d"}, tmp.dir().string());
  EXPECT_EQ(typo.err, "presk data: error: unknown command 'infp' (did you mean 'info'?)\n"
                      "(run 'presk data --help' for the commands)\n");
  auto option = RunPresk({"data", "info", "x.psk.d", "--sample", "2"}, tmp.dir().string());
  EXPECT_EQ(option.err.rfind("presk data: error: info: unknown option --sample (did you mean '--samples'?)\n", 0), 0u)
      << option.err;
}

TEST(PreskCliTest, TextOutputsGoToStdoutWithDashO) {
  TempDir tmp;
  WriteFile(tmp.Path("t.txt"), "ab\n");
  auto chars = RunPresk({"data", "chars", "t.txt", "-o", "-"}, tmp.dir().string());
  EXPECT_EQ(chars.status, 0) << chars.err;
  EXPECT_EQ(chars.out, "[\"\\n\",\"a\",\"b\"]\n");
  EXPECT_EQ(chars.err, "presk data: wrote stdout (3 characters over 3 of text)\n");
  RunPresk({"data", "chars", "t.txt", "-o", "v.json"}, tmp.dir().string());
  auto tokens = RunPresk({"data", "encode", "t.txt", "--vocab", "v.json", "-o", "-"}, tmp.dir().string());
  EXPECT_EQ(tokens.out, "1 2 0\n");
  WriteFile(tmp.Path("s.txt"), "1 0.5\n");
  ASSERT_EQ(RunPresk({"data", "pack", "--type", "(idx[2][], ℝ[])", "s.txt", "-o", "s.psk.d"}, tmp.dir().string()).status, 0);
  EXPECT_EQ(RunPresk({"data", "export", "s.psk.d", "-o", "-"}, tmp.dir().string()).out, "[\n[1, 0.5]\n]\n");
  auto binary = RunPresk({"data", "pack", "--type", "ℝ[]", "s.txt", "-o", "-"}, tmp.dir().string());
  EXPECT_EQ(binary.status, 2);
  EXPECT_NE(binary.err.find("-o - is for text outputs"), std::string::npos) << binary.err;
}

TEST(PreskCliTest, RealIsSpelledRorRealInAscii) {
  TempDir tmp;
  WriteFile(tmp.Path("s.txt"), "1 0.5 2\n");
  for (const char* type : {"(idx[4][], R[2])", "(idx[4][], real[2])", "(idx[4][], ℝ[2])"}) {
    auto p = RunPresk({"data", "pack", "--type", type, "s.txt", "-o", "s.psk.d"}, tmp.dir().string());
    ASSERT_EQ(p.status, 0) << type << p.err;
    // The header says ℝ whatever was typed: other readers of the format parse it.
    EXPECT_EQ(p.out, "presk data: wrote s.psk.d (1 sample of type (idx[4][], ℝ[2]))\n") << type;
    auto info = RunPresk({"data", "info", "s.psk.d"}, tmp.dir().string());
    EXPECT_EQ(info.out.rfind("type    (idx[4][], ℝ[2])\n", 0), 0u) << info.out;
  }
  auto open = RunPresk({"data", "pack", "--type", "ℝ[…]", "s.txt", "-o", "x.psk.d"}, tmp.dir().string());
  EXPECT_NE(open.err.find("an open prefix"), std::string::npos) << open.err;
}

TEST(PreskCliTest, BatchesSaysWhenNoBatchFits) {
  TempDir tmp;
  WriteFile(tmp.Path("s.txt"), "1\n2\n3\n");
  ASSERT_EQ(RunPresk({"data", "pack", "--type", "idx[4][]", "s.txt", "-o", "s.psk.d"}, tmp.dir().string()).status, 0);
  auto b = RunPresk({"data", "batches", "s.psk.d", "--batch", "5000"}, tmp.dir().string());
  EXPECT_EQ(b.status, 0);
  EXPECT_EQ(b.out, "");
  EXPECT_EQ(b.err, "presk data: note: no batch: --batch 5000 is more than the 3 samples of s.psk.d "
                   "(an incomplete batch is dropped)\n");
  EXPECT_EQ(RunPresk({"data", "batches", "s.psk.d", "--batch", "3"}, tmp.dir().string()).err, "");
}

}  // namespace
}  // namespace trove::pskd
