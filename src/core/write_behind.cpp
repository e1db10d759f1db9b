#include "core/write_behind.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace {

// Requests waiting for the helper. Beyond this the writer submits its own request: the disk is
// behind anyway, and the queue (each entry holds a descriptor) stays small.
constexpr size_t kMaxQueuedRequests = 64;

struct Request {
  int fd;  // a duplicate, closed by whoever submits the request
  uint64_t offset;
  uint64_t length;
};

void Submit(const Request& r) {
  // Only a hint: an error here resurfaces from the fsync that makes the file durable.
  ::sync_file_range(r.fd, static_cast<off64_t>(r.offset), static_cast<off64_t>(r.length), SYNC_FILE_RANGE_WRITE);
  ::close(r.fd);
}

class WritebackQueue {
 public:
  // Never destroyed: the detached helper may still be waiting on it while the process exits.
  static WritebackQueue& Get() {
    static WritebackQueue* queue = [] {
      auto* q = new WritebackQueue();
      // A child of fork() has the queue but not the helper thread: the child starts its own,
      // and drops (closes) the requests it inherited. The mutex is held across fork so that the
      // child never inherits it locked.
      ::pthread_atfork([] { Get().mutex_.lock(); }, [] { Get().mutex_.unlock(); },
                       [] {
                         WritebackQueue& self = Get();
                         for (const Request& r : self.pending_) ::close(r.fd);
                         self.pending_.clear();
                         self.started_ = false;
                         // The parent's helper was waiting on the condition variable, and a
                         // waiter that does not exist in the child can block a signal on it
                         // forever: the child gets a fresh one (the old one is left as it is).
                         self.ready_ = new std::condition_variable();
                         self.mutex_.unlock();
                       });
      return q;
    }();
    return *queue;
  }

  void Push(const Request& r) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!started_) {
        try {
          std::thread([this] { Run(); }).detach();
          started_ = true;
        } catch (const std::system_error&) {
          // No thread to be had: submit in the writer's thread (below).
        }
      }
      if (started_ && pending_.size() < kMaxQueuedRequests) {
        pending_.push_back(r);
        ready_->notify_one();
        return;
      }
    }
    Submit(r);
  }

 private:
  void Run() {
    for (;;) {
      Request r;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_->wait(lock, [this] { return !pending_.empty(); });
        r = pending_.front();
        pending_.pop_front();
      }
      Submit(r);
    }
  }

  std::mutex mutex_;
  std::condition_variable* ready_ = new std::condition_variable();  // see the fork handler
  std::deque<Request> pending_;
  bool started_ = false;
};

}  // namespace

void WriteBehind(int fd, uint64_t end, uint64_t& started, bool complete) {
  if (end <= started || (!complete && end < started + kWriteBehindStepBytes)) return;
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy >= 0) {
    WritebackQueue::Get().Push({copy, started, end - started});
  } else {
    ::sync_file_range(fd, static_cast<off64_t>(started), static_cast<off64_t>(end - started), SYNC_FILE_RANGE_WRITE);
  }
  started = end;
}

void WriteOut(int fd, const uint8_t* data, uint64_t size, const std::string& name, uint64_t& written,
              uint64_t* writeback_started) {
  // Steps of this size keep a signal's wait for the write loop short (ThrowIfInterrupted).
  constexpr uint64_t kStepBytes = uint64_t{64} << 20;
  bool kernel_copies = true;
  while (size > 0) {
    ThrowIfInterrupted();
    const uint64_t step = std::min(size, kStepBytes);
    uint64_t n = 0;
    if (kernel_copies) {
      n = CopyMappedBytes(fd, data, step, name);
      kernel_copies = n == step;  // else the kernel cannot copy from there: write(2) the rest
    }
    if (n == 0) {
      const ssize_t w = ::write(fd, data, static_cast<size_t>(step));
      if (w < 0) {
        if (errno == EINTR) continue;
        // write(2) from a mapping truncated under us fails with EFAULT rather than SIGBUS.
        if (errno == EFAULT && !MappedFileAt(data).empty()) FailChangedWhileRead(MappedFileAt(data));
        Fail(ErrorCode::kIo, name + ": " + std::strerror(errno));
      }
      n = static_cast<uint64_t>(w);
    }
    data += n;
    size -= n;
    written += n;
    if (writeback_started) WriteBehind(fd, written, *writeback_started);
  }
}

}  // namespace trove
