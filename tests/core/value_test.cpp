// tests/core/value_test.cpp: Values: integers beyond 64 bits.
#include <gtest/gtest.h>

#include <vector>

#include "trove/value.h"

namespace trove {
namespace {

TEST(ValueTest, BigIntsPrintInDecimal) {
  ValueArena arena;
  // 2^64 as little-endian two's complement: 9 bytes.
  std::vector<uint8_t> b(9, 0);
  b[8] = 1;
  EXPECT_EQ(arena.BigInt(b)->IntToString(), "18446744073709551616");
  std::vector<uint8_t> neg(9, 0);
  neg[8] = 0xFF;  // -2^64
  EXPECT_EQ(arena.BigInt(neg)->IntToString(), "-18446744073709551616");
  EXPECT_EQ(arena.BigInt({0xFF})->integer, -1);
  EXPECT_EQ(arena.BigInt({0x00, 0x00, 0x00, 0x00, 0x00, 0x01})->integer, int64_t{1} << 40);
}

}  // namespace
}  // namespace trove
