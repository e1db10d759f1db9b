// The one destination rule (trove/atomic_file.h: CheckDestination, SourceGuard) as AtomicFile and
// AtomicDirectory apply it: trove never deletes what it did not write.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

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

bool IsTreeFile(std::string_view name) { return name == "meta.json" || name.ends_with(".memmap"); }

TEST_F(DestinationTest, NewDestinationsAndOwnKindsAreAccepted) {
  EXPECT_NO_THROW(CheckDestination(P("new.pt"), OutputKind::kFile));
  EXPECT_NO_THROW(CheckDestination(P("new_dir"), OutputKind::kTree, IsTreeFile));
  EXPECT_NO_THROW(CheckDestination(P("new_dir"), OutputKind::kFilesInDirectory));
  Put("old.pt", "x");
  EXPECT_NO_THROW(CheckDestination(P("old.pt"), OutputKind::kFile));
  Put("td/meta.json", "{}");
  Put("td/a.memmap", "x");
  Put("td/sub/meta.json", "{}");
  EXPECT_NO_THROW(CheckDestination(P("td"), OutputKind::kTree, IsTreeFile));
  fs::create_directories(dir_ / "empty");
  EXPECT_NO_THROW(CheckDestination(P("empty"), OutputKind::kTree));
  fs::create_symlink(dir_ / "old.pt", dir_ / "link.pt");
  EXPECT_NO_THROW(CheckDestination(P("link.pt"), OutputKind::kFile));
}

TEST_F(DestinationTest, WhatTroveDidNotWriteIsNeverReplaced) {
  Put("others/notes.txt", "mine");
  EXPECT_NE(Refusal([&] { CheckDestination(P("others"), OutputKind::kTree, IsTreeFile); }).find("notes.txt"),
            std::string::npos);
  EXPECT_NE(Refusal([&] { CheckDestination(P("others"), OutputKind::kFile); }).find("is a directory"),
            std::string::npos);
  // A tensordict with one foreign file anywhere in it is not replaced either.
  Put("td/meta.json", "{}");
  Put("td/sub/README.md", "mine");
  EXPECT_NE(Refusal([&] { CheckDestination(P("td"), OutputKind::kTree, IsTreeFile); }).find("README.md"),
            std::string::npos);
  Put("file", "x");
  EXPECT_NE(Refusal([&] { CheckDestination(P("file"), OutputKind::kTree, IsTreeFile); }).find("not a directory"),
            std::string::npos);
  EXPECT_NE(Refusal([&] { CheckDestination(P("file"), OutputKind::kFilesInDirectory); }).find("not a directory"),
            std::string::npos);
  fs::create_directory_symlink(dir_ / "others", dir_ / "link");
  EXPECT_NE(Refusal([&] { CheckDestination(P("link"), OutputKind::kTree, IsTreeFile); }), "");
  // Files may be written into a directory of other files: those stay.
  EXPECT_NO_THROW(CheckDestination(P("others"), OutputKind::kFilesInDirectory));
  // The library writers refuse by themselves, before making anything.
  EXPECT_NE(Refusal([&] { AtomicDirectory d(P("others"), Durability::kReplaceSafe, OutputKind::kTree, IsTreeFile); }), "");
  EXPECT_NE(Refusal([&] { AtomicFile f(P("others")); }), "");
  EXPECT_EQ(Slurp(P("others/notes.txt")), "mine");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 4);
}

TEST_F(DestinationTest, FilesGoIntoAnExistingDirectoryAndNothingElseChanges) {
  Put("model/config.json", "config");
  Put("model/README.md", "readme");
  Put("model/model-00001-of-00002.safetensors", "old shard");
  {
    AtomicDirectory d(P("model"), Durability::kReplaceSafe, OutputKind::kFilesInDirectory);
    std::ofstream(fs::path(d.path()) / "model-00001-of-00002.safetensors") << "new shard 1";
    std::ofstream(fs::path(d.path()) / "model-00002-of-00002.safetensors") << "new shard 2";
    std::ofstream(fs::path(d.path()) / "model.safetensors.index.json") << "index";
    d.MoveLast("model.safetensors.index.json");
    EXPECT_EQ(Slurp(P("model/model-00001-of-00002.safetensors")), "old shard");  // untouched until Commit
    d.Commit();
  }
  EXPECT_EQ(Slurp(P("model/config.json")), "config");
  EXPECT_EQ(Slurp(P("model/README.md")), "readme");
  EXPECT_EQ(Slurp(P("model/model-00001-of-00002.safetensors")), "new shard 1");
  EXPECT_EQ(Slurp(P("model/model.safetensors.index.json")), "index");
  EXPECT_EQ(std::distance(fs::directory_iterator(P("model")), fs::directory_iterator()), 5);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);  // no temporary left
}

TEST_F(DestinationTest, ANameThatIsNoFileStopsTheMoveBeforeAnyFileMoves) {
  Put("model/old-00000.psk.d", "earlier shard");
  fs::create_directories(dir_ / "model" / "old-00001.psk.d");  // a directory by a shard's name
  {
    AtomicDirectory d(P("model"), Durability::kReplaceSafe, OutputKind::kFilesInDirectory);
    std::ofstream(fs::path(d.path()) / "old-00000.psk.d") << "new shard 0";
    std::ofstream(fs::path(d.path()) / "old-00001.psk.d") << "new shard 1";
    EXPECT_NE(Refusal([&] { d.Commit(); }), "");
  }
  EXPECT_EQ(Slurp(P("model/old-00000.psk.d")), "earlier shard");
  EXPECT_TRUE(fs::is_directory(P("model/old-00001.psk.d")));
  EXPECT_EQ(std::distance(fs::directory_iterator(P("model")), fs::directory_iterator()), 2);  // no temporary left
}

TEST_F(DestinationTest, RootWorkingDirectoryAndItsParentsAreRefused) {
  for (OutputKind kind : {OutputKind::kTree, OutputKind::kFilesInDirectory}) {
    EXPECT_NE(Refusal([&] { CheckDestination("/", kind); }), "");
  }
  EXPECT_NE(Refusal([&] { CheckDestination(".", OutputKind::kTree); }), "");
  EXPECT_NE(Refusal([&] { CheckDestination("..", OutputKind::kTree); }), "");
  EXPECT_NE(Refusal([&] { CheckDestination(fs::current_path().string() + "/", OutputKind::kFile); }), "");
  // Files written into a directory leave it and its other files as they are: shards may go into
  // the working directory.
  EXPECT_EQ(Refusal([&] { CheckDestination(".", OutputKind::kFilesInDirectory); }), "");
  EXPECT_EQ(Refusal([&] { CheckDestination("..", OutputKind::kFilesInDirectory); }), "");
}

TEST_F(DestinationTest, ASourceMayBeReplacedInPlaceButNoTreeReplacesItsDirectory) {
  Put("in/model.pt", "source");
  fs::create_symlink(dir_ / "in" / "model.pt", dir_ / "alias.pt");
  {
    SourceGuard source(P("in/model.pt"), InPlace::kAllowed);
    EXPECT_TRUE(IsGuardedSource(P("alias.pt")));
    // In place: the new file replaces the source by rename once it is whole.
    EXPECT_NO_THROW(CheckDestination(P("in/model.pt"), OutputKind::kFile));
    EXPECT_NE(Refusal([&] { CheckDestination(P("in"), OutputKind::kTree); }).find("contains"), std::string::npos);
    EXPECT_NE(Refusal([&] { CheckDestination(P("in/../in/"), OutputKind::kTree); }), "");
    EXPECT_NE(Refusal([&] { CheckDestination(dir_.string(), OutputKind::kTree); }), "");
    EXPECT_NO_THROW(CheckDestination(P("in"), OutputKind::kFilesInDirectory));
    // A sibling whose name only starts like the source's directory is not inside it.
    EXPECT_NO_THROW(CheckDestination(P("in2"), OutputKind::kTree));
    {
      // A second reader of the same file that does not allow it (a report describing it) wins.
      SourceGuard reader(P("in/model.pt"));
      EXPECT_NE(Refusal([&] { CheckDestination(P("alias.pt"), OutputKind::kFile); }).find("source"), std::string::npos);
    }
    AtomicFile f(P("in/model.pt"));
    f.Write("converted", 9);
    EXPECT_EQ(Slurp(P("in/model.pt")), "source");
    f.Commit();
  }
  EXPECT_FALSE(IsGuardedSource(P("in/model.pt")));
  EXPECT_EQ(Slurp(P("in/model.pt")), "converted");
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
