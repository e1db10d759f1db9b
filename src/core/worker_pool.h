// core/worker_pool.h: running the pieces of one job on the process's worker threads.
//
// One pool for the whole process (trove/threads.h sets its size): workers are started on first
// use and sleep between jobs. A job is `count` pieces, fn(0) ... fn(count-1), taken in increasing
// order by the calling thread and up to ThreadCount()-1 workers; RunPieces returns when all have
// run. One job runs at a time: a job started while another runs (from another thread, or from
// inside a piece) runs on its calling thread alone, so nesting never deadlocks. Every piece runs
// under the SIGBUS guard (RunGuardingTruncation), so a file truncated under a worker's reads is
// the job's error like any other. When pieces throw, the others still running finish, no new
// piece starts, and the error of the lowest failing piece is rethrown to the caller.
//
// After fork() the child has no workers (threads do not survive it); its first job starts new
// ones. Pieces must not fork.
#pragma once

#include <cstdint>
#include <functional>

namespace trove {

void RunPieces(uint64_t count, const std::function<void(uint64_t piece)>& fn);

// How many pieces to cut `items` into so that each holds at least `min_items` (work worth a
// thread's wake-up) and every thread gets some: 1 for small jobs.
uint64_t PieceCount(uint64_t items, uint64_t min_items);

// A thread of a pool kept by its caller (stats' passes), started with the workers' stack size
// (kWorkerStackBytes in worker_pool.cpp) and joined when destroyed. started() is false when the
// system refused it: the caller's other threads carry the work.
class SmallStackThread {
 public:
  explicit SmallStackThread(std::function<void()> fn);
  ~SmallStackThread();
  SmallStackThread(const SmallStackThread&) = delete;
  SmallStackThread& operator=(const SmallStackThread&) = delete;
  bool started() const { return started_; }

 private:
  std::function<void()> fn_;
  unsigned long thread_ = 0;  // pthread_t
  bool started_ = false;
};

}  // namespace trove
