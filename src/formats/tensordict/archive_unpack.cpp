// .tdz -> directory: every entry extracted under AtomicDirectory, never outside it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "formats/tensordict/td_names.h"
#include "core/progress.h"
#include "core/write_behind.h"
#include "formats/tensordict/level_reader.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/tensordict.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

std::vector<std::string> SafeComponents(const std::string& name) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t slash = name.find('/', start);
    std::string c = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    // ZipReader already refuses "..", leading '/', '\\' and NUL; this is the writer's own check.
    if (c == "." || c == ".." || c.find('\0') != std::string::npos || c.find('\\') != std::string::npos ||
        (c.empty() && slash != std::string::npos)) {
      Fail(ErrorCode::kRefused, "entry '" + name + "': name would leave the destination (refused)");
    }
    parts.push_back(c);  // the last one is empty for a directory entry ("a/b/")
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (parts.size() > static_cast<size_t>(tensordict::kMaxLevelDepth) + 1) {
    Fail(ErrorCode::kLimit, "entry '" + name + "': nested deeper than kMaxLevelDepth");
  }
  return parts;
}

// Opens (creating as needed) the directory made of parts[0..n) under root, never following a
// symlink. Returns an fd the caller closes.
int OpenDirChain(int root, const std::vector<std::string>& parts, size_t n, const std::string& entry) {
  int current = ::dup(root);
  if (current < 0) Fail(ErrorCode::kIo, std::strerror(errno));
  for (size_t i = 0; i < n; ++i) {
    if (::mkdirat(current, parts[i].c_str(), 0755) != 0 && errno != EEXIST) {
      int err = errno;
      ::close(current);
      Fail(ErrorCode::kIo, "entry '" + entry + "': " + std::strerror(err));
    }
    int next = ::openat(current, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    ::close(current);
    if (next < 0) Fail(ErrorCode::kRefused, "entry '" + entry + "': '" + parts[i] + "' is not a directory: " + std::strerror(err));
    current = next;
  }
  return current;
}

}  // namespace

void UnpackTdz(const std::string& archive, const std::string& dir, Durability durability) {
  TensordictWriteOptions options;
  options.durability = durability;
  UnpackTdz(archive, dir, options);
}

void UnpackTdz(const std::string& archive, const std::string& dir, const TensordictWriteOptions& options) {
  SourceGuard source(archive);
  auto file = MappedFile::Open(archive);  // its errors name the path already
  auto zip = WithFile(archive, [&] { return ZipReader(file); });
  if (zip.Find("meta.json") == nullptr) {
    Fail(ErrorCode::kCorrupt, archive + ": not a tensordict archive (no top-level meta.json entry)");
  }
  AtomicDirectory out(dir, options.durability, OutputKind::kTree, tensordict::IsTensordictFileName);
  uint64_t total = 0;
  for (const ZipEntry& e : zip.entries()) total += e.uncompressed_size;
  ProgressReporter progress(options.progress, total);
  int root = ::open(out.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) Fail(ErrorCode::kIo, out.path() + ": " + std::strerror(errno));
  try {
    WithFile(archive, [&] {
      for (const ZipEntry& e : zip.entries()) {
        std::vector<std::string> parts = SafeComponents(e.name);
        const bool is_dir = parts.back().empty();
        int dfd = OpenDirChain(root, parts, parts.size() - 1, e.name);
        if (is_dir) {
          ::close(dfd);
          continue;
        }
        // Python's extractall checks each CRC while reading; so does unpack.
        if (!zip.CheckCrc(e)) {
          ::close(dfd);
          Fail(ErrorCode::kCorrupt, "entry '" + e.name + "': CRC-32 mismatch");
        }
        int fd = ::openat(dfd, parts.back().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        int err = errno;
        ::close(dfd);
        if (fd < 0) Fail(ErrorCode::kIo, "entry '" + e.name + "': " + std::strerror(err));
        try {
          SharedBytes payload = zip.Read(e);
          uint64_t written = 0, writeback_started = 0;
          WriteOut(fd, payload.data(), payload.size(), "entry '" + e.name + "'", written,
                   out.syncs() ? &writeback_started : nullptr);
          if (out.syncs()) WriteBehind(fd, written, writeback_started, /*complete=*/true);
          progress.Add(payload.size());
        } catch (...) {
          ::close(fd);
          throw;
        }
        if (::close(fd) != 0) Fail(ErrorCode::kIo, "entry '" + e.name + "': " + std::strerror(errno));
      }
    });
  } catch (...) {
    ::close(root);
    throw;
  }
  ::close(root);
  progress.Finish();
  out.Commit();
}

}  // namespace trove
