// The one destination rule (trove/atomic_file.h: CheckDestination, SourceGuard) and --force
// (Replace::kAnything) as AtomicFile and AtomicDirectory apply it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "trove/atomic_file.h"
#include "trove/error.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

class DestinationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trove-dest-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string P(const std::string& name) const { return (dir_ / name).string(); }
  void Put(const std::string& name, const std::string& text) const {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name) << text;
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  // The message of the Error(kRefused) `fn` throws, or "" when it throws none.
  template <class F>
  static std::string Refusal(F&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kRefused) << e.message();
      return e.message();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(DestinationTest, NewDestinationsAndOwnKindsAreAccepted) {
  EXPECT_NO_THROW(CheckDestination(P("new.pt"), OutputKind::kFile));
  EXPECT_NO_THROW(CheckDestination(P("new_dir"), OutputKind::kDirectory));
  Put("old.pt", "x");
  EXPECT_NO_THROW(CheckDestination(P("old.pt"), OutputKind::kFile));
  Put("td/meta.json", "{}");
  Put("td/a.memmap", "x");
  EXPECT_NO_THROW(CheckDestination(P("td"), OutputKind::kDirectory));
  fs::create_directories(dir_ / "empty");
  EXPECT_NO_THROW(CheckDestination(P("empty"), OutputKind::kDirectory));
  fs::create_symlink(dir_ / "old.pt", dir_ / "link.pt");
  EXPECT_NO_THROW(CheckDestination(P("link.pt"), OutputKind::kFile));
}

TEST_F(DestinationTest, OtherKindsAreRefusedUnlessForced) {
  Put("others/notes.txt", "mine");
  EXPECT_NE(Refusal([&] { CheckDestination(P("others"), OutputKind::kDirectory); }).find("not a tensordict"),
            std::string::npos);
  EXPECT_NE(Refusal([&] { CheckDestination(P("others"), OutputKind::kFile); }).find("is a directory"),
            std::string::npos);
  Put("file", "x");
  EXPECT_NE(Refusal([&] { CheckDestination(P("file"), OutputKind::kDirectory); }).find("not a directory"),
            std::string::npos);
  fs::create_directory_symlink(dir_ / "others", dir_ / "link");
  EXPECT_NE(Refusal([&] { CheckDestination(P("link"), OutputKind::kDirectory); }), "");
  EXPECT_NO_THROW(CheckDestination(P("others"), OutputKind::kDirectory, Replace::kAnything));
  EXPECT_NO_THROW(CheckDestination(P("file"), OutputKind::kDirectory, Replace::kAnything));
  // The library writers refuse by themselves, before making anything.
  EXPECT_NE(Refusal([&] { AtomicDirectory d(P("others")); }), "");
  EXPECT_NE(Refusal([&] { AtomicFile f(P("others")); }), "");
  EXPECT_EQ(Slurp(P("others/notes.txt")), "mine");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 3);
}

TEST_F(DestinationTest, RootWorkingDirectoryAndItsParentsAreRefusedEvenForced) {
  for (Replace replace : {Replace::kOwnKind, Replace::kAnything}) {
    EXPECT_NE(Refusal([&] { CheckDestination("/", OutputKind::kDirectory, replace); }), "");
    EXPECT_NE(Refusal([&] { CheckDestination(".", OutputKind::kDirectory, replace); }), "");
    EXPECT_NE(Refusal([&] { CheckDestination("..", OutputKind::kDirectory, replace); }), "");
    EXPECT_NE(Refusal([&] { CheckDestination(fs::current_path().string() + "/", OutputKind::kFile, replace); }), "");
  }
}

TEST_F(DestinationTest, SourcesAndTheirParentsAreRefusedEvenForced) {
  Put("in/model.pt", "source");
  fs::create_symlink(dir_ / "in" / "model.pt", dir_ / "alias.pt");
  {
    SourceGuard source(P("in/model.pt"));
    for (Replace replace : {Replace::kOwnKind, Replace::kAnything}) {
      EXPECT_NE(Refusal([&] { CheckDestination(P("in/model.pt"), OutputKind::kFile, replace); }).find("source"),
                std::string::npos);
      EXPECT_NE(Refusal([&] { CheckDestination(P("alias.pt"), OutputKind::kFile, replace); }), "");
      EXPECT_NE(Refusal([&] { CheckDestination(P("in"), OutputKind::kDirectory, replace); }).find("contains"),
                std::string::npos);
      EXPECT_NE(Refusal([&] { CheckDestination(P("in/../in/"), OutputKind::kDirectory, replace); }), "");
      EXPECT_NE(Refusal([&] { CheckDestination(dir_.string(), OutputKind::kDirectory, replace); }), "");
    }
    EXPECT_NE(Refusal([&] { AtomicFile f(P("in/model.pt"), Durability::kReplaceSafe, Replace::kAnything); }), "");
    // A sibling whose name only starts like the source's directory is not inside it.
    EXPECT_NO_THROW(CheckDestination(P("in2"), OutputKind::kDirectory));
  }
  // Once the guard is gone, the file is an ordinary destination again.
  EXPECT_NO_THROW(CheckDestination(P("in/model.pt"), OutputKind::kFile));
  EXPECT_EQ(Slurp(P("in/model.pt")), "source");
}

TEST_F(DestinationTest, ForceReplacesAMismatchedDestinationAtomically) {
  Put("others/notes.txt", "mine");
  {
    AtomicFile f(P("others"), Durability::kReplaceSafe, Replace::kAnything);
    f.Write("file now", 8);
    EXPECT_EQ(Slurp(P("others/notes.txt")), "mine");  // untouched until Commit
    f.Commit();
  }
  EXPECT_TRUE(fs::is_regular_file(P("others")));
  EXPECT_EQ(Slurp(P("others")), "file now");
  {
    AtomicDirectory d(P("others"), Durability::kReplaceSafe, Replace::kAnything);
    std::ofstream(fs::path(d.path()) / "meta.json") << "{}";
    d.Commit();
  }
  EXPECT_TRUE(fs::is_regular_file(P("others/meta.json")));
  // Nothing else is left beside it: no temporary, no old tree.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(DestinationTest, OrphansOfAnyNameAreRemovedLiveOnesKept) {
  Put(".other.tdz.trove-tmp-0badf00d", "left by a killed writer");
  Put(".tree.trove-tmp-12345678/a.memmap", "left by a killed directory writer");
  Put(".live.trove-tmp-0000aaaa", "being written");
  Put(".notours.trove-tmp-xyz", "not a trove temporary name");
  int held = ::open(P(".live.trove-tmp-0000aaaa").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
  {
    AtomicFile f(P("unrelated.pt"));
  }
  EXPECT_FALSE(fs::exists(P(".other.tdz.trove-tmp-0badf00d")));
  EXPECT_FALSE(fs::exists(P(".tree.trove-tmp-12345678")));
  EXPECT_TRUE(fs::exists(P(".live.trove-tmp-0000aaaa")));
  EXPECT_TRUE(fs::exists(P(".notours.trove-tmp-xyz")));
  ::close(held);
}

}  // namespace
}  // namespace trove
