// tests/core/atomic_file_test.cpp: AtomicFile and AtomicDirectory: the destination appears only on
// Commit, orphans are cleaned,
// durability, and writes after fork().
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "trove/atomic_file.h"

namespace trove {
namespace {

TEST(AtomicFileTest, AppearsOnlyOnCommitAndKeepsOldFile) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("trove-atomic-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path dest = dir / "out.bin";
  { std::ofstream(dest) << "old"; }
  {
    AtomicFile f(dest.string());
    f.Write("new contents", 12);
    // Not committed: the destroyed writer leaves the old file and no stray files.
  }
  std::ifstream in(dest);
  std::string s((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(s, "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  {
    AtomicFile f(dest.string());
    f.Write("new contents", 12);
    f.WriteAt(0, "N", 1);
    f.Commit();
  }
  std::ifstream in2(dest);
  std::string s2((std::istreambuf_iterator<char>(in2)), {});
  EXPECT_EQ(s2, "New contents");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  {
    // What a replacing writer killed between its link and its rename leaves: a hidden name. The
    // next writer removes it, unless a live writer holds it (flock).
    const fs::path orphan = dir / ".out.bin.trove-tmp-0badf00d";
    const fs::path live = dir / ".out.bin.trove-tmp-0000aaaa";
    std::ofstream(orphan) << "left by a killed writer";
    std::ofstream(live) << "being written";
    int held = ::open(live.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(held, 0);
    ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
    AtomicFile f(dest.string());
    EXPECT_FALSE(fs::exists(orphan));
    EXPECT_TRUE(fs::exists(live));
    ::close(held);
    fs::remove(live);
  }
  // A tree replaces an existing one when every file in it is of the writer's own kind.
  const OwnFileTest own = [](std::string_view name) { return name == "a" || name == "b" || name == "meta.json"; };
  {
    AtomicDirectory d((dir / "tree").string(), Durability::kReplaceSafe, OutputKind::kTree, own);
    std::ofstream(fs::path(d.path()) / "a") << "1";
    std::ofstream(fs::path(d.path()) / "meta.json") << "{}";
    d.Commit();
  }
  {
    AtomicDirectory d((dir / "tree").string(), Durability::kReplaceSafe, OutputKind::kTree, own);
    std::ofstream(fs::path(d.path()) / "b") << "2";
    d.Commit();
  }
  EXPECT_FALSE(fs::exists(dir / "tree" / "a"));
  EXPECT_TRUE(fs::exists(dir / "tree" / "b"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2);
  fs::remove_all(dir);
}

// Durability: a new destination is written as cp writes it; replacing one, or kDurable, syncs
// before the swap (tests/python/test_convert.py sees the fsync calls themselves).
TEST(AtomicFileTest, SyncsWhenReplacingOrDurable) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("trove-durable-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    AtomicFile f((dir / "new.bin").string());
    EXPECT_FALSE(f.syncs());
    f.Write("a", 1);
    f.Commit();
  }
  {
    AtomicFile f((dir / "new.bin").string());
    EXPECT_TRUE(f.syncs());
  }
  {
    AtomicFile f((dir / "other.bin").string(), Durability::kDurable);
    EXPECT_TRUE(f.syncs());
  }
  {
    AtomicDirectory d((dir / "tree").string());
    EXPECT_FALSE(d.syncs());
    d.Commit();
  }
  {
    AtomicDirectory d((dir / "tree").string());
    EXPECT_TRUE(d.syncs());
  }
  {
    AtomicDirectory d((dir / "tree2").string(), Durability::kDurable);
    EXPECT_TRUE(d.syncs());
  }
  {
    // A destination made while the writer works is replaced, and so protected, too.
    AtomicFile f((dir / "late.bin").string());
    EXPECT_FALSE(f.syncs());
    f.Write("new", 3);
    std::ofstream(dir / "late.bin") << "made meanwhile";
    f.Commit();
    EXPECT_TRUE(f.syncs());
    std::ifstream in(dir / "late.bin");
    std::string s((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(s, "new");
  }
  fs::remove_all(dir);
}

// Large writes of mapped bytes go through the kernel (copy_file_range) straight from the mapped
// file; what lands must be exactly those bytes at the writer's position, and the cases the kernel

// Writes hand their writeback requests to a helper thread; a child of fork() has no such thread
// and must still write (and not hang on a lock or a queue nobody serves).
TEST(WriteBehindTest, LargeWritesWorkBeforeAndAfterFork) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("trove-wb-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string block(1 << 20, 'x');
  auto write = [&](const fs::path& path) {
    AtomicFile f(path.string());
    for (int i = 0; i < 40; ++i) f.Write(block.data(), block.size());  // 40 MiB: several steps
    f.Commit();
    return fs::file_size(path) == 40u * block.size();
  };
  ASSERT_TRUE(write(dir / "parent.bin"));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);  // a hang ends the child with SIGALRM, which the parent reports
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) ok = write(dir / ("child" + std::to_string(i) + ".bin"));
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_TRUE(write(dir / "parent2.bin"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trove
