#include "trove/atomic_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "core/write_behind.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

// Writes are gathered into this much memory before reaching the kernel; writes of at least
// kDirectWriteBytes bypass it (a system call per 256 KiB costs far less than copying them into
// the buffer: a cast's 512 KiB output windows spent 5% of a convert in that copy).
constexpr size_t kWriteBufferBytes = size_t{1} << 20;
constexpr size_t kDirectWriteBytes = size_t{256} << 10;

[[noreturn]] void FailErrno(const std::string& what, int err) {
  throw Error(ErrorCode::kIo, std::strerror(err)).SetFile(what);
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

constexpr char kTempMark[] = ".trove-tmp-";
constexpr size_t kTempSuffixDigits = 8;

// Whether `name` is a hidden temporary some trove writer names (HiddenSibling):
// `.NAME.trove-tmp-XXXXXXXX`, eight hex digits.
bool IsTemporaryName(const std::string& name) {
  const size_t mark = sizeof kTempMark - 1;
  if (name.size() < 1 + mark + kTempSuffixDigits || name[0] != '.') return false;
  const size_t at = name.size() - kTempSuffixDigits - mark;
  if (name.compare(at, mark, kTempMark) != 0) return false;
  for (size_t i = name.size() - kTempSuffixDigits; i < name.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

// Removes what earlier writers in `destination`'s directory left when they died without
// cleaning up (SIGKILL, power loss): a directory writer's temporary tree, or a file writer's hidden
// name (a replacing Commit links the file there just before renaming it over the destination),
// whatever destination they were writing. A live writer holds an flock on its tree or file, so
// only orphans are taken; failures are ignored (an orphan is only wasted space, never visible as
// a destination).
void RemoveOrphans(const std::string& destination) {
  fs::path dest(destination);
  fs::path parent = dest.parent_path().empty() ? fs::path(".") : dest.parent_path();
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!IsTemporaryName(name)) continue;
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

// ---- The destination rule.

// The absolute path with every symlink resolved (as far as it exists) and no trailing slash.
std::string Canonical(const std::string& path) {
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  if (ec) return path;
  fs::path c = fs::weakly_canonical(abs, ec);
  std::string out = (ec ? abs.lexically_normal() : c).string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// Whether `dir` is `path` or a directory containing it (both canonical).
bool IsSelfOrParent(const std::string& dir, const std::string& path) {
  if (dir == path) return true;
  if (dir == "/") return true;
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

struct SourceRegistry {
  struct Guards {
    int live = 0;
    int refusing_in_place = 0;  // guards with InPlace::kRefused
  };
  std::mutex mutex;
  std::map<std::string, Guards> sources;  // canonical path -> its live guards
};

SourceRegistry& Sources() {
  static SourceRegistry* r = new SourceRegistry;  // never destroyed: guards may outlive statics
  return *r;
}

// Walks must stay bounded whatever the directory holds: a tree writer's destination with more
// entries than this is refused rather than listed (a tensordict of this many files is already
// beyond what trove writes).
constexpr size_t kMaxCheckedTreeEntries = size_t{1} << 20;

// The first file in `dir` (any depth) that `own` does not accept, as a relative path; "" when every
// file is one the writer's format writes. Links, FIFOs and devices are never own files.
std::string FirstForeignFile(const std::string& dir, OwnFileTest own) {
  std::error_code ec;
  size_t seen = 0;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  if (ec) return ".";
  for (; it != end; it.increment(ec)) {
    if (ec) return ".";
    if (++seen > kMaxCheckedTreeEntries) return "(more than kMaxCheckedTreeEntries entries)";
    std::error_code sec;
    const fs::file_status st = it->symlink_status(sec);
    if (fs::is_directory(st)) continue;
    const std::string name = it->path().filename().string();
    if (fs::is_regular_file(st) && (IsTemporaryName(name) || (own != nullptr && own(name)))) continue;
    return it->path().lexically_relative(dir).string();
  }
  return "";
}

// ---- Signals during writes.

std::atomic<int> g_live_writers{0};
volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_nudged = 0;  // the handler's own pthread_kill of the main thread
pthread_t g_main_thread;

constexpr int kWriteSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

void OnWriteSignal(int sig) {
  const bool on_main = ::pthread_equal(::pthread_self(), g_main_thread) != 0;
  if (on_main && g_nudged) {
    g_nudged = 0;  // only there to make a blocking call on the main thread return EINTR
    return;
  }
  if (g_live_writers.load() == 0 || g_signal != 0) ::_exit(128 + sig);
  g_signal = sig;
  if (!on_main) {
    g_nudged = 1;
    ::pthread_kill(g_main_thread, sig);
  }
  // The signal may have come just before the main thread entered a blocking call, which then
  // would not return: SIGALRM interrupts it again every second until the write loop sees g_signal.
  ::alarm(1);
}

void OnNudge(int) {
  if (g_signal == 0) return;
  if (::pthread_equal(::pthread_self(), g_main_thread) == 0) ::pthread_kill(g_main_thread, SIGALRM);
  ::alarm(1);
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    default: return "a signal";
  }
}

// Counts a live writer for the signal handler (see InstallWriteSignalHandlers).
struct LiveWriter {
  static void Enter() { g_live_writers.fetch_add(1); }
  static void Leave() { g_live_writers.fetch_sub(1); }
};

}  // namespace

void CheckDestination(const std::string& destination, OutputKind kind, OwnFileTest own) {
  if (destination.empty()) Fail(ErrorCode::kUsage, "empty output path");
  // The system would take the name up to the NUL: another file than the one named.
  if (destination.find('\0') != std::string::npos)
    Fail(ErrorCode::kUsage, "the output path holds a NUL character, which no file name can");
  auto refuse = [&](const std::string& why) {
    throw Error(ErrorCode::kRefused, why + "; nothing was written").SetFile(destination);
  };
  const std::string target = Canonical(destination);
  if (target == "/") refuse("is the root directory");
  std::error_code ec;
  // A tree replaces its destination whole; files written into a directory leave it and every
  // other file in it as they are, so shards may go into the working directory.
  const fs::path cwd = fs::current_path(ec);
  if (kind == OutputKind::kTree && !ec && IsSelfOrParent(target, Canonical(cwd.string())))
    refuse("is the working directory or a directory containing it");
  {
    SourceRegistry& r = Sources();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& [source, guards] : r.sources) {
      // The source itself may be replaced in place (by rename once the new one is whole) when
      // its readers allow it, and files may be written beside it; a tree never replaces a
      // directory holding a source.
      if (target == source) {
        if (guards.refusing_in_place > 0) refuse("is a source of this command (it is not replaced by its own output)");
        continue;
      }
      // A file inside a directory source (a tensordict's leaf or meta.json, a model folder's
      // shard) is part of it: replaced by an output of another kind, that source would be left
      // damaged. (A new file beside its files is written; a directory is converted in place by
      // naming it as the destination.)
      struct stat inside {};
      if (kind == OutputKind::kFile && IsSelfOrParent(source, target) && ::lstat(target.c_str(), &inside) == 0)
        refuse("is a file of '" + source + "', a source of this command (replacing it would damage that source)");
      if (kind != OutputKind::kTree) continue;
      if (IsSelfOrParent(target, source)) refuse("contains '" + source + "', a source of this command");
    }
  }
  struct stat link {};
  if (::lstat(destination.c_str(), &link) != 0) return;  // new (or unreachable: the writer says why)
  struct stat st {};
  const bool resolves = ::stat(destination.c_str(), &st) == 0;
  if (kind == OutputKind::kFile) {
    // A dangling symlink only loses the link, as `cp` would replace it.
    if (!resolves && S_ISLNK(link.st_mode)) return;
    if (resolves && S_ISREG(st.st_mode)) return;
    refuse(std::string(S_ISDIR(st.st_mode) ? "is a directory" : "exists and is not a regular file") +
           ", not a file this command writes (trove never replaces what it did not write)");
  }
  if (!resolves || !S_ISDIR(st.st_mode)) refuse("exists and is not a directory");
  if (kind == OutputKind::kFilesInDirectory) return;  // every other file there stays
  if (const std::string foreign = FirstForeignFile(destination, own); !foreign.empty()) {
    refuse("is a directory holding '" + foreign + "', which this command does not write (trove never deletes what "
           "it did not write: choose a new or empty directory)");
  }
}

namespace {

// A file that files written into a directory replace: a regular file (or a link, replaced) and no
// source of this command that refuses being replaced.
void CheckReplacedFile(const std::string& path) {
  struct stat link {}, st {};
  if (::lstat(path.c_str(), &link) != 0) return;
  if (!S_ISLNK(link.st_mode) && !S_ISREG(link.st_mode)) {
    throw Error(ErrorCode::kRefused, "exists and is not a regular file, not a file this command writes; nothing was written")
        .SetFile(path);
  }
  if (S_ISLNK(link.st_mode) && ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw Error(ErrorCode::kRefused, "leads to what is not a regular file, not a file this command writes; nothing was written")
        .SetFile(path);
  }
  const std::string target = Canonical(path);
  SourceRegistry& r = Sources();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (auto it = r.sources.find(target); it != r.sources.end() && it->second.refusing_in_place > 0) {
    throw Error(ErrorCode::kRefused, "is a source of this command (it is not replaced by its own output); nothing was written")
        .SetFile(path);
  }
}

}  // namespace

bool IsGuardedSource(const std::string& path) {
  const std::string canonical = Canonical(path);
  SourceRegistry& r = Sources();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.sources.count(canonical) > 0;
}

SourceGuard::SourceGuard(const std::string& path, InPlace in_place) : canonical_(Canonical(path)), in_place_(in_place) {
  SourceRegistry& r = Sources();
  std::lock_guard<std::mutex> lock(r.mutex);
  SourceRegistry::Guards& g = r.sources[canonical_];
  ++g.live;
  if (in_place_ == InPlace::kRefused) ++g.refusing_in_place;
}

SourceGuard::~SourceGuard() {
  SourceRegistry& r = Sources();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.sources.find(canonical_);
  if (it == r.sources.end()) return;
  if (in_place_ == InPlace::kRefused) --it->second.refusing_in_place;
  if (--it->second.live == 0) r.sources.erase(it);
}

void InstallWriteSignalHandlers() {
  g_main_thread = ::pthread_self();
  struct sigaction action {};
  action.sa_handler = OnWriteSignal;
  sigemptyset(&action.sa_mask);
  // No SA_RESTART: a blocking read or write on the main thread returns EINTR, so the loops see
  // the signal at once.
  action.sa_flags = 0;
  for (int sig : kWriteSignals) ::sigaction(sig, &action, nullptr);
  action.sa_handler = OnNudge;
  ::sigaction(SIGALRM, &action, nullptr);
}

int InterruptSignal() { return g_signal; }

void ThrowIfInterrupted() {
  if (const int sig = g_signal) Fail(ErrorCode::kIo, std::string("interrupted by ") + SignalName(sig));
}

AtomicFile::AtomicFile(std::string destination, Durability durability)
    : destination_(std::move(destination)) {
  CheckDestination(destination_, OutputKind::kFile);
  std::error_code ec;
  sync_ = durability == Durability::kDurable || fs::exists(fs::symlink_status(destination_, ec));
  RemoveOrphans(destination_);
  const std::string dir = ParentDir(destination_);
  // Counted as live before the file exists: a signal from here on is left to the write loop,
  // which removes the file, rather than ending the process at once (with the file left, when it
  // has a name, and no word of why).
  LiveWriter::Enter();
  try {
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
  } catch (...) {
    if (fd_ >= 0) {
      ::close(fd_);
      if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
    }
    LiveWriter::Leave();
    throw;
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  LiveWriter::Leave();
}

void AtomicFile::Flush() {
  uint64_t at = position_ - buffer_.size();  // what the file holds so far
  WriteOut(fd_, reinterpret_cast<const uint8_t*>(buffer_.data()), buffer_.size(), destination_, at,
           sync_ ? &writeback_started_ : nullptr);
  buffer_.clear();
}

void AtomicFile::Write(const void* data, uint64_t size) {
  const char* p = static_cast<const char*>(data);
  if (size < kDirectWriteBytes && buffer_.size() + size <= kWriteBufferBytes) {
    buffer_.append(p, static_cast<size_t>(size));
    position_ += size;
    return;
  }
  Flush();
  if (size < kDirectWriteBytes) {
    buffer_.append(p, static_cast<size_t>(size));
    position_ += size;
    return;
  }
  WriteOut(fd_, reinterpret_cast<const uint8_t*>(p), size, destination_, position_,
           sync_ ? &writeback_started_ : nullptr);
}

void AtomicFile::WriteAt(uint64_t offset, const void* data, uint64_t size) {
  Flush();
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ThrowIfInterrupted();
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

std::string AtomicFile::PathForReading() {
  Flush();
  if (!temp_path_.empty()) return temp_path_;
  return "/proc/self/fd/" + std::to_string(fd_);
}

// A file replaced in place (`gguf set`, `refresh-checksums`, a convert onto an existing file) keeps
// its owner and permission bits, as an editor saving it would: a read-only file stays read-only,
// a group's file stays the group's. The set-id bits are not carried (an owner the write cannot
// give back would keep them). Best effort: where the owner cannot be given back (not root), the
// new file stays ours, with the old permission bits.
void AtomicFile::KeepOwnerAndMode() {
  struct stat st {};
  if (::stat(destination_.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  struct stat mine {};
  if (::fstat(fd_, &mine) == 0 && (mine.st_uid != st.st_uid || mine.st_gid != st.st_gid)) {
    (void)::fchown(fd_, st.st_uid, st.st_gid);  // EPERM unless root: the file stays ours
  }
  (void)::fchmod(fd_, st.st_mode & 0777);
}

void AtomicFile::Commit() {
  Flush();
  ThrowIfInterrupted();
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
  KeepOwnerAndMode();
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

AtomicDirectory::AtomicDirectory(std::string destination, Durability durability, OutputKind kind, OwnFileTest own)
    : destination_(std::move(destination)), kind_(kind), own_(own) {
  while (!destination_.empty() && destination_.size() > 1 && destination_.back() == '/') destination_.pop_back();
  if (kind_ == OutputKind::kFile) Fail(ErrorCode::kUsage, "AtomicDirectory writes a tree or files into a directory");
  CheckDestination(destination_, kind_, own_);
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(destination_, ec));
  sync_ = durability == Durability::kDurable || exists;
  // Files going into a directory that exists are built in a hidden tree inside it, not beside it:
  // the user named that directory, not its parent (which may be read-only, or another file system
  // when the directory is a mount point: the renames would fail with EXDEV).
  const bool inside = exists && kind_ == OutputKind::kFilesInDirectory && fs::is_directory(destination_, ec);
  const std::string sibling_of = inside ? (fs::path(destination_) / "files").string() : destination_;
  RemoveOrphans(sibling_of);
  // Counted as live before the tree exists, as AtomicFile is: a signal from here on is left to
  // the write loop, which removes the tree, rather than ending the process with no word of why.
  LiveWriter::Enter();
  try {
    for (int attempt = 0; attempt < 16; ++attempt) {
      // The tree is made under its temporary name, then locked. Between the two, another writer's
      // RemoveOrphans may take it for an orphan (unlocked) and remove it; so once locked, the tree
      // is ours only if the name still leads to the directory we locked. Otherwise try a new name.
      // Killed between mkdir and flock, an empty unlocked tree is left: the next writer takes it.
      std::string name = HiddenSibling(sibling_of);
      if (::mkdir(name.c_str(), 0777) != 0) {
        if (errno == EEXIST) continue;
        FailErrno(destination_, errno);
      }
      lock_fd_ = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (lock_fd_ < 0) {
        if (errno == ENOENT) continue;  // already taken by a cleaner
        FailErrno(destination_, errno);
      }
      struct stat locked {}, named {};
      if (::flock(lock_fd_, LOCK_EX) != 0 || ::fstat(lock_fd_, &locked) != 0 ||
          ::lstat(name.c_str(), &named) != 0 || locked.st_dev != named.st_dev || locked.st_ino != named.st_ino) {
        ::close(lock_fd_);
        lock_fd_ = -1;
        continue;
      }
      temp_path_ = name;
      return;
    }
    FailErrno(destination_, EEXIST);
  } catch (...) {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    LiveWriter::Leave();
    throw;
  }
}

AtomicDirectory::~AtomicDirectory() {
  if (!committed_ && !temp_path_.empty()) {
    std::error_code ec;
    fs::remove_all(temp_path_, ec);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (!temp_path_.empty()) LiveWriter::Leave();
}

void AtomicDirectory::Commit() {
  ThrowIfInterrupted();
  ThrowIfMappedFileChanged();  // what was read from a changed source never appears
  std::error_code ec;
  // A destination made meanwhile is replaced: protect it as if it had been there from the start.
  const bool exists = fs::exists(fs::symlink_status(destination_, ec));
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
  if (exists && kind_ == OutputKind::kFilesInDirectory) {
    // Into the directory that is there: each file in one step (a rename), the index last; the
    // directory's other files are never touched.
    CheckDestination(destination_, kind_, own_);
    std::vector<std::string> names;
    for (fs::directory_iterator it(temp_path_, ec), end; !ec && it != end; it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    if (ec) FailErrno(destination_, ec.value());
    std::sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
      return (a == last_) != (b == last_) ? b == last_ : a < b;
    });
    // Every name is checked before any moves in: a directory, device or source of this command
    // by one of the names stops the write with the destination as it was. (Files of a directory
    // being converted into itself, a model folder re-sharded, are replaced: the folder is the
    // destination the user named.)
    for (const std::string& name : names) CheckReplacedFile((fs::path(destination_) / name).string());
    for (const std::string& name : names) {
      const std::string from = (fs::path(temp_path_) / name).string();
      const std::string to = (fs::path(destination_) / name).string();
      if (::rename(from.c_str(), to.c_str()) != 0) FailErrno(to, errno);
    }
    committed_ = true;
    fs::remove_all(temp_path_, ec);  // empty now
    if (sync_) FsyncDir(destination_);
    return;
  }
  if (exists) {
    // The tree replaces the destination, which CheckDestination found to hold only files of the
    // writer's own kind (checked again: it may have changed while the tree was written).
    CheckDestination(destination_, kind_, own_);
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
