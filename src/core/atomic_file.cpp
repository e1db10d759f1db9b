#include "trove/atomic_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/write_behind.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

// Writes are gathered into this much memory before reaching the kernel; large writes bypass it.
constexpr size_t kWriteBufferBytes = size_t{1} << 20;

[[noreturn]] void FailErrno(const std::string& what, int err) {
  Fail(err == ENOSPC ? ErrorCode::kIo : ErrorCode::kIo, what + ": " + std::strerror(err));
}

std::string ParentDir(const std::string& path) {
  fs::path p = fs::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

std::string HiddenSibling(const std::string& destination) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  fs::path p(destination);
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".trove-tmp-%08llx", static_cast<unsigned long long>(rng() & 0xFFFFFFFFu));
  std::string name = "." + p.filename().string() + suffix;
  return (p.parent_path().empty() ? fs::path(name) : p.parent_path() / name).string();
}

void FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Removes what earlier writers of `destination` left when they died without cleaning up
// (SIGKILL, power loss): a directory writer's temporary tree, or a file writer's hidden name
// (a replacing Commit links the file there just before renaming it over the destination). A
// live writer holds an flock on its tree or file, so only orphans are taken; failures are ignored
// (an orphan is only wasted space, never visible as the destination).
void RemoveOrphans(const std::string& destination) {
  fs::path dest(destination);
  const std::string prefix = "." + dest.filename().string() + ".trove-tmp-";
  fs::path parent = dest.parent_path().empty() ? fs::path(".") : dest.parent_path();
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0 || name.size() != prefix.size() + 8) continue;
    std::error_code sec;
    if (it->is_symlink(sec)) continue;
    const bool tree = it->is_directory(sec);
    if (!tree && !it->is_regular_file(sec)) continue;
    int fd = ::open(it->path().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (tree ? O_DIRECTORY : 0));
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::error_code rec;
      fs::remove_all(it->path(), rec);
    }
    ::close(fd);
  }
}

}  // namespace

AtomicFile::AtomicFile(std::string destination, Durability durability) : destination_(std::move(destination)) {
  if (destination_.empty()) Fail(ErrorCode::kUsage, "empty output path");
  if (fs::is_directory(destination_)) Fail(ErrorCode::kIo, destination_ + ": is a directory");
  std::error_code ec;
  sync_ = durability == Durability::kDurable || fs::exists(fs::symlink_status(destination_, ec));
  RemoveOrphans(destination_);
  const std::string dir = ParentDir(destination_);
  fd_ = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    if (errno == ENOENT) FailErrno(destination_, ENOENT);
    if (errno == EACCES || errno == EROFS) FailErrno(destination_, errno);
    for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
      temp_path_ = HiddenSibling(destination_);
      fd_ = ::open(temp_path_.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST) FailErrno(destination_, errno);
    }
    if (fd_ < 0) FailErrno(destination_, EEXIST);
  }
  // Marks the file as ours for as long as this writer lives, under any name it gets (see
  // RemoveOrphans).
  ::flock(fd_, LOCK_EX | LOCK_NB);
  buffer_.reserve(kWriteBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFile::Flush() {
  uint64_t at = position_ - buffer_.size();  // what the file holds so far
  WriteOut(fd_, reinterpret_cast<const uint8_t*>(buffer_.data()), buffer_.size(), destination_, at,
           sync_ ? &writeback_started_ : nullptr);
  buffer_.clear();
}

void AtomicFile::Write(const void* data, uint64_t size) {
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + size <= kWriteBufferBytes) {
    buffer_.append(p, static_cast<size_t>(size));
  } else {
    Flush();
    if (size < kWriteBufferBytes) {
      buffer_.append(p, static_cast<size_t>(size));
    } else {
      WriteOut(fd_, reinterpret_cast<const uint8_t*>(p), size, destination_, position_,
               sync_ ? &writeback_started_ : nullptr);
      return;
    }
  }
  position_ += size;
}

void AtomicFile::WriteAt(uint64_t offset, const void* data, uint64_t size) {
  Flush();
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::pwrite(fd_, p, static_cast<size_t>(size), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      FailErrno(destination_, errno);
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<uint64_t>(n);
  }
}

void AtomicFile::Commit() {
  Flush();
  ThrowIfMappedFileChanged();  // what was read from a changed source never appears
  // A destination made while we wrote is replaced too, so what it holds is protected as well.
  std::error_code ec;
  if (!sync_ && fs::exists(fs::symlink_status(destination_, ec))) sync_ = true;
  if (sync_ && ::fsync(fd_) != 0) FailErrno(destination_, errno);
  if (temp_path_.empty()) {
    char proc[64];
    std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd_);
    // A new destination: the unnamed file becomes it in one step, and nothing else ever exists.
    if (::linkat(AT_FDCWD, proc, AT_FDCWD, destination_.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      committed_ = true;
      ::close(fd_);
      fd_ = -1;
      if (sync_) FsyncDir(ParentDir(destination_));
      return;
    }
    if (errno != EEXIST) FailErrno(destination_, errno);
    // Made in the instant since the check above: replaced all the same.
    if (!sync_ && ::fsync(fd_) != 0) FailErrno(destination_, errno);
    sync_ = true;
    // Replacing a file: link can't replace, so give the file a hidden name and rename that over
    // the destination. Killed in between, the hidden name is left; the next writer removes it.
    for (int attempt = 0; attempt < 16; ++attempt) {
      std::string name = HiddenSibling(destination_);
      if (::linkat(AT_FDCWD, proc, AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
        temp_path_ = name;
        break;
      }
      if (errno != EEXIST) FailErrno(destination_, errno);
    }
    if (temp_path_.empty()) FailErrno(destination_, EEXIST);
  }
  if (::rename(temp_path_.c_str(), destination_.c_str()) != 0) {
    int err = errno;
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
    FailErrno(destination_, err);
  }
  committed_ = true;
  ::close(fd_);
  fd_ = -1;
  if (sync_) FsyncDir(ParentDir(destination_));
}

AtomicDirectory::AtomicDirectory(std::string destination, Durability durability)
    : destination_(std::move(destination)) {
  while (!destination_.empty() && destination_.size() > 1 && destination_.back() == '/') destination_.pop_back();
  if (destination_.empty()) Fail(ErrorCode::kUsage, "empty output path");
  const bool exists = fs::exists(destination_);
  if (exists && !fs::is_directory(destination_))
    Fail(ErrorCode::kIo, destination_ + ": exists and is not a directory");
  sync_ = durability == Durability::kDurable || exists;
  RemoveOrphans(destination_);
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string name = HiddenSibling(destination_);
    if (::mkdir(name.c_str(), 0777) == 0) {
      temp_path_ = name;
      // Marks the tree as ours for as long as this process lives (see RemoveOrphans).
      lock_fd_ = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (lock_fd_ >= 0) ::flock(lock_fd_, LOCK_EX | LOCK_NB);
      return;
    }
    if (errno != EEXIST) FailErrno(destination_, errno);
  }
  FailErrno(destination_, EEXIST);
}

AtomicDirectory::~AtomicDirectory() {
  if (!committed_ && !temp_path_.empty()) {
    std::error_code ec;
    fs::remove_all(temp_path_, ec);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void AtomicDirectory::Commit() {
  ThrowIfMappedFileChanged();  // what was read from a changed source never appears
  std::error_code ec;
  // A destination made meanwhile is replaced: protect it as if it had been there from the start.
  const bool exists = fs::exists(destination_);
  if (sync_ || exists) {
    // The files are durable before they become visible: one syncfs for the whole tree (a
    // per-file fsync costs a journal commit per file).
    int fd = ::open(temp_path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      if (::syncfs(fd) != 0) FailErrno(destination_, errno);
      ::close(fd);
    }
    FsyncDir(temp_path_);
    sync_ = true;
  }
  if (exists) {
    if (::renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, destination_.c_str(), RENAME_EXCHANGE) != 0)
      FailErrno(destination_, errno);
    committed_ = true;
    fs::remove_all(temp_path_, ec);  // now holds the old tree
  } else {
    if (::rename(temp_path_.c_str(), destination_.c_str()) != 0) FailErrno(destination_, errno);
    committed_ = true;
  }
  if (sync_) FsyncDir(ParentDir(destination_));
}

}  // namespace trove
