// Document -> tensordict directory (format version 1), built under AtomicDirectory.
//
// The tree is created first, then the leaf files are written, then each level's meta.json (so
// even inside the temporary tree a level is complete once it has one). Leaves whose bytes are
// held contiguously in their source go to the kernel (WriteOut: copy_file_range from a mapped
// file, else write(2)); they never touch a mapped page in this process, so several threads can
// write them at once: the kernel copies into two files on two cores (one file's writers are
// serialized by its inode lock; two files' are not). Leaves that must be gathered, cast or
// byte-swapped read mapped pages, which only the calling thread may do (a truncated source
// raises SIGBUS there, and only that thread runs under the caller's guard; see
// RunGuardingTruncation), so it writes those, before starting any helper.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "formats/tensordict/td_names.h"
#include "core/progress.h"
#include "core/write_behind.h"
#include "formats/tensordict/write_plan.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/tensordict.h"

namespace trove {
namespace {

// Threads writing leaves at once, the caller's included. Past a few, the copies are bound by
// memory bandwidth or the disk rather than by a core, and each thread holds a file open.
constexpr unsigned kMaxLeafWriters = 4;

struct LeafJob {
  const tensordict::PlannedFile* file;
  std::string path;
};

// `progress` counts the bytes of files holding tensors (from any thread: it serializes its calls).
void WritePlannedFile(const tensordict::PlannedFile& f, const std::string& path, bool syncs, ProgressReporter& progress) {
  // O_EXCL|O_NOFOLLOW: the temporary tree is ours and empty; anything already there is an error.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) Fail(ErrorCode::kIo, path + ": " + std::strerror(errno));
  try {
    uint64_t written = 0;
    uint64_t writeback_started = 0;
    uint64_t* writeback = syncs ? &writeback_started : nullptr;
    const bool counted = !f.tensors.empty() && progress.active();
    f.Emit([&](const uint8_t* p, size_t n) {
      WriteOut(fd, p, n, path, written, writeback);
      if (counted) progress.Add(n);
    });
    if (syncs) WriteBehind(fd, written, writeback_started, /*complete=*/true);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) Fail(ErrorCode::kIo, path + ": " + std::strerror(errno));
}

// Whether writing `f` leaves every byte to the kernel (see the top of this file).
bool KernelWritable(const tensordict::PlannedFile& f) {
  if (!f.bytes.empty() || f.tensors.empty()) return false;
  // A compressed .tdz leaf (deferred bytes) is inflated from the mapped archive by whoever
  // streams it: that reads mapped pages, which only the calling thread may (under its guard).
  return std::all_of(f.tensors.begin(), f.tensors.end(), [](const TensorView* t) {
    std::optional<SharedBytes> stored = t->StoredBytes();
    return stored && !stored->deferred();
  });
}

// Makes the directories of `dir` under `path` and lists its leaves (into `threaded` or
// `own_thread`) and its meta.json files, deepest first.
void PlanJobs(const tensordict::PlannedDir& dir, const std::string& path, std::vector<LeafJob>& threaded,
              std::vector<LeafJob>& own_thread, std::vector<LeafJob>& metas) {
  for (const auto& f : dir.files) {
    (KernelWritable(f) ? threaded : own_thread).push_back({&f, path + "/" + f.name});
  }
  for (const auto& d : dir.dirs) {
    const std::string sub = path + "/" + d->name;
    if (::mkdir(sub.c_str(), 0755) != 0) Fail(ErrorCode::kIo, sub + ": " + std::strerror(errno));
    PlanJobs(*d, sub, threaded, own_thread, metas);
  }
  metas.push_back({&dir.meta, path + "/meta.json"});
}

// Writes `jobs` from the calling thread and `helpers` more; the first error stops the others
// from starting new files and is rethrown by Finish once they have all finished.
class LeafWriters {
 public:
  LeafWriters(const std::vector<LeafJob>& jobs, bool syncs, ProgressReporter& progress)
      : jobs_(jobs), syncs_(syncs), progress_(progress) {}

  void Start(unsigned helpers) {
    for (unsigned i = 0; i < helpers; ++i) {
      try {
        helpers_.emplace_back([this] { Work(); });
      } catch (const std::system_error&) {
        break;  // no more threads to be had: the ones running (and this one) do the work
      }
    }
  }
  // Joins in, waits for the helpers and rethrows the first error.
  void Finish() {
    Work();
    Join();
    if (error_) std::rethrow_exception(error_);
  }
  // On the way out by an exception of the caller's own: stop and wait, never leave a helper behind.
  ~LeafWriters() {
    stop_ = true;
    Join();
  }

 private:
  void Work() {
    for (size_t i; !stop_ && (i = next_.fetch_add(1)) < jobs_.size();) {
      try {
        WritePlannedFile(*jobs_[i].file, jobs_[i].path, syncs_, progress_);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
        stop_ = true;
      }
    }
  }
  void Join() {
    for (std::thread& t : helpers_) {
      if (t.joinable()) t.join();
    }
  }

  const std::vector<LeafJob>& jobs_;
  const bool syncs_;
  ProgressReporter& progress_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::exception_ptr error_;
  std::vector<std::thread> helpers_;
};

void WritePlannedTree(const tensordict::PlannedDir& root, const std::string& path, bool syncs, ProgressReporter& progress) {
  std::vector<LeafJob> threaded, own_thread, metas;
  PlanJobs(root, path, threaded, own_thread, metas);
  // The leaves that read mapped pages go first, on this thread: the truncation guard is per thread
  // (RunGuardingTruncation), and helpers only ever hand bytes to the kernel.
  for (const LeafJob& j : own_thread) WritePlannedFile(*j.file, j.path, syncs, progress);
  LeafWriters writers(threaded, syncs, progress);
  const size_t threads = std::min<size_t>({std::max(1u, std::thread::hardware_concurrency()), kMaxLeafWriters,
                                           threaded.size()});
  writers.Start(threads > 1 ? static_cast<unsigned>(threads - 1) : 0);
  writers.Finish();
  progress.Finish();
  for (const LeafJob& j : metas) WritePlannedFile(*j.file, j.path, syncs, progress);
}

}  // namespace

void WriteTensordictDir(const Document& doc, const std::string& dir, const TensordictWriteOptions& options) {
  WithFile(dir, [&] {
    auto plan = tensordict::PlanTensordict(doc, options.note);  // every refusal happens before anything is created
    AtomicDirectory out(dir, options.durability, OutputKind::kTree, tensordict::IsTensordictFileName);
    ProgressReporter progress(options.progress, tensordict::TensorBytes(*plan));
    WritePlannedTree(*plan, out.path(), out.syncs(), progress);
    out.Commit();
  });
}

}  // namespace trove
