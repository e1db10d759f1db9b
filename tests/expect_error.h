// tests/expect_error.h: the assertion every hostile-input test makes.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "trove/error.h"

namespace trove {

// Runs fn, which must throw trove::Error with `code` and a message containing `needle`.
template <class F>
void ExpectError(F&& fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.message();
    EXPECT_NE(e.message().find(needle), std::string::npos) << "message: " << e.message();
  }
}

}  // namespace trove
