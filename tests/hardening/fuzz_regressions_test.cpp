// Every input a fuzzer ever failed on (fuzz/regressions/<target>/) and every seed
// (fuzz/corpus/<target>/) goes through that target's own entry point, compiled into this binary
// (fuzz_entry_*_test.cpp). The entry points swallow trove::Error (a clean refusal) and return 0;
// anything else — another exception, a crash, a sanitizer report when built with sanitizers —
// fails here, in the ordinary test run, without a fuzzing toolchain.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
int TroveFuzzEntry_convert_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_legacy_tar_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_open_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_pickle_grammar_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_print_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_pskd_header_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_pskd_pack_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_pt_reader_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_safetensors_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_tdz_reader_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_tensordict_dir_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_tensordict_meta_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_unpickler_fuzz(const uint8_t* data, size_t size);
int TroveFuzzEntry_zip_reader_fuzz(const uint8_t* data, size_t size);
}

namespace {

namespace fs = std::filesystem;
using Entry = int (*)(const uint8_t*, size_t);

std::vector<uint8_t> ReadBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Feeds every file under fuzz/<kind>/<target>/ to `entry`; returns how many were fed.
size_t FeedAll(const std::string& kind, const std::string& target, Entry entry) {
  fs::path dir = fs::path(TROVE_SOURCE_DIR) / "fuzz" / kind / target;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    std::vector<uint8_t> bytes = ReadBytes(f);
    int rc = -1;
    EXPECT_NO_THROW(rc = entry(bytes.data(), bytes.size())) << f;
    EXPECT_EQ(rc, 0) << f;
  }
  return files.size();
}

struct Target {
  const char* name;
  Entry entry;
};

const Target kTargets[] = {
    {"convert_fuzz", TroveFuzzEntry_convert_fuzz},
    {"legacy_tar_fuzz", TroveFuzzEntry_legacy_tar_fuzz},
    {"open_fuzz", TroveFuzzEntry_open_fuzz},
    {"pickle_grammar_fuzz", TroveFuzzEntry_pickle_grammar_fuzz},
    {"print_fuzz", TroveFuzzEntry_print_fuzz},
    {"pskd_header_fuzz", TroveFuzzEntry_pskd_header_fuzz},
    {"pskd_pack_fuzz", TroveFuzzEntry_pskd_pack_fuzz},
    {"pt_reader_fuzz", TroveFuzzEntry_pt_reader_fuzz},
    {"safetensors_fuzz", TroveFuzzEntry_safetensors_fuzz},
    {"tdz_reader_fuzz", TroveFuzzEntry_tdz_reader_fuzz},
    {"tensordict_dir_fuzz", TroveFuzzEntry_tensordict_dir_fuzz},
    {"tensordict_meta_fuzz", TroveFuzzEntry_tensordict_meta_fuzz},
    {"unpickler_fuzz", TroveFuzzEntry_unpickler_fuzz},
    {"zip_reader_fuzz", TroveFuzzEntry_zip_reader_fuzz},
};

class FuzzRegressions : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzRegressions, SavedFindingsFailCleanly) {
  FeedAll("regressions", GetParam().name, GetParam().entry);
}

TEST_P(FuzzRegressions, SeedsReadCleanly) {
  EXPECT_GT(FeedAll("corpus", GetParam().name, GetParam().entry), 0u) << "no seeds for " << GetParam().name;
}

// Every fuzz target has an entry here: a new fuzz/*_fuzz.cpp must be added to kTargets.
TEST(FuzzRegressionsList, CoversEveryTarget) {
  size_t targets = 0;
  for (const auto& e : fs::directory_iterator(fs::path(TROVE_SOURCE_DIR) / "fuzz")) {
    std::string name = e.path().filename().string();
    if (!name.ends_with("_fuzz.cpp")) continue;
    ++targets;
    std::string stem = name.substr(0, name.size() - 4);
    bool listed = false;
    for (const auto& t : kTargets) listed |= stem == t.name;
    EXPECT_TRUE(listed) << stem << " has no entry in fuzz_regressions_test.cpp";
  }
  EXPECT_EQ(targets, std::size(kTargets));
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzRegressions, ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Target>& param_info) { return std::string(param_info.param.name); });

}  // namespace
