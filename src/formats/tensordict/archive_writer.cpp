// Document -> .tdz archive, and directory -> .tdz (pack), both through ZipWriter's tensordict
// layout under AtomicFile.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "core/progress.h"
#include "formats/tensordict/level_reader.h"
#include "formats/tensordict/td_names.h"
#include "formats/tensordict/write_plan.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/tensordict.h"
#include "trove/zip_writer.h"

namespace trove {
namespace {

// The spec's alignment of stored `.memmap` payloads: one cache line, and a multiple of every
// element size, so each leaf can be viewed in place in the mapped archive. Large leaves copied
// from a mapped source are placed page-congruent with it (PlacementFor), still at a multiple
// of this.
constexpr uint64_t kLeafAlignment = 64;
// pack copies files through a buffer of this size: memory stays flat whatever the leaf size.
constexpr size_t kPackChunkBytes = size_t{1} << 20;

// `at`: where a stored leaf payload goes (see PlacementFor).
void BeginArchiveEntry(ZipWriter& zip, const std::string& name, ZipMethod compression,
                       ZipPlacement at = {kLeafAlignment, 0}) {
  // Compression and alignment apply to leaf payloads only; metadata and pickles stay stored.
  if (!tensordict::IsMemmapName(name)) {
    zip.BeginEntry(name, ZipMethod::kStored, 0);
  } else if (compression == ZipMethod::kStored) {
    zip.BeginEntry(name, ZipMethod::kStored, at.align, kZipUnknownSize, at.phase);
  } else {
    zip.BeginEntry(name, compression, 0);
  }
}

void EmitPlannedDir(const tensordict::PlannedDir& dir, const std::string& prefix, ZipWriter& zip,
                    ZipMethod compression, ProgressReporter& progress) {
  auto emit = [&](const tensordict::PlannedFile& f) {
    const std::optional<SharedBytes> whole =
        f.bytes.empty() && f.tensors.size() == 1 ? f.tensors[0]->StoredBytes() : std::nullopt;
    BeginArchiveEntry(zip, prefix + f.name, compression,
                      whole ? PlacementFor(*whole, kLeafAlignment) : ZipPlacement{kLeafAlignment, 0});
    const bool counted = !f.tensors.empty() && progress.active();
    f.Emit(
        [&](const uint8_t* p, size_t n) {
          zip.Write(p, n);
          if (counted) progress.Add(n);
        },
        [&](const SharedBytes& b) {
          zip.WriteBytes(b);
          if (counted) progress.Add(b.size());
        });
    zip.EndEntry();
  };
  emit(dir.meta);
  for (const auto& f : dir.files) emit(f);
  for (const auto& d : dir.dirs) EmitPlannedDir(*d, prefix + d->name + "/", zip, compression, progress);
}

// --- pack: the files of a directory, walked without following symlinks -----------------------

struct DirListing {
  std::vector<std::string> files;  // meta.json first, then by name
  std::vector<std::string> dirs;   // by name
};

DirListing ListForPack(int dfd, const std::string& where) {
  int dup_fd = ::dup(dfd);
  if (dup_fd < 0) Fail(ErrorCode::kIo, where + ": " + std::strerror(errno));
  DIR* d = ::fdopendir(dup_fd);
  if (d == nullptr) {
    ::close(dup_fd);
    Fail(ErrorCode::kIo, where + ": " + std::strerror(errno));
  }
  ::rewinddir(d);  // the duplicate shares dfd's position: a directory listed before is listed whole again
  DirListing out;
  bool has_meta = false;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    struct stat st {};
    if (::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      ::closedir(d);
      Fail(ErrorCode::kIo, where + "/" + n + ": " + std::strerror(errno));
    }
    if (S_ISREG(st.st_mode)) {
      if (n == "meta.json") has_meta = true; else out.files.push_back(n);
    } else if (S_ISDIR(st.st_mode)) {
      out.dirs.push_back(n);
    } else {
      ::closedir(d);
      Fail(ErrorCode::kRefused, where + "/" + n + (S_ISLNK(st.st_mode) ? ": is a symlink (refused)" : ": not a regular file"));
    }
  }
  ::closedir(d);
  std::sort(out.files.begin(), out.files.end());
  std::sort(out.dirs.begin(), out.dirs.end());
  if (has_meta) out.files.insert(out.files.begin(), "meta.json");
  return out;
}

// The bytes of the regular files under `dfd` (what pack's progress counts), walked as PackDir walks.
uint64_t PackBytes(int dfd, const std::string& where, int depth) {
  if (depth > tensordict::kMaxLevelDepth) return 0;  // PackDir refuses it
  DirListing listing = ListForPack(dfd, where);
  uint64_t total = 0;
  for (const std::string& name : listing.files) {
    struct stat st {};
    if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) total += static_cast<uint64_t>(st.st_size);
  }
  for (const std::string& name : listing.dirs) {
    int sub = ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) continue;  // PackDir reports it
    try {
      total += PackBytes(sub, where + "/" + name, depth + 1);
    } catch (...) {
      ::close(sub);
      throw;
    }
    ::close(sub);
  }
  return total;
}

void PackDir(int dfd, const std::string& where, const std::string& prefix, int depth, ZipWriter& zip,
             ZipMethod compression, std::vector<uint8_t>& buffer, ProgressReporter& progress) {
  if (depth > tensordict::kMaxLevelDepth) {
    Fail(ErrorCode::kLimit, where + ": nested deeper than kMaxLevelDepth (" +
                                std::to_string(tensordict::kMaxLevelDepth) + ")");
  }
  DirListing listing = ListForPack(dfd, where);
  for (const std::string& name : listing.files) {
    int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) Fail(ErrorCode::kIo, where + "/" + name + ": " + std::strerror(errno));
    try {
      // The payload comes from offset 0 of its file: a large one starts a page (so that
      // unpacking copies whole pages).
      struct stat st {};
      if (::fstat(fd, &st) != 0) Fail(ErrorCode::kIo, where + "/" + name + ": " + std::strerror(errno));
      BeginArchiveEntry(zip, prefix + name, compression,
                        PlacementFor(0, static_cast<uint64_t>(st.st_size), kLeafAlignment));
      off_t at = 0;
      for (;;) {
        ssize_t n = ::pread(fd, buffer.data(), buffer.size(), at);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) Fail(ErrorCode::kIo, where + "/" + name + ": " + std::strerror(errno));
        if (n == 0) break;
        zip.Write(buffer.data(), static_cast<uint64_t>(n));
        progress.Add(static_cast<uint64_t>(n));
        at += n;
      }
      // The entry's placement (and the leaf's meaning) came from the size it had when opened.
      if (at != st.st_size) FailChangedWhileRead(where + "/" + name);
      zip.EndEntry();
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }
  for (const std::string& name : listing.dirs) {
    int sub = ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) Fail(ErrorCode::kIo, where + "/" + name + ": " + std::strerror(errno));
    try {
      PackDir(sub, where + "/" + name, prefix + name + "/", depth + 1, zip, compression, buffer, progress);
    } catch (...) {
      ::close(sub);
      throw;
    }
    ::close(sub);
  }
}

}  // namespace

void WriteTdz(const Document& doc, const std::string& path, const TensordictWriteOptions& options) {
  WithFile(path, [&] {
    auto plan = tensordict::PlanTensordict(doc, options.note);  // every refusal happens before anything is created
    AtomicFile out(path, options.durability);
    ZipWriter zip(out, ZipLayout::kTensordict);
    ProgressReporter progress(options.progress, tensordict::TensorBytes(*plan));
    EmitPlannedDir(*plan, "", zip, options.compression, progress);
    progress.Finish();
    zip.Finish();
    out.Commit();
  });
}

void PackTdz(const std::string& dir, const std::string& archive, const TensordictWriteOptions& options) {
  SourceGuard source(dir);
  int root = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) Fail(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, dir + ": " + std::strerror(errno));
  try {
    struct stat st {};
    if (::fstatat(root, "meta.json", &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      Fail(ErrorCode::kNotFound, dir + ": no meta.json (not a tensordict directory)");
    }
    AtomicFile out(archive, options.durability);
    ZipWriter zip(out, ZipLayout::kTensordict);
    std::vector<uint8_t> buffer(kPackChunkBytes);
    WithFile(archive, [&] {
      ProgressReporter progress(options.progress, options.progress ? PackBytes(root, dir, 0) : 0);
      PackDir(root, dir, "", 0, zip, options.compression, buffer, progress);
      progress.Finish();
    });
    zip.Finish();
    out.Commit();
  } catch (...) {
    ::close(root);
    throw;
  }
  ::close(root);
}

}  // namespace trove
