// tests/core/byte_reader_test.cpp: ByteReader: a truncated read names the absolute offset.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/byte_reader.h"
#include "trove/error.h"

namespace trove {
namespace {

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
