// The sample-type language and the container header, byte by byte.
#include <cstring>

#include "pskd_test_support.h"
#include "trove/pskd.h"

namespace trove::pskd {
namespace {

using testing::HeaderBytes;

TEST(SampleTypeTest, ParsesTheSpecTypes) {
  SampleType t = ParseSampleType("(idx[64][seq: 8], idx[64][seq: 8])");
  ASSERT_EQ(t.leaves.size(), 2u);
  EXPECT_EQ(t.leaves[0].kind, LeafKind::kIndex);
  EXPECT_EQ(t.leaves[0].bound, 64u);
  EXPECT_EQ(t.leaves[0].element_bytes, 1u);
  EXPECT_EQ(t.leaves[0].dims[0].name, "seq");
  EXPECT_EQ(t.leaves[1].offset, 8u);
  EXPECT_EQ(t.sample_bytes, 16u);
  EXPECT_EQ(t.CanonicalText(), "(idx[64][seq: 8], idx[64][seq: 8])");

  SampleType m = ParseSampleType("ℝ[model: 4]");
  EXPECT_EQ(m.sample_bytes, 32u);
  EXPECT_EQ(m.leaves[0].dtype(), DType::kFloat64);
  SampleType s = ParseSampleType("ℝ[]");
  EXPECT_EQ(s.sample_bytes, 8u);
  EXPECT_TRUE(s.leaves[0].dims.empty());
  SampleType grid = ParseSampleType("ℝ[rows: 2, cols: 3]");
  EXPECT_EQ(grid.leaves[0].elements, 6u);
  EXPECT_EQ(grid.leaves[0].shape(), (std::vector<int64_t>{2, 3}));
  SampleType b = ParseSampleType("bool[4]");
  EXPECT_EQ(b.leaves[0].bound, 2u);
  EXPECT_EQ(b.leaves[0].TypeText(), "bool[4]");
  SampleType nested = ParseSampleType(" ( ℝ[2] , (idx[300][], bool[]) ) ");
  ASSERT_EQ(nested.leaves.size(), 3u);
  EXPECT_EQ(nested.leaves[1].element_bytes, 2u);
  EXPECT_EQ(nested.sample_bytes, 16u + 2u + 1u);
  EXPECT_EQ(nested.CanonicalText(), "(ℝ[2], (idx[300][], bool[]))");
  SampleType params = ParseSampleType("params MiniGPT");
  EXPECT_TRUE(params.is_params);
  EXPECT_EQ(params.params_name, "MiniGPT");
}

TEST(SampleTypeTest, IndexWidthIsTheSmallestHoldingNMinusOne) {
  EXPECT_EQ(IndexElementBytes(1), 1u);
  EXPECT_EQ(IndexElementBytes(256), 1u);
  EXPECT_EQ(IndexElementBytes(257), 2u);
  EXPECT_EQ(IndexElementBytes(65536), 2u);
  EXPECT_EQ(IndexElementBytes(65537), 4u);
  EXPECT_EQ(IndexElementBytes(uint64_t{1} << 32), 4u);
  EXPECT_EQ(IndexElementBytes((uint64_t{1} << 32) + 1), 8u);
  EXPECT_EQ(ParseSampleType("idx[18446744073709551615][]").leaves[0].dtype(), DType::kUInt64);
}

TEST(SampleTypeTest, WhatIsNotAClosedDataTypeIsE9001) {
  for (const char* text : {"ℝ[T]", "ℝ", "idx[64]", "idx[0][]", "idx[N][3]", "ℝ[...]", "...", "(ℝ[2], Foo)", "Foo",
                           "ℝ[2", "()", "(ℝ[2], params M)", "params", "params M extra", "ℝ[seq: ]",
                           "idx[18446744073709551616][]", "ℝ[0]", "ℝ[2] ℝ[3]", "",
                           "ℝ[4294967296, 4294967296]", "ℝ[65536, 65536, 65536]"}) {
    EXPECT_PSKD_ERROR(ParseSampleType(text), PskdCode::kNotClosedType);
  }
  std::string deep(200, '(');
  deep += "ℝ[]" + std::string(200, ')');
  EXPECT_PSKD_ERROR(ParseSampleType(deep), PskdCode::kNotClosedType);
}

TEST(HeaderTest, Version1BytesFieldByField) {
  SampleType t = ParseSampleType("(idx[64][seq: 8], idx[64][seq: 8])");
  std::vector<uint8_t> h = EncodeHeader(t, 24);
  const std::string type = "(idx[64][seq: 8], idx[64][seq: 8])";
  ASSERT_EQ(h.size(), 4 + 2 + 4 + type.size() + 8);
  EXPECT_EQ(std::string(h.begin(), h.begin() + 4), "PSKD");
  EXPECT_EQ(h[4], 1);  // version, little-endian u16
  EXPECT_EQ(h[5], 0);
  EXPECT_EQ(h[6], type.size());  // type_len u32
  EXPECT_EQ(h[7] | h[8] | h[9], 0);
  EXPECT_EQ(std::string(h.begin() + 10, h.begin() + 10 + static_cast<long>(type.size())), type);
  EXPECT_EQ(h[10 + type.size()], 24);  // count u64
  for (size_t i = 1; i < 8; ++i) EXPECT_EQ(h[10 + type.size() + i], 0);
  EXPECT_EQ(CountFieldOffset(t), 10 + type.size());
  EXPECT_EQ(std::string(h.begin(), h.end()), HeaderBytes(1, type, 24));
}

TEST(HeaderTest, Version2WhenALeafIsNarrow) {
  SampleType t = ParseSampleType("(ℝ[2], idx[10][], ℝ[])");
  EXPECT_EQ(EncodeHeader(t, 0)[4], 1);  // all f64: version 1, the same bytes as before
  t.SetEncodings({Encoding::kF32, Encoding::kF64, Encoding::kBF16});
  EXPECT_EQ(t.sample_bytes, 8u + 1u + 2u);
  std::vector<uint8_t> h = EncodeHeader(t, 3);
  EXPECT_EQ(std::string(h.begin(), h.end()), HeaderBytes(2, t.text, 3, {1, 0, 2}));
  EXPECT_PSKD_ERROR(t.SetEncodings({Encoding::kF32, Encoding::kF32, Encoding::kF64}), PskdCode::kLayout);
}

std::string WithData(std::string header, size_t bytes) { return header + std::string(bytes, '\0'); }

Header Parse(const std::string& bytes) {
  return ParseHeader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

TEST(HeaderTest, ParsesBothVersions) {
  Header h1 = Parse(WithData(HeaderBytes(1, "ℝ[2]", 3), 48));
  EXPECT_EQ(h1.version, 1);
  EXPECT_EQ(h1.count, 3u);
  EXPECT_EQ(h1.data_offset, 10u + std::strlen("ℝ[2]") + 8u);
  Header h2 = Parse(WithData(HeaderBytes(2, "(ℝ[2], idx[3][])", 2, {2, 0}), 2 * 5));
  EXPECT_EQ(h2.type.leaves[0].encoding, Encoding::kBF16);
  EXPECT_EQ(h2.type.sample_bytes, 5u);
  Header params = Parse(HeaderBytes(1, "params MiniGPT", 1) + "whatever");
  EXPECT_TRUE(params.type.is_params);
}

TEST(HeaderTest, HostileHeadersGiveTheirCodes) {
  EXPECT_PSKD_ERROR(Parse("PSKX"), PskdCode::kNotPskd);
  EXPECT_PSKD_ERROR(Parse(""), PskdCode::kNotPskd);
  EXPECT_PSKD_ERROR(Parse(WithData(HeaderBytes(3, "ℝ[]", 1), 8)), PskdCode::kNotPskd);
  EXPECT_PSKD_ERROR(Parse("PSKD\x01"), PskdCode::kTruncated);
  EXPECT_PSKD_ERROR(Parse(HeaderBytes(1, "ℝ[]", 1).substr(0, 12)), PskdCode::kTruncated);
  // A header claiming 2^60 samples: E9003, and no allocation of that size.
  EXPECT_PSKD_ERROR(Parse(WithData(HeaderBytes(1, "ℝ[]", uint64_t{1} << 60), 64)), PskdCode::kTruncated);
  EXPECT_PSKD_ERROR(Parse(WithData(HeaderBytes(1, "ℝ[65536, 65536, 4096]", ~uint64_t{0}), 64)), PskdCode::kTruncated);
  EXPECT_PSKD_ERROR(Parse(WithData(HeaderBytes(1, "ℝ[]", 2), 8)), PskdCode::kTruncated);
  EXPECT_PSKD_ERROR(Parse(WithData(HeaderBytes(1, "ℝ[]", 1), 9)), PskdCode::kLayout);
  EXPECT_PSKD_ERROR(Parse(WithData(HeaderBytes(1, "ℝ[T]", 1), 8)), PskdCode::kNotClosedType);
  EXPECT_PSKD_ERROR(Parse(WithData(HeaderBytes(2, "(ℝ[], ℝ[])", 1, {0}), 16)), PskdCode::kLayout);
  EXPECT_PSKD_ERROR(Parse(WithData(HeaderBytes(2, "(ℝ[], ℝ[])", 1, {0, 7}), 16)), PskdCode::kNotPskd);
  EXPECT_PSKD_ERROR(Parse(WithData(HeaderBytes(2, "idx[5][]", 1, {1}), 1)), PskdCode::kLayout);
  EXPECT_PSKD_ERROR(Parse(WithData(HeaderBytes(2, "(ℝ[], ℝ[])", 1, {0, 0}, 2000000), 16)), PskdCode::kLayout);
  // A type length beyond the cap is refused before it is read.
  std::string huge("PSKD\x01\x00\xff\xff\xff\x7f", 10);
  EXPECT_PSKD_ERROR(Parse(huge), PskdCode::kNotClosedType);
}

TEST(PskdFileTest, SampleBeyondCountIsE9003AndIndicesAreChecked) {
  std::string bytes = HeaderBytes(1, "idx[5][2]", 2) + std::string("\x01\x02\x04\x05", 4);
  PskdFile f = PskdFile::FromBytes(SharedBytes::CopyOf(bytes.data(), bytes.size()), "mem");
  EXPECT_EQ(f.Sample(0)[1], 2);
  f.CheckIndices(0);
  EXPECT_PSKD_ERROR(f.CheckIndices(1), PskdCode::kBadValue);
  EXPECT_PSKD_ERROR(f.Sample(2), PskdCode::kTruncated);
  try {
    f.CheckIndices(1);
  } catch (const Error& e) {
    EXPECT_EQ(PskdMessageWithoutCode(e), "mem: sample 1, leaf 0, element 1: 5 is not below 5");
  }
}

TEST(SampleEncoderTest, BoundsAndEncodings) {
  SampleType t = ParseSampleType("(idx[64][2], ℝ[2])");
  t.SetEncodings({Encoding::kF64, Encoding::kBF16});
  SampleEncoder enc(t);
  enc.PutIndex(63);
  EXPECT_PSKD_ERROR(enc.PutIndex(64), PskdCode::kBadValue);
  EXPECT_PSKD_ERROR(enc.PutReal(1.0), PskdCode::kLayout);
  enc.PutIndex(0);
  EXPECT_PSKD_ERROR(enc.PutReal(0.1), PskdCode::kBadValue);       // not a number of bf16
  EXPECT_PSKD_ERROR(enc.PutReal(1.00390625), PskdCode::kBadValue);  // an f32, not a bf16
  enc.PutReal(-2.5);
  enc.PutReal(3.0);
  EXPECT_TRUE(enc.complete());
  EXPECT_PSKD_ERROR(enc.PutIndex(1), PskdCode::kBadValue);
  auto b = enc.bytes();
  EXPECT_EQ(LoadReal(b.data() + 2, Encoding::kBF16), -2.5);
  EXPECT_EQ(LoadReal(b.data() + 4, Encoding::kBF16), 3.0);
}

TEST(ErrorCodeTest, MarkerSurvivesContext) {
  try {
    FailPskd(PskdCode::kBadValue, "64 is not below 64");
  } catch (Error& e) {
    e.AddContext("line 3");
    EXPECT_EQ(PskdCodeOf(e), PskdCode::kBadValue);
    EXPECT_EQ(PskdMessageWithoutCode(e), "line 3: 64 is not below 64");
  }
  EXPECT_EQ(PskdCodeOf(Error(ErrorCode::kIo, "disk full")), std::nullopt);
}

}  // namespace
}  // namespace trove::pskd
