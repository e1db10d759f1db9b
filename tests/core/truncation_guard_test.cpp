// RunGuardingTruncation: a mapped file shrinking under a reader is an error naming the file, and
// the reader's own frames unwind normally (destructors run, so temporaries are removed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

fs::path MakeFile(const std::string& name, size_t size) {
  fs::path dir = fs::temp_directory_path() / ("trove_guard_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << std::string(size, 'x');
  return p;
}

TEST(TruncationGuard, ShrunkFileIsAnErrorAndDestructorsRun) {
  const fs::path src = MakeFile("shrinks.bin", 8 << 20);
  auto file = MappedFile::Open(src.string());
  bool destroyed = false;
  struct Sentinel {
    bool* flag;
    ~Sentinel() { *flag = true; }
  };
  uint64_t sum = 0;
  try {
    RunGuardingTruncation([&] {
      Sentinel s{&destroyed};
      fs::resize_file(src, 4096);  // another program shrinks the file under the mapping
      const volatile uint8_t* p = file->data();
      for (uint64_t i = 0; i < file->size(); i += 4096) sum += p[i];  // SIGBUS past 4096 without the guard
    });
    ADD_FAILURE() << "no error for a file shrunk under its mapping";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(e.message().find(src.string() + ": changed while being read"), std::string::npos) << e.message();
  }
  EXPECT_TRUE(destroyed);
  // The next guard starts clean.
  RunGuardingTruncation([] {});
  fs::remove_all(src.parent_path());
}

TEST(TruncationGuard, NothingReadFromAChangedFileIsCommitted) {
  const fs::path src = MakeFile("source.bin", 1 << 20);
  const fs::path out = src.parent_path() / "out.bin";
  auto file = MappedFile::Open(src.string());
  EXPECT_THROW(RunGuardingTruncation([&] {
                 AtomicFile writer(out.string());
                 fs::resize_file(src, 0);
                 std::vector<uint8_t> copy(file->data(), file->data() + file->size());  // reads zeros now
                 writer.Write(copy.data(), copy.size());
                 writer.Commit();  // refuses: the source changed
               }),
               Error);
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(src.parent_path());
}

TEST(TruncationGuard, ErrorsOfTheBodyPassThrough) {
  try {
    RunGuardingTruncation([] { Fail(ErrorCode::kCorrupt, "plain"); });
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "plain");
  }
}

}  // namespace
}  // namespace trove
