// The fuzzer's seed archives stay valid, and every input the fuzzer ever flagged is kept here as
// a regression: fuzz/corpus/zip_reader_fuzz/ holds the seeds (each must open and check), files
// named regression-* in it are former findings (each must end in a trove::Error or succeed,
// never crash).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"
#include "zip_peers.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

TEST(ZipFuzzCorpus, SeedsOpenAndEveryEntryChecks) {
#ifndef TROVE_SOURCE_DIR
  GTEST_SKIP() << "TROVE_SOURCE_DIR not defined";
#else
  const fs::path dir = fs::path(TROVE_SOURCE_DIR) / "fuzz" / "corpus" / "zip_reader_fuzz";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int seeds = 0;
  for (const auto& f : fs::directory_iterator(dir)) {
    const std::string bytes = ziptest::ReadFile(f.path().string());
    SCOPED_TRACE(f.path().string());
    EXPECT_LT(bytes.size(), 4096u);
    if (f.path().filename().string().rfind("regression-", 0) == 0) {
      try {
        ZipReader r(SharedBytes::CopyOf(bytes.data(), bytes.size()));
        for (const ZipEntry& e : r.entries()) (void)r.CheckCrc(e);
      } catch (const Error&) {
      }
      continue;
    }
    ZipReader r(SharedBytes::CopyOf(bytes.data(), bytes.size()));
    EXPECT_FALSE(r.entries().empty());
    for (const ZipEntry& e : r.entries()) EXPECT_TRUE(r.CheckCrc(e)) << e.name;
    ++seeds;
  }
  EXPECT_GE(seeds, 8);
#endif
}

}  // namespace
}  // namespace trove
