// The GGUF reader, verify and scan on files built here byte by byte: every attack shape of
// issue 27 (counts x sizes, wrapping sums, nbytes of block types, alignment, n_dims, dimension 0,
// gigabyte strings and arrays declared, deep nesting, data outside the file, truncation at every
// field); tests/python/test_gguf.py checks real files against an independent reader.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "expect_error.h"
#include "core/ggml_blocks.h"
#include "formats/gguf/gguf_format.h"
#include "formats/gguf/gguf_layout.h"
#include "trove/element_codec.h"
#include "trove/tensor.h"

namespace trove {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/gguf_test_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name;
}

// A GGUF writer for tests: fields appended in order, in either byte order and version.
class Gguf {
 public:
  explicit Gguf(uint32_t version = 3, bool big = false) : version_(version), big_(big) {}

  Gguf& Raw(const std::string& bytes) { out_ += bytes; return *this; }
  Gguf& U8(uint8_t v) { out_ += static_cast<char>(v); return *this; }
  Gguf& U32(uint32_t v) { return Int(v, 4); }
  Gguf& U64(uint64_t v) { return Int(v, 8); }
  Gguf& Count(uint64_t v) { return version_ == 1 ? U32(static_cast<uint32_t>(v)) : U64(v); }
  Gguf& Str(const std::string& s) { Count(s.size()); out_ += s; return *this; }
  Gguf& F32(float f) { uint32_t b; std::memcpy(&b, &f, 4); return U32(b); }

  Gguf& Header(uint64_t n_tensors, uint64_t n_kv) {
    out_ += "GGUF";
    U32(version_);
    Count(n_tensors);
    return Count(n_kv);
  }
  Gguf& KvStr(const std::string& key, const std::string& value) { Str(key); U32(8); return Str(value); }
  Gguf& KvU32(const std::string& key, uint32_t value) { Str(key); U32(4); return U32(value); }
  Gguf& Info(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    Str(name);
    U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) version_ == 1 ? U32(static_cast<uint32_t>(d)) : U64(d);
    U32(type);
    return U64(offset);
  }
  Gguf& Pad(size_t alignment = 32) { while (out_.size() % alignment) out_ += '\0'; return *this; }
  Gguf& Data(const std::string& bytes) { out_ += bytes; return *this; }
  const std::string& bytes() const { return out_; }
  size_t size() const { return out_.size(); }

 private:
  Gguf& Int(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += static_cast<char>(big_ ? (v >> (8 * (n - 1 - i))) & 0xff : (v >> (8 * i)) & 0xff);
    return *this;
  }
  uint32_t version_;
  bool big_;
  std::string out_;
};

std::string Floats(std::initializer_list<float> values) {
  std::string out;
  for (float f : values) out.append(reinterpret_cast<const char*>(&f), 4);
  return out;
}

std::shared_ptr<MappedFile> FileOf(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return MappedFile::Open(path);
}

Document Read(const std::string& bytes) { return ReadGguf(FileOf("f.gguf", bytes), {}); }

void ExpectGgufError(const std::string& bytes, ErrorCode code, const std::string& needle) {
  ExpectError([&] { Read(bytes); }, code, needle);
}

// A small valid file: two F32 tensors and a Q8_0 one.
Gguf Small(uint32_t version = 3, bool big = false) {
  Gguf g(version, big);
  g.Header(3, 3).KvStr("general.architecture", "llama").KvU32("llama.context_length", 4096);
  g.KvU32("general.quantization_version", 2);
  g.Info("a", {3, 2}, 0, 0).Info("b", {2}, 0, 32).Info("q", {32, 2}, 8, 64).Pad();
  std::string a = Floats({1, 2, 3, 4, 5, 6}), b = Floats({7, 8});
  if (big) {
    for (std::string* s : {&a, &b})
      for (size_t i = 0; i < s->size(); i += 4) std::swap((*s)[i], (*s)[i + 3]), std::swap((*s)[i + 1], (*s)[i + 2]);
  }
  a.resize(32, '\0');
  b.resize(32, '\0');
  g.Data(a).Data(b).Data(std::string(68, '\x01'));
  return g;
}

TEST(GgufReader, ReadsTensorsInTorchOrderWithRawBlocks) {
  const Document doc = Read(Small().bytes());
  ASSERT_EQ(doc.tensors.size(), 3u);
  const TensorView& a = *doc.FindTensor("a")->view;
  EXPECT_EQ(a.dtype, DType::kFloat32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.At<float>(1, 0), 4.0f);
  const TensorView& q = *doc.FindTensor("q")->view;
  EXPECT_EQ(q.dtype, DType::kGgmlQ8_0);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{2, 34}));
  EXPECT_EQ(q.nbytes(), 68u);
  EXPECT_EQ(*doc.Property("architecture"), "llama");
  EXPECT_EQ(*doc.Property("context length"), "4,096");
  EXPECT_EQ(*doc.Property("parameter count"), "72");
  EXPECT_EQ(Read(Gguf().Header(1, 0).Info("f", {2}, 0, 0).Pad().Data(Floats({1, 2})).bytes()).Property("parameter count"), nullptr);
  EXPECT_EQ(*doc.Property("quantization mix"), "F32 2 tensors (32 bytes), Q8_0 1 tensor (68 bytes)");
}

TEST(GgufReader, ReadsVersionsOneTwoAndBigEndian) {
  for (uint32_t version : {1u, 2u, 3u}) {
    const Document doc = Read(Small(version).bytes());
    EXPECT_EQ(*doc.Property("version"), std::to_string(version));
    EXPECT_EQ(doc.FindTensor("b")->view->At<float>(1), 8.0f);
  }
  const Document big = Read(Small(3, true).bytes());
  EXPECT_EQ(*big.Property("byteorder"), "big");
  EXPECT_EQ(big.FindTensor("a")->view->At<float>(1, 2), 6.0f);
}

TEST(GgufReader, SummarisesLongArraysAndNestsArrays) {
  Gguf g;
  g.Header(0, 3).KvStr("general.architecture", "x");
  g.Str("tokenizer.ggml.tokens").U32(9).U32(8).Count(10);
  for (int i = 0; i < 10; ++i) g.Str("t" + std::to_string(i));
  g.Str("nested").U32(9).U32(9).Count(2);
  g.U32(4).Count(2).U32(1).U32(2);
  g.U32(4).Count(1).U32(3);
  const Document doc = Read(g.bytes());
  EXPECT_EQ(*doc.Property("tokenizer.ggml.tokens"), "10 strings");
  EXPECT_EQ(*doc.Property("vocabulary size"), "10");
  EXPECT_EQ(*doc.Property("nested"), "[[1, 2], [3]]");
}

TEST(GgufReader, ReadsTheObjectExperimentAsItsMembersNames) {
  // gguf-py's writer wrote type 13 in early 2024: the member names, as an array of strings.
  Gguf g;
  g.Header(0, 2).Str("dict1").U32(13).U32(8).Count(2).Str("a").Str("b").KvU32(".dict1.a", 1);
  const auto file = FileOf("o.gguf", g.bytes());
  EXPECT_EQ(*ReadGguf(file, {}).Property("dict1"), "object [\"a\", \"b\"]");
  CheckReport report;
  VerifyGguf(*file, report);
  ASSERT_FALSE(report.findings.empty());
  bool named = false;
  for (const Finding& f : report.findings) named |= f.entry == "dict1" && f.message.find("an object") != std::string::npos;
  EXPECT_TRUE(named);
}

TEST(GgufReader, AcceptsDimensionZeroAndZeroDimensions) {
  Gguf g;
  g.Header(2, 0).Info("empty", {0, 4}, 0, 0).Info("scalar", {}, 0, 0).Pad().Data(Floats({9}));
  const Document doc = Read(g.bytes());
  EXPECT_EQ(doc.FindTensor("empty")->view->numel(), 0);
  EXPECT_EQ(doc.FindTensor("scalar")->view->shape.size(), 0u);
  EXPECT_EQ(TensorView::As<float>(doc.FindTensor("scalar")->view->Element({})), 9.0f);
}

TEST(GgufHostile, RefusesCountsLargerThanTheFile) {
  Gguf kv;
  kv.Header(0, uint64_t{1} << 19);  // below the cap, far above what 24 bytes hold
  ExpectGgufError(kv.bytes(), ErrorCode::kCorrupt, "metadata count 524,288 cannot fit");
  Gguf tensors;
  tensors.Header(uint64_t{1} << 62, 0);  // count x sizeof would wrap
  ExpectGgufError(tensors.bytes(), ErrorCode::kLimit, "tensor count 4,611,686,018,427,387,904 exceeds the cap");
  Gguf after_kv;  // fits the file, not what is left of it after the metadata
  after_kv.Header(3, 1).KvStr("k", std::string(60, 'v'));
  ExpectGgufError(after_kv.bytes(), ErrorCode::kCorrupt, "tensor count 3 cannot fit in the 0 bytes left");
}

TEST(GgufHostile, RefusesGigabyteStringsAndArraysDeclared) {
  Gguf s;
  s.Header(0, 1).Str("k").U32(8).Count(uint64_t{1} << 30);
  ExpectGgufError(s.bytes(), ErrorCode::kLimit, "string length 1,073,741,824 exceeds the cap of 67,108,864");
  Gguf a;
  a.Header(0, 1).Str("k").U32(9).U32(0).Count(uint64_t{1} << 30);
  ExpectGgufError(a.bytes(), ErrorCode::kLimit, "array of 1,073,741,824 elements exceeds the cap");
  Gguf fits;  // under the cap, over the file
  fits.Header(0, 1).Str("k").U32(9).U32(6).Count(1000);
  ExpectGgufError(fits.bytes(), ErrorCode::kCorrupt, "1,000 f32 elements cannot fit");
  Gguf strings;  // each string needs its length field
  strings.Header(0, 1).Str("k").U32(9).U32(8).Count(1000);
  ExpectGgufError(strings.bytes(), ErrorCode::kCorrupt, "1,000 string elements cannot fit");
}

TEST(GgufHostile, RefusesDeeplyNestedArrays) {
  Gguf g;
  g.Header(0, 1).Str("deep").U32(9);
  for (int i = 0; i < 100; ++i) g.U32(9).Count(1);
  ExpectGgufError(g.bytes(), ErrorCode::kLimit, "nested deeper than the cap of 8 levels");
}

TEST(GgufHostile, RefusesBadKeysTypesAndBools) {
  Gguf empty;
  empty.Header(0, 1).Str("").U32(4).U32(1);
  ExpectGgufError(empty.bytes(), ErrorCode::kCorrupt, "empty key");
  Gguf dup;
  dup.Header(0, 2).KvU32("k", 1).KvU32("k", 2);
  ExpectGgufError(dup.bytes(), ErrorCode::kCorrupt, "duplicate key 'k'");
  Gguf type;
  type.Header(0, 1).Str("k").U32(14).U32(0);
  ExpectGgufError(type.bytes(), ErrorCode::kCorrupt, "value type 14");
  Gguf b;
  b.Header(0, 1).Str("k").U32(7).U8(2);
  ExpectGgufError(b.bytes(), ErrorCode::kCorrupt, "bool value 2");
  Gguf key;
  key.Header(0, 1).Count(70000).Raw(std::string(64, 'k'));
  ExpectGgufError(key.bytes(), ErrorCode::kLimit, "key length 70,000 exceeds the cap of 65,535");
}

TEST(GgufHostile, RefusesBadAlignments) {
  for (uint32_t a : {0u, 3u, 48u, 0x80000000u, 2u << 20}) {
    Gguf g;
    g.Header(0, 1).KvU32("general.alignment", a);
    ExpectGgufError(g.bytes(), ErrorCode::kCorrupt, "general.alignment " + std::to_string(a) + " is not a power of two");
  }
  Gguf wrong;
  wrong.Header(0, 1).Str("general.alignment").U32(5).U32(32);
  ExpectGgufError(wrong.bytes(), ErrorCode::kCorrupt, "general.alignment is a i32, not a u32");
  Gguf ok;
  ok.Header(1, 1).KvU32("general.alignment", 64).Info("t", {1}, 0, 0).Pad(64).Data(Floats({1}));
  EXPECT_EQ(*Read(ok.bytes()).Property("alignment"), "64");
}

TEST(GgufHostile, RefusesBadTensorInfos) {
  Gguf dims;
  dims.Header(1, 0).Info("t", {1, 1, 1, 1, 1}, 0, 0);
  ExpectGgufError(dims.bytes(), ErrorCode::kCorrupt, "n_dims 5 exceeds 4");
  Gguf neg;
  neg.Header(1, 0).Info("t", {uint64_t{1} << 63}, 0, 0);
  ExpectGgufError(neg.bytes(), ErrorCode::kCorrupt, "is negative");
  Gguf wrap;  // INT64_MAX x 2 passed a check once (llama.cpp#27203)
  wrap.Header(1, 0).Info("t", {uint64_t{INT64_MAX}, 2}, 0, 0);
  ExpectGgufError(wrap.bytes(), ErrorCode::kCorrupt, "product of its dimensions overflows");
  Gguf nbytes;  // the values fit int64, the bytes of a block type do not (CVE-2026-33298)
  nbytes.Header(1, 0).Info("t", {uint64_t{15} << 51, uint64_t{1} << 8}, 15, 0);  // 0.94 x 2^63 values, 1.07 x 2^63 bytes
  ExpectGgufError(nbytes.bytes(), ErrorCode::kCorrupt, "byte count overflows");
  Gguf block;
  block.Header(1, 0).Info("t", {33}, 2, 0);
  ExpectGgufError(block.bytes(), ErrorCode::kCorrupt, "ne[0] = 33 is not a multiple of Q4_0's block of 32");
  Gguf type;
  type.Header(1, 0).Info("t", {1}, 4, 0);
  ExpectGgufError(type.bytes(), ErrorCode::kUnsupported, "ggml type 4 is not one ggml reads");
  Gguf name;
  name.Header(1, 0).Info(std::string(64, 'n'), {1}, 0, 0);
  ExpectGgufError(name.bytes(), ErrorCode::kLimit, "name length 64 exceeds the cap of 63");
  Gguf dup;
  dup.Header(2, 0).Info("t", {1}, 0, 0).Info("t", {1}, 0, 32).Pad().Data(std::string(64, '\0'));
  ExpectGgufError(dup.bytes(), ErrorCode::kCorrupt, "duplicate tensor name 't'");
  Gguf misaligned;
  misaligned.Header(1, 0).Info("t", {1}, 0, 4).Pad().Data(std::string(64, '\0'));
  ExpectGgufError(misaligned.bytes(), ErrorCode::kCorrupt, "data offset 4 is not a multiple of the alignment 32");
}

TEST(GgufHostile, RefusesTensorDataOutsideTheFileOrOverlapping) {
  Gguf outside;
  outside.Header(1, 0).Info("t", {1024}, 0, 0).Pad().Data(Floats({1}));
  ExpectGgufError(outside.bytes(), ErrorCode::kCorrupt, "tensor 't': its 4,096 bytes at data offset 0 lie outside the data section (4 bytes");
  Gguf wraps;  // offset + bytes wraps to a small number
  wraps.Header(1, 0).Info("t", {8}, 0, ~uint64_t{31}).Pad().Data(std::string(64, '\0'));
  ExpectGgufError(wraps.bytes(), ErrorCode::kCorrupt, "lie outside the data section");
  Gguf overlap;
  overlap.Header(2, 0).Info("a", {16}, 0, 0).Info("b", {8}, 0, 32).Pad().Data(std::string(96, '\0'));
  ExpectGgufError(overlap.bytes(), ErrorCode::kCorrupt, "tensor 'b' (data offset 32) overlaps tensor 'a'");
  Gguf no_data;  // the data section would start past the end
  no_data.Header(1, 0).Info("t", {0}, 0, 0);
  no_data.Raw("x");
  ExpectGgufError(no_data.bytes(), ErrorCode::kCorrupt, "the data section would start at");
}

TEST(GgufHostile, TruncationAtEveryByteIsAnErrorNamingAField) {
  const std::string full = Small().bytes();
  size_t errors = 0;
  for (size_t n = 0; n < full.size(); ++n) {
    try {
      Read(full.substr(0, n));
      ADD_FAILURE() << "a file cut at " << n << " bytes was read";
    } catch (const Error& e) {
      ++errors;
      EXPECT_EQ(e.code(), ErrorCode::kCorrupt) << n << ": " << e.message();
      const bool names_field = e.message().find("magic") != std::string::npos || e.message().find("count") != std::string::npos ||
                               e.message().find("key") != std::string::npos || e.message().find("value") != std::string::npos ||
                               e.message().find("tensor") != std::string::npos || e.message().find("n_dims") != std::string::npos ||
                               e.message().find("ne ") != std::string::npos || e.message().find("type") != std::string::npos ||
                               e.message().find("offset") != std::string::npos || e.message().find("version") != std::string::npos ||
                               e.message().find("data section") != std::string::npos;
      EXPECT_TRUE(names_field) << n << ": " << e.message();
    }
  }
  EXPECT_EQ(errors, full.size());
  EXPECT_NO_THROW(Read(full));
}

TEST(GgufHostile, SixByteFileIsRefusedClearly) {
  ExpectGgufError(std::string("GGUF\x02\x00", 6), ErrorCode::kCorrupt, "a GGUF file of 6 bytes: the magic and version need 8");
  ExpectGgufError(Gguf(7).Header(0, 0).bytes(), ErrorCode::kUnsupported, "GGUF version 7");
  ExpectGgufError("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 4\n", ErrorCode::kCorrupt,
                  "a Git LFS pointer, not the model");
  ExpectGgufError("PK\x03\x04 and more bytes", ErrorCode::kCorrupt, "magic is not \"GGUF\"");
}

TEST(GgufVerify, ReportsTrailingBytesAndGaps) {
  Gguf g;
  g.Header(2, 1).KvStr("general.architecture", "x").Info("a", {1}, 0, 0).Info("b", {1}, 0, 64).Pad();
  g.Data(std::string(68, '\0')).Data(std::string(100, '\0'));
  const auto file = FileOf("v.gguf", g.bytes());
  CheckReport report;
  VerifyGguf(*file, report);
  std::string all;
  for (const Finding& f : report.findings) all += f.message + "\n";
  EXPECT_NE(all.find("32 unused bytes before this tensor's data"), std::string::npos) << all;
  EXPECT_NE(all.find("100 bytes after the last tensor's data"), std::string::npos) << all;
  CheckReport clean;
  VerifyGguf(*FileOf("c.gguf", Small().bytes()), clean);
  for (const Finding& f : clean.findings) EXPECT_NE(f.severity, Severity::kMedium) << f.message;
}

TEST(GgufScan, FlagsTemplatesThatLeaveTheSandboxAndNotOrdinaryOnes) {
  const std::string ordinary =
      "{% set ns = namespace(found=false) %}{% for message in messages %}{% if message['role'] == 'system' %}"
      "{{ '<|system|>\\n' + message['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
      " system prompt: import os is just text here";
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"{{ ''.__class__.__mro__[1].__subclasses__() }}", "__class__ (a dunder attribute)"},
      {"{{ cycler.__init__.__globals__.os.popen('id').read() }}", "cycler"},
      {"{{ joiner.__init__ }}", "joiner"},
      {"{{ namespace.__init__ }}", "namespace.<attribute>"},
      {"{{ x|attr('__globals__') }}", "'__globals__' (a dunder name in a string)"},
      {"{% import 'os' as os %}", "import"},
      {"{{ lipsum.__globals__['os'].popen('id') }}", "lipsum"},
  };
  auto scan = [&](const std::string& key, const std::string& text) {
    Gguf g;
    g.Header(0, 2).KvStr("general.architecture", "x").KvStr(key, text);
    CheckReport report;
    ScanGguf(*FileOf("s.gguf", g.bytes()), report);
    return report;
  };
  EXPECT_TRUE(scan("tokenizer.chat_template", ordinary).findings.empty());
  for (const auto& [text, needle] : hostile) {
    const CheckReport report = scan("tokenizer.chat_template", text);
    ASSERT_EQ(report.findings.size(), 1u) << text;
    EXPECT_EQ(report.findings[0].severity, Severity::kHigh);
    EXPECT_EQ(report.findings[0].entry, "tokenizer.chat_template");
    EXPECT_NE(report.findings[0].message.find(needle), std::string::npos) << report.findings[0].message;
  }
  // Any Jinja-looking string, not only the template key.
  EXPECT_EQ(scan("general.description", "{{ self.__init__ }}").findings.size(), 1u);
  EXPECT_TRUE(scan("general.description", "self and os, no braces").findings.empty());
}

TEST(GgufLayout, ReadsTheDraftLayout) {
  // July 2023: keys and tensor-info fields typed, each tensor info padded to the alignment.
  Gguf g(1);
  g.Raw("FUGG").U32(1).U32(1).U32(1);
  g.U32(8).Str("general.architecture").U32(8).Str("llama");
  g.U32(8).Str("t").U32(5).U32(1).U32(5).U32(2).U32(5).U32(0).U64(0).Pad();
  g.Data(Floats({1.5f, 2.5f}));
  const Document doc = Read(g.bytes());
  EXPECT_EQ(doc.FindTensor("t")->view->At<float>(1), 2.5f);
  EXPECT_NE(doc.Property("layout"), nullptr);
}

TEST(GgmlDequantize, HalfScaleIsHalfToDoubleForEveryBitPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = static_cast<float>(HalfToDouble(static_cast<uint16_t>(h)));
    const float got = HalfScale(static_cast<uint16_t>(h));
    uint32_t a, b;
    std::memcpy(&a, &want, 4);
    std::memcpy(&b, &got, 4);
    ASSERT_EQ(a, b) << "fp16 bits " << h;
  }
}

// The run-time chosen kernels (AVX2 where the CPU has it) against the portable scalar code, bit
// for bit, over random blocks: random fp16 scales include NaN, inf and subnormals (1 in 32 each),
// and the first blocks get them for sure.
TEST(GgmlDequantize, ChosenKernelsAreBitForBitThePortableCode) {
  std::mt19937 random(27);
  const uint16_t special[] = {0x7C00, 0xFC00, 0x7E01, 0xFD00, 0x0001, 0x83FF, 0x0000, 0x8000, 0x7BFF};
  for (const DType dtype : {DType::kGgmlQ4_0, DType::kGgmlQ8_0, DType::kGgmlQ4_K, DType::kGgmlQ6_K, DType::kGgmlQ5_K,
                            DType::kGgmlQ2_K, DType::kGgmlQ3_K, DType::kGgmlIQ4_XS}) {
    const DTypeInfo& info = Info(dtype);
    constexpr uint64_t kBlocks = 3000;
    std::vector<uint8_t> blocks(kBlocks * info.block_bytes);
    for (uint8_t& b : blocks) b = static_cast<uint8_t>(random());
    // Where each type keeps its fp16 scales: Q4_0/Q8_0/Q4_K/Q5_K/IQ4_XS at 0 (and Q4_K/Q5_K's
    // dmin at 2), Q6_K at 208, Q2_K at 80 and 82, Q3_K at 108.
    const size_t at = dtype == DType::kGgmlQ6_K ? 208 : dtype == DType::kGgmlQ2_K ? 80 : dtype == DType::kGgmlQ3_K ? 108 : 0;
    for (size_t i = 0; i < std::size(special); ++i) {
      blocks[i * info.block_bytes + at] = static_cast<uint8_t>(special[i]);
      blocks[i * info.block_bytes + at + 1] = static_cast<uint8_t>(special[i] >> 8);
    }
    std::vector<float> chosen(kBlocks * info.block_values), portable(chosen.size());
    DequantizeBlocks(dtype, blocks.data(), kBlocks, chosen.data());
    DequantizeBlocksPortable(dtype, blocks.data(), kBlocks, portable.data());
    for (size_t i = 0; i < chosen.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &chosen[i], 4);
      std::memcpy(&b, &portable[i], 4);
      ASSERT_EQ(a, b) << Name(dtype) << " value " << i << " of block " << i / info.block_values;
    }
  }
}

TEST(GgmlDequantize, Q8_0AndQ4_0ByHandAndOthersRefused) {
  // Q8_0: d = 0.5 (fp16 0x3800), quants -2, 3, 0...; Q4_0: d = 2, nibbles 0x1F: 15 - 8 low, 1 - 8 high.
  std::string q8("\x00\x38", 2), q4("\x00\x40", 2);
  q8 += std::string("\xfe\x03", 2) + std::string(30, '\0');
  q4 += std::string(16, '\x1f');
  float out[32];
  DequantizeBlocks(DType::kGgmlQ8_0, reinterpret_cast<const uint8_t*>(q8.data()), 1, out);
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[1], 1.5f);
  EXPECT_EQ(out[31], 0.0f);
  DequantizeBlocks(DType::kGgmlQ4_0, reinterpret_cast<const uint8_t*>(q4.data()), 1, out);
  EXPECT_EQ(out[0], 14.0f);
  EXPECT_EQ(out[16], -14.0f);
  EXPECT_FALSE(CanDequantizeBlocks(DType::kGgmlIQ2_XXS));
  ExpectError([&] { DequantizeBlocks(DType::kGgmlIQ2_XXS, nullptr, 0, out); }, ErrorCode::kUnsupported, "dequantizing ggml_iq2_xxs");
  // Through a file: chunks of whole blocks, every value once.
  Gguf g;
  g.Header(1, 0).Info("q", {64}, 8, 0).Pad().Data(q8 + q8);
  const Document doc = Read(g.bytes());
  const TensorView values = CastView(*doc.FindTensor("q")->view, DType::kFloat32);
  EXPECT_EQ(values.shape, std::vector<int64_t>{64});
  std::vector<float> all;
  values.ForEachChunk([&](const uint8_t* p, size_t n) {
    const size_t at = all.size();
    all.resize(at + n / 4);
    std::memcpy(all.data() + at, p, n);
  }, 1);
  ASSERT_EQ(all.size(), 64u);
  EXPECT_EQ(all[33], 1.5f);
  EXPECT_EQ(values.At<float>(33), 1.5f);  // one element: its block read in place
  EXPECT_EQ(values.At<float>(31), 0.0f);
  // An element reader (diff, stats) across block boundaries, a few values at a time.
  ElementReader reader(values);
  std::vector<float> read(64);
  for (size_t i = 0; i < 64; i += 7) reader.Read(std::min<size_t>(7, 64 - i), reinterpret_cast<uint8_t*>(read.data() + i));
  EXPECT_EQ(read, all);
  // To 16-bit floats: the float32 values rounded.
  const TensorView half = CastView(*doc.FindTensor("q")->view, DType::kFloat16);
  EXPECT_EQ(half.At<float>(33), 1.5f);
  ExpectError([&] { CastView(*doc.FindTensor("q")->view, DType::kInt32); }, ErrorCode::kUnsupported, "only to a floating dtype");
  EXPECT_TRUE(Dequantizable(*doc.FindTensor("q")->view));
}

}  // namespace
}  // namespace trove
