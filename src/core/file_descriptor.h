// core/file_descriptor.h: an owned POSIX file descriptor, and reads of an exact byte count at an
// offset, for readers that read a file without mapping it (tensordict leaves, safetensors shard
// headers). Fd is move-only and closes on destruction; neither is shared between threads.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "trove/error.h"

namespace trove {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  // Gives up ownership: the caller closes the descriptor.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Reads exactly n bytes at `offset` into out. Throws Error(kIo) with the system's reason, or
// "file shrank while being read" when it ends first; callers add which file.
inline void PreadExactly(int fd, uint8_t* out, uint64_t n, uint64_t offset) {
  // Bounded requests keep each call short and the offsets far from overflow.
  constexpr uint64_t kStep = uint64_t{1} << 30;
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, static_cast<size_t>(std::min(n, kStep)), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) Fail(ErrorCode::kIo, std::strerror(errno));
    if (got == 0) Fail(ErrorCode::kIo, "file shrank while being read");
    out += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

}  // namespace trove
