// The files of a tensordict directory, opened without ever leaving the root (see tree_source.h).
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "formats/tensordict/level_reader.h"
#include "formats/tensordict/tree_source.h"
#include "core/file_descriptor.h"
#include "trove/error.h"

namespace trove::tensordict {

std::string JoinRel(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

namespace {

// Leaves of at most this many bytes are read into memory rather than mapped: a mapping costs a
// kernel mapping (a process gets ~65,530, vm.max_map_count) and a page of memory once touched,
// more than the bytes themselves; at kMaxLeaves such leaves hold at most 64 MiB.
constexpr uint64_t kCopiedLeafBytes = 512;
// Leaf files mapped at once by one tree. Each is a mapping of its own; past vm.max_map_count
// (65,530 by default) mmap fails and so does every allocation malloc would map, so trove stops
// at half of it, leaving room for the process's other mappings. Real trees with this many large
// leaves are not tensordicts one loads either (each of its leaves is a memmap too).
constexpr uint64_t kMaxMappedLeafFiles = uint64_t{1} << 15;

bool IsPlainComponent(const std::string& c) {
  return !c.empty() && c != "." && c != ".." && c.find('/') == std::string::npos && c.find('\0') == std::string::npos;
}

class DirectorySource final : public TreeSource {
 public:
  explicit DirectorySource(std::string root) : root_(std::move(root)) {
    // The root itself is what the user named: following a symlink to it is their choice.
    root_fd_ = Fd(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (root_fd_.get() < 0) {
      int err = errno;
      Fail(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, root_ + ": " + std::strerror(err));
    }
  }

  std::optional<SharedBytes> ReadSmallFile(const std::string& dir, const std::string& name,
                                           uint64_t max_bytes) override {
    Fd fd = OpenFile(dir, name);
    if (fd.get() < 0) return std::nullopt;
    uint64_t size = FileSize(fd, dir, name);
    if (size > max_bytes) {
      Fail(ErrorCode::kLimit, Describe(dir, name) + ": " + std::to_string(size) + " bytes is more than the " +
                                  std::to_string(max_bytes) + " allowed for this file");
    }
    std::vector<uint8_t> bytes(static_cast<size_t>(size));
    ReadAt(fd, dir, name, bytes.data(), size);
    Record(dir, name, size);
    return SharedBytes::FromVector(std::move(bytes));
  }

  // The first `size` bytes of the file.
  void ReadAt(const Fd& fd, const std::string& dir, const std::string& name, uint8_t* out, uint64_t size) {
    WithContext(Describe(dir, name), [&] { PreadExactly(fd.get(), out, size, 0); });
  }

  std::optional<LeafBytes> OpenLeaf(const std::string& dir, const std::string& name, uint64_t needed,
                                    uint64_t) override {
    Fd fd = OpenFile(dir, name);
    if (fd.get() < 0) return std::nullopt;
    uint64_t size = FileSize(fd, dir, name);
    LeafBytes out;
    out.location = JoinRel(dir, name);
    if (size < needed) {
      Fail(ErrorCode::kCorrupt, Describe(dir, name) + ": file has " + std::to_string(size) + " bytes, the leaf needs " +
                                    std::to_string(needed));
    }
    Record(dir, name, size);
    if (needed == 0) return out;
    if (needed <= kCopiedLeafBytes) {
      std::vector<uint8_t> bytes(static_cast<size_t>(needed));
      ReadAt(fd, dir, name, bytes.data(), needed);
      out.bytes = SharedBytes::FromVector(std::move(bytes));
      out.zero_copy = false;
      return out;
    }
    if (++mapped_leaves_ > kMaxMappedLeafFiles) {
      Fail(ErrorCode::kLimit, Describe(dir, name) + ": more than kMaxMappedLeafFiles (" +
                                  std::to_string(kMaxMappedLeafFiles) + ") leaf files of more than " +
                                  std::to_string(kCopiedLeafBytes) +
                                  " bytes: each is a mapping of its own, and the kernel allows a process ~65,530 "
                                  "(vm.max_map_count)");
    }
    // Only the prefix the leaf needs is mapped: trailing bytes (tensordict's own artifacts have
    // some) are never looked at.
    void* m = ::mmap(nullptr, static_cast<size_t>(needed), PROT_READ, MAP_SHARED, fd.get(), 0);
    if (m == MAP_FAILED) Fail(ErrorCode::kIo, Describe(dir, name) + ": mmap: " + std::strerror(errno));
    // Registered so that a SIGBUS (the file truncated under the mapping) can name this file.
    std::shared_ptr<const void> owner = OwnMapping(m, needed, Describe(dir, name));
    out.bytes = SharedBytes::OfMapping(owner, static_cast<const uint8_t*>(m), needed);
    return out;
  }

  bool HasFile(const std::string& dir, const std::string& name) override {
    return StatKind(dir, name) == S_IFREG;
  }

  bool HasDir(const std::string& dir, const std::string& name) override {
    return StatKind(dir, name) == S_IFDIR;
  }

  // The file type bits of dir/name (0 when absent); a symlink is refused.
  unsigned StatKind(const std::string& dir, const std::string& name) {
    if (!IsPlainComponent(name)) return 0;
    int dfd = DirFd(dir);
    struct stat st {};
    if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return 0;
      Fail(ErrorCode::kIo, Describe(dir, name) + ": " + std::strerror(errno));
    }
    if (S_ISLNK(st.st_mode)) Fail(ErrorCode::kRefused, Describe(dir, name) + ": is a symlink (refused: it could leave the folder)");
    return st.st_mode & S_IFMT;
  }

  std::vector<std::string> ListDirs(const std::string& dir) override {
    int dfd = ::dup(DirFd(dir));
    if (dfd < 0) Fail(ErrorCode::kIo, Describe(dir, "") + ": " + std::strerror(errno));
    DIR* d = ::fdopendir(dfd);
    if (d == nullptr) {
      ::close(dfd);
      Fail(ErrorCode::kIo, Describe(dir, "") + ": " + std::strerror(errno));
    }
    ::rewinddir(d);
    std::vector<std::string> names;
    uint64_t seen = 0;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      // A level is one directory: its listing is bounded as its keys are.
      if (++seen > kMaxEntriesPerLevel) {
        ::closedir(d);
        Fail(ErrorCode::kLimit, Describe(dir, "") + ": more than kMaxEntriesPerLevel (" +
                                    std::to_string(kMaxEntriesPerLevel) + ") entries in one directory");
      }
      struct stat st {};
      // Symlinked directories are not listed: they could lead anywhere.
      if (::fstatat(::dirfd(d), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string Describe(const std::string& dir, const std::string& name) const override {
    std::string rel = JoinRel(dir, name);
    return rel.empty() ? root_ : root_ + "/" + rel;
  }

 private:
  // The directory `dir` (relative), opened one component at a time without following symlinks.
  // The last one is cached: the reader works level by level.
  int DirFd(const std::string& dir) {
    if (dir.empty()) return root_fd_.get();
    if (cached_fd_.get() >= 0 && cached_dir_ == dir) return cached_fd_.get();
    Fd current;
    int parent = root_fd_.get();
    size_t start = 0;
    std::string walked;
    for (;;) {
      size_t slash = dir.find('/', start);
      std::string comp = dir.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      walked = JoinRel(walked, comp);
      if (!IsPlainComponent(comp)) Fail(ErrorCode::kRefused, Describe(walked, "") + ": path component refused");
      int fd = ::openat(parent, comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) {
        int err = errno;
        if (err == ELOOP || err == ENOTDIR) {
          struct stat st {};
          if (::fstatat(parent, comp.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            Fail(ErrorCode::kRefused, Describe(walked, "") + ": is a symlink (refused: it could leave the folder)");
        }
        Fail(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, Describe(walked, "") + ": " + std::strerror(err));
      }
      current = Fd(fd);
      parent = fd;
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    cached_fd_ = std::move(current);
    cached_dir_ = dir;
    return cached_fd_.get();
  }

  // -1 (as an empty Fd) when the file does not exist.
  Fd OpenFile(const std::string& dir, const std::string& name) {
    if (!IsPlainComponent(name)) Fail(ErrorCode::kRefused, Describe(dir, name) + ": file name refused");
    int dfd = DirFd(dir);
    // What it is before it is opened: a device, FIFO or socket planted in the folder is never
    // opened (opening some devices acts), a link never followed (the format has none).
    struct stat before {};
    if (::fstatat(dfd, name.c_str(), &before, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Fd();
      Fail(ErrorCode::kIo, Describe(dir, name) + ": " + std::strerror(errno));
    }
    if (S_ISLNK(before.st_mode)) Fail(ErrorCode::kRefused, Describe(dir, name) + ": is a symlink (refused: it could leave the folder)");
    if (!S_ISREG(before.st_mode)) Fail(ErrorCode::kCorrupt, Describe(dir, name) + ": not a regular file (not opened)");
    // O_NONBLOCK: a FIFO swapped in meanwhile must not hang the reader (regular files ignore it).
    int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT) return Fd();
      if (err == ELOOP) Fail(ErrorCode::kRefused, Describe(dir, name) + ": is a symlink (refused: it could leave the folder)");
      Fail(ErrorCode::kIo, Describe(dir, name) + ": " + std::strerror(err));
    }
    struct stat after {};
    if (::fstat(fd, &after) != 0 || after.st_dev != before.st_dev || after.st_ino != before.st_ino) {
      ::close(fd);
      Fail(ErrorCode::kIo, Describe(dir, name) + ": changed while being opened");
    }
    return Fd(fd);
  }

  uint64_t FileSize(const Fd& fd, const std::string& dir, const std::string& name) {
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) Fail(ErrorCode::kIo, Describe(dir, name) + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) Fail(ErrorCode::kCorrupt, Describe(dir, name) + ": not a regular file");
    return static_cast<uint64_t>(st.st_size);
  }

  void Record(const std::string& dir, const std::string& name, uint64_t size) {
    ContainerRecord r;
    r.name = JoinRel(dir, name);
    r.size = size;
    r.stored_size = size;
    r.method = "file";
    records_.push_back(std::move(r));
  }

  std::string root_;
  Fd root_fd_;
  uint64_t mapped_leaves_ = 0;  // against kMaxMappedLeafFiles
  Fd cached_fd_;
  std::string cached_dir_;
};

}  // namespace

std::unique_ptr<TreeSource> MakeDirectorySource(const std::string& root) {
  return std::make_unique<DirectorySource>(root);
}

}  // namespace trove::tensordict
