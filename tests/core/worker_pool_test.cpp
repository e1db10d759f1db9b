// RunPieces (core/worker_pool.h): every piece runs once, on several threads when the count allows;
// the lowest failing piece's error reaches the caller; a job inside a piece runs inline; a
// forked child starts its own workers; a file shrinking under a worker is the job's error.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/worker_pool.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/threads.h"

namespace trove {
namespace {

// Restores the default count when a test ends.
struct ThreadCountScope {
  explicit ThreadCountScope(uint32_t n) { SetThreadCount(n); }
  ~ThreadCountScope() { SetThreadCount(0); }
};

TEST(WorkerPool, EveryPieceRunsOnceOnSeveralThreads) {
  ThreadCountScope threads(4);
  std::vector<std::atomic<int>> runs(1000);
  std::mutex m;
  std::set<std::thread::id> ids;
  RunPieces(runs.size(), [&](uint64_t k) {
    runs[k]++;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  });
  for (auto& r : runs) EXPECT_EQ(r.load(), 1);
  EXPECT_GT(ids.size(), 1u);  // workers took part, not only the caller
}

TEST(WorkerPool, OneThreadRunsOnTheCaller) {
  ThreadCountScope threads(1);
  const auto caller = std::this_thread::get_id();
  RunPieces(50, [&](uint64_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
  EXPECT_EQ(ThreadCount(), 1u);
  EXPECT_EQ(PieceCount(1 << 30, 1), 1u);
}

TEST(WorkerPool, CountsAreClampedAndPiecesWorthAThread) {
  ThreadCountScope threads(1000);
  EXPECT_EQ(ThreadCount(), kMaxThreads);
  SetThreadCount(4);
  EXPECT_EQ(PieceCount(100, 1000), 1u);    // too small to split
  EXPECT_EQ(PieceCount(3000, 1000), 3u);   // each piece at least the minimum
  EXPECT_EQ(PieceCount(1 << 20, 1000), 4u);
  SetThreadCount(0);
  EXPECT_EQ(ThreadCount(), std::min(UsableCpus(), kMaxThreads));
}

TEST(WorkerPool, TheLowestFailingPieceIsRethrownAndTheOthersFinish) {
  ThreadCountScope threads(3);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> running{0};
    try {
      RunPieces(64, [&](uint64_t k) {
        running++;
        if (k == 40 || k == 7) throw Error(ErrorCode::kCorrupt, "piece " + std::to_string(k));
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        running--;
      });
      FAIL() << "no error";
    } catch (const Error& e) {
      // 7 fails before 40 is ever taken in most rounds; when both ran, 7 still wins.
      EXPECT_EQ(e.message(), "piece 7");
    }
    // The pool is free again at once: the next job runs whole.
    std::atomic<int> done{0};
    RunPieces(10, [&](uint64_t) { done++; });
    EXPECT_EQ(done.load(), 10);
  }
}

TEST(WorkerPool, AJobInsideAPieceRunsInline) {
  ThreadCountScope threads(3);
  std::atomic<int> inner{0};
  RunPieces(6, [&](uint64_t) {
    const auto me = std::this_thread::get_id();
    RunPieces(5, [&](uint64_t) {
      EXPECT_EQ(std::this_thread::get_id(), me);
      inner++;
    });
  });
  EXPECT_EQ(inner.load(), 30);
}

TEST(WorkerPool, AForkedChildStartsItsOwnWorkers) {
  ThreadCountScope threads(3);
  RunPieces(8, [](uint64_t) { std::this_thread::sleep_for(std::chrono::microseconds(100)); });  // workers exist now
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int> done{0};
    RunPieces(100, [&](uint64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      done++;
    });
    ::_exit(done.load() == 100 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));  // not hung waiting for the parent's workers (ctest's timeout), not killed
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(WorkerPool, AFileShrinkingUnderAWorkerIsTheJobsError) {
  ThreadCountScope threads(3);
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("trove_pool_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path path = dir / "shrinks.bin";
  std::ofstream(path, std::ios::binary) << std::string(8 << 20, 'x');
  auto file = MappedFile::Open(path.string());
  fs::resize_file(path, 4096);
  std::atomic<uint64_t> sum{0};
  try {
    RunGuardingTruncation([&] {
      RunPieces(8, [&](uint64_t k) {
        const uint8_t* p = file->data() + (k << 20);
        uint64_t s = 0;
        for (size_t i = 0; i < (1u << 20); i += 4096) s += p[i];  // SIGBUS past 4096, turned into zeros
        sum += s;
      });
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("changed while being read"), std::string::npos) << e.message();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trove
