// Counts, sizes and lists of names as messages show them (core/count_text.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/count_text.h"

namespace trove {
namespace {

TEST(CountText, ThousandsGroupsDigits) {
  EXPECT_EQ(Thousands(0), "0");
  EXPECT_EQ(Thousands(999), "999");
  EXPECT_EQ(Thousands(1000), "1,000");
  EXPECT_EQ(Thousands(1048576), "1,048,576");
  EXPECT_EQ(Thousands(UINT64_MAX), "18,446,744,073,709,551,615");
}

TEST(CountText, HumanBytesKeepsThreeDigits) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1024), "1.00 KiB");
  EXPECT_EQ(HumanBytes(13000), "12.7 KiB");
  EXPECT_EQ(HumanBytes(UINT64_MAX), "16.0 EiB");
}

TEST(CountText, FirstFewCountsWhatItDoesNotShow) {
  EXPECT_EQ(FirstFew({}), "");
  EXPECT_EQ(FirstFew({"'a'"}), "'a'");
  EXPECT_EQ(FirstFew({"'a'", "'b'", "'c'"}, 2), "'a', 'b' and 1 more");
  EXPECT_EQ(FirstFew({"'a'", "'b'"}, 2), "'a', 'b'");
  std::vector<std::string> many(1'000'000, "k");
  const std::string shown = FirstFew(many);
  EXPECT_EQ(shown, "k, k, k, k, k, k, k, k and 999992 more");
  // Items past the shown ones may be left empty: they are counted, never read.
  std::vector<std::string> counted = {"x", "y"};
  counted.resize(50);
  EXPECT_EQ(FirstFew(counted, 2), "x, y and 48 more");
  // Or the few are given with the total.
  EXPECT_EQ(FirstFew({"x", "y"}, 2, 50), "x, y and 48 more");
  EXPECT_EQ(FirstFew({"x"}, 8, 1), "x");
}

}  // namespace
}  // namespace trove
