// tests/core/error_test.cpp: Error messages gain context outward.
#include <gtest/gtest.h>

#include "trove/error.h"

namespace trove {
namespace {

TEST(ErrorTest, ContextJoinsWithOffsetRule) {
  Error e(ErrorCode::kRefused, "refused global 'posix.system'");
  e.AddContext("@ 57").AddContext("archive/data.pkl").AddContext("model.pt");
  EXPECT_EQ(e.message(), "model.pt: archive/data.pkl @ 57: refused global 'posix.system'");
}

}  // namespace
}  // namespace trove
