// Shared fixtures of the .psk.d tests: temporary directories, running the real presk binary,
// and building header bytes by hand.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "trove/error.h"
#include "trove/pskd.h"

namespace trove::pskd::testing {

// A fresh directory under the system temp dir, removed when the test ends.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

struct RunResult {
  int status = -1;
  std::string out, err;
};
// Runs `presk` (from TROVE_BIN_DIR) with args, in directory `cwd`.
RunResult RunPresk(const std::vector<std::string>& args, const std::string& cwd = ".");
std::string BinDir();
std::string SourceDir();

void WriteFile(const std::string& path, std::string_view bytes);
std::string ReadFile(const std::string& path);

// Little-endian header bytes, field by field, for hostile-header tests.
std::string HeaderBytes(uint16_t version, std::string_view type, uint64_t count,
                        const std::vector<uint8_t>& encodings = {}, int32_t leaves_override = -1);

// The code an error carries, failing the test when there is none.
PskdCode CodeOf(const Error& e);

#define EXPECT_PSKD_ERROR(statement, code)                                        \
  do {                                                                            \
    try {                                                                         \
      statement;                                                                  \
      ADD_FAILURE() << "no error from " #statement;                               \
    } catch (const ::trove::Error& expected_pskd_error) {                         \
      EXPECT_EQ(::trove::pskd::testing::CodeOf(expected_pskd_error), code)        \
          << expected_pskd_error.message();                                       \
    }                                                                             \
  } while (0)

}  // namespace trove::pskd::testing
