// The little-endian helpers (core/little_endian.h) and ByteReader's sub-readers.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "core/byte_reader.h"
#include "core/little_endian.h"
#include "trove/dtype.h"
#include "trove/error.h"

namespace trove {
namespace {

TEST(LittleEndian, LoadsEachWidth) {
  const uint8_t b[8] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x88};
  EXPECT_EQ(LoadLe(b, 0), 0u);
  EXPECT_EQ(LoadLe(b, 1), 0x01u);
  EXPECT_EQ(LoadLe(b, 3), 0x030201u);
  EXPECT_EQ(LoadLe16(b), 0x0201u);
  EXPECT_EQ(LoadLe32(b), 0x04030201u);
  EXPECT_EQ(LoadLe64(b), 0x8807060504030201u);  // the top bit stays (no sign extension)
  static_assert(LoadLe16(std::array<uint8_t, 2>{0x34, 0x12}.data()) == 0x1234);
}

TEST(LittleEndian, StoresAndAppendsRoundTrip) {
  uint8_t b[8] = {};
  StoreLe(b, 0x1122334455667788, 8);
  EXPECT_EQ(b[0], 0x88);
  EXPECT_EQ(b[7], 0x11);
  EXPECT_EQ(LoadLe64(b), 0x1122334455667788u);
  uint8_t c[4] = {0xAA, 0xAA, 0xAA, 0xAA};
  StoreLe(c, 0xFFFF0102, 2);  // only the low n bytes, the rest untouched
  EXPECT_EQ(c[0], 0x02);
  EXPECT_EQ(c[1], 0x01);
  EXPECT_EQ(c[2], 0xAA);

  std::string s = "x";
  AppendLe(s, 0x04034b50, 4);
  EXPECT_EQ(s, std::string("xPK\x03\x04", 5));
  std::vector<uint8_t> v;
  AppendLe(v, 0xFEDC, 2);
  EXPECT_EQ(v, (std::vector<uint8_t>{0xDC, 0xFE}));
  std::string t(4, '\0');
  StoreLe(t.data() + 1, 0xABCD, 2);
  EXPECT_EQ(t, std::string("\0\xCD\xAB\0", 4));
}

TEST(ByteReader, ReadsThroughLittleEndian) {
  const uint8_t b[] = {1, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0};
  ByteReader r(b, sizeof b);
  EXPECT_EQ(r.U16(), 1u);
  EXPECT_EQ(r.U32(), 2u);
  EXPECT_EQ(r.U64(), 3u);
  EXPECT_TRUE(r.at_end());
}

TEST(ByteReader, SubReaderKeepsAbsoluteOffsets) {
  uint8_t b[16];
  for (int i = 0; i < 16; ++i) b[i] = static_cast<uint8_t>(i);
  ByteReader r(b + 4, 12, 100);  // b[4] is byte 100 of its file
  r.Skip(2);
  ByteReader sub = r.Sub(6);
  EXPECT_EQ(r.offset(), 108u);  // the parent skipped the sub-reader's bytes
  EXPECT_EQ(sub.offset(), 102u);
  EXPECT_EQ(sub.position(), 0u);
  EXPECT_EQ(sub.remaining(), 6u);
  EXPECT_EQ(sub.Rest(), std::string_view(reinterpret_cast<const char*>(b + 6), 6));
  EXPECT_EQ(sub.U16(), 0x0706u);
  ByteReader inner = sub.Sub(2);
  EXPECT_EQ(inner.offset(), 104u);
  EXPECT_EQ(inner.U8(), 8);
  try {
    inner.U16();  // one byte left in the inner reader, though the file goes on
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorrupt);
    EXPECT_NE(std::string(e.what()).find("truncated at offset 105: need 2 bytes, 1 remain"), std::string::npos) << e.what();
  }
  try {
    sub.Sub(3);  // two bytes left
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated at offset 106: need 3 bytes, 2 remain"), std::string::npos) << e.what();
  }
  EXPECT_EQ(sub.remaining(), 2u);  // a failed Sub consumes nothing
}

TEST(DType, TorchDtypeStringIsTheInverseOfItsParser) {
  EXPECT_EQ(TorchDtypeString(DType::kFloat32), "torch.float32");
  for (const DTypeInfo& info : AllDTypes()) {
    // ggml's block types have no torch name: "torch." names no dtype.
    const std::optional<DType> want = info.torch_name.empty() ? std::nullopt : std::optional<DType>(info.dtype);
    EXPECT_EQ(DTypeFromTorchString(TorchDtypeString(info.dtype)), want) << info.name;
  }
  EXPECT_EQ(DTypeFromTorchString("float32"), std::nullopt);
}

TEST(ByteReaderTest, NamesOffsetsOnTruncation) {
  uint8_t data[3] = {1, 2, 3};
  ByteReader r(data, 3, 100);
  EXPECT_EQ(r.U16(), 0x0201);
  try {
    r.U32();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("offset 102"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace trove
