// .tdz -> directory: every entry extracted under AtomicDirectory, never outside it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "formats/tensordict/td_names.h"
#include "core/progress.h"
#include "core/write_behind.h"
#include "formats/tensordict/level_reader.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/tensor.h"
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

// The expansion rule for an archive written out as files: its compressed entries together may
// inflate to at most kMaxInflateRatio times the bytes all its entries occupy (above
// kExpandFreeBytes), as for every other write; the error names the entry of the highest ratio.
void CheckInflation(const ZipReader& zip) {
  uint64_t occupied = 0, inflated = 0;
  const ZipEntry* most = nullptr;
  auto ratio = [](const ZipEntry& e) { return e.uncompressed_size / std::max<uint64_t>(e.compressed_size, 1); };
  for (const ZipEntry& e : zip.entries()) {
    occupied = occupied > UINT64_MAX - e.compressed_size ? UINT64_MAX : occupied + e.compressed_size;
    if (e.method == static_cast<uint16_t>(ZipMethod::kStored)) continue;
    inflated = inflated > UINT64_MAX - e.uncompressed_size ? UINT64_MAX : inflated + e.uncompressed_size;
    if (most == nullptr || ratio(e) > ratio(*most)) most = &e;
  }
  if (most == nullptr || !InflatesBeyondRule(inflated, occupied)) return;
  Fail(ErrorCode::kLimit, "entry '" + most->name + "' inflates " + std::to_string(most->compressed_size) + " bytes to " +
                              std::to_string(most->uncompressed_size) + " (" + std::to_string(ratio(*most)) +
                              ":1); the compressed entries would write " + std::to_string(inflated) + " bytes from the " +
                              std::to_string(occupied) + " the archive's entries occupy: more than kMaxInflateRatio (" +
                              std::to_string(kMaxInflateRatio) + ":1), a decompression bomb's ratio; --allow-expand "
                              "writes it anyway");
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
  if (!options.allow_expand) WithFile(archive, [&] { CheckInflation(zip); });
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
          // A compressed entry is inflated window by window as it is written (ReadDeferred), never
          // held whole; a stored one is copied from the mapping.
          SharedBytes payload = zip.ReadDeferred(e);
          uint64_t written = 0, writeback_started = 0;
          const std::string where = "entry '" + e.name + "'";
          if (payload.deferred()) {
            payload.Stream([&](const uint8_t* p, size_t n) {
              WriteOut(fd, p, n, where, written, out.syncs() ? &writeback_started : nullptr);
              progress.Add(n);
            });
          } else {
            WriteOut(fd, payload.data(), payload.size(), where, written, out.syncs() ? &writeback_started : nullptr);
            progress.Add(payload.size());
          }
          if (out.syncs()) WriteBehind(fd, written, writeback_started, /*complete=*/true);
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
