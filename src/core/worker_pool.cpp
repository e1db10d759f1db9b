// The process's worker threads (core/worker_pool.h).
#include "core/worker_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "trove/shared_bytes.h"
#include "trove/threads.h"

namespace trove {
namespace {

std::atomic<uint32_t> g_thread_count{0};  // 0: UsableCpus()

// The job the workers share. Guarded by `mutex` except the piece counter.
struct Pool {
  std::mutex mutex;
  std::condition_variable wake;     // a new job (generation changed)
  std::condition_variable finished; // a worker left the job
  std::mutex job_mutex;             // held by the thread running a job
  uint64_t generation = 0;
  uint32_t started = 0;             // workers alive
  uint32_t wanted = 0;              // workers that take part in the current job
  uint32_t busy = 0;                // workers still in the current job
  const std::function<void(uint64_t)>* fn = nullptr;
  uint64_t count = 0;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> stop{false};
  uint64_t error_piece = UINT64_MAX;
  std::exception_ptr error;

  void Record(uint64_t piece, std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (piece < error_piece) error_piece = piece, error = e;
    stop = true;
  }

  // Takes pieces until none is left, under the SIGBUS guard.
  void Work() {
    uint64_t piece = 0;
    try {
      RunGuardingTruncation([&] {
        while (!stop.load(std::memory_order_relaxed) && (piece = next.fetch_add(1)) < count) (*fn)(piece);
      });
    } catch (...) {
      Record(piece, std::current_exception());
    }
  }

  void WorkerLoop(uint32_t index) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return generation != seen && index < wanted; });
        seen = generation;
      }
      Work();
      std::lock_guard<std::mutex> lock(mutex);
      if (--busy == 0) finished.notify_all();
    }
  }
};

// Never destroyed: detached workers may still sleep on it at exit.
Pool* g_pool = new Pool;

void ForgetWorkersInChild() {
  // The child of fork has only the forking thread: the workers and any lock they held are gone.
  g_pool = new Pool;  // the parent's pool is left as it was (leaked in the child)
}

std::once_flag g_atfork_once;

}  // namespace

uint32_t UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void SetThreadCount(uint32_t threads) { g_thread_count = std::min(threads, kMaxThreads); }

uint32_t ThreadCount() {
  const uint32_t set = g_thread_count.load();
  return std::clamp(set != 0 ? set : UsableCpus(), 1u, kMaxThreads);
}

uint64_t PieceCount(uint64_t items, uint64_t min_items) {
  const uint64_t threads = ThreadCount();
  if (threads <= 1 || items < 2 * std::max<uint64_t>(min_items, 1)) return 1;
  return std::min<uint64_t>(threads, items / std::max<uint64_t>(min_items, 1));
}

namespace {

// A worker's stack. The default (ulimit -s, usually 8 MiB) is reserved address space per thread:
// 64 workers would hold 512 MiB of it, which a process run under an address-space limit (as
// hostile-input tests and some batch systems do) runs out of. Workers run element kernels, hashes
// and inflaters with small frames; 2 MiB leaves them a wide margin.
constexpr size_t kWorkerStackBytes = size_t{2} << 20;

struct WorkerStart {
  Pool* pool;
  uint32_t index;
};

void* RunWorker(void* arg) {
  const WorkerStart start = *static_cast<WorkerStart*>(arg);
  delete static_cast<WorkerStart*>(arg);
  start.pool->WorkerLoop(start.index);
  return nullptr;
}

// Starts worker `index` detached; false when the system refuses a thread.
bool StartWorker(Pool* pool, uint32_t index) {
  pthread_attr_t attr;
  if (::pthread_attr_init(&attr) != 0) return false;
  ::pthread_attr_setstacksize(&attr, kWorkerStackBytes);
  ::pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  auto* start = new (std::nothrow) WorkerStart{pool, index};
  pthread_t thread;
  const bool started = start != nullptr && ::pthread_create(&thread, &attr, RunWorker, start) == 0;
  if (!started) delete start;
  ::pthread_attr_destroy(&attr);
  return started;
}

}  // namespace

SmallStackThread::SmallStackThread(std::function<void()> fn) : fn_(std::move(fn)) {
  static_assert(sizeof(pthread_t) == sizeof(thread_), "pthread_t is an unsigned long on Linux");
  pthread_attr_t attr;
  if (::pthread_attr_init(&attr) != 0) return;
  ::pthread_attr_setstacksize(&attr, kWorkerStackBytes);
  pthread_t thread;
  started_ = ::pthread_create(&thread, &attr, [](void* self) -> void* {
    static_cast<SmallStackThread*>(self)->fn_();
    return nullptr;
  }, this) == 0;
  ::pthread_attr_destroy(&attr);
  if (started_) thread_ = thread;
}

SmallStackThread::~SmallStackThread() {
  if (started_) ::pthread_join(static_cast<pthread_t>(thread_), nullptr);
}

void RunPieces(uint64_t count, const std::function<void(uint64_t)>& fn) {
  if (count == 0) return;
  const uint32_t helpers = static_cast<uint32_t>(std::min<uint64_t>(ThreadCount(), count)) - 1;
  Pool* pool = g_pool;
  std::unique_lock<std::mutex> job(pool->job_mutex, std::try_to_lock);
  if (helpers == 0 || !job.owns_lock()) {
    for (uint64_t piece = 0; piece < count; ++piece) fn(piece);
    return;
  }
  std::call_once(g_atfork_once, [] { ::pthread_atfork(nullptr, nullptr, ForgetWorkersInChild); });
  {
    std::lock_guard<std::mutex> lock(pool->mutex);
    while (pool->started < helpers) {
      // Fewer threads than asked (a process, container or address-space limit): the others carry
      // the work.
      if (!StartWorker(pool, pool->started)) break;
      ++pool->started;
    }
    pool->fn = &fn;
    pool->count = count;
    pool->next = 0;
    pool->stop = false;
    pool->error_piece = UINT64_MAX;
    pool->error = nullptr;
    pool->wanted = std::min(helpers, pool->started);
    pool->busy = pool->wanted;
    ++pool->generation;
  }
  pool->wake.notify_all();
  pool->Work();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(pool->mutex);
    pool->finished.wait(lock, [&] { return pool->busy == 0; });
    error = pool->error;
    pool->error = nullptr;
    pool->fn = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace trove
