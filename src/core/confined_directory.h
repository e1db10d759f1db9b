// core/confined_directory.h: the one rule for opening a file that another file names.
//
// Files name other files: an index its shards, a shard manifest its .psk.d files, a tensordict
// its levels and leaves. Such a name is the file's word, not the user's, so it is resolved only
// inside the directory the user named (the index's directory, the tensordict's root):
//   - it is relative, '/'-separated, every component a plain name (not empty, ".", "..", nor
//     holding NUL or a backslash, at most NAME_MAX bytes), at most kMaxNamedPathBytes in all;
//   - every component is opened with O_NOFOLLOW: a symbolic link anywhere on the way is refused,
//     with one exception, the layout where most users' weights live: the Hugging Face cache,
//     whose `<repo>/snapshots/<revision>/` files are relative links into the same repository's
//     `blobs/` (a link is followed only when the directory is inside such a snapshot and the
//     link leads, lexically, to a plain file name directly in `<repo>/blobs/`);
//   - the file must be a regular file, which is checked (fstatat without following) before it is
//     opened, so a FIFO, socket or device is never opened; it is then opened with O_NONBLOCK and
//     O_NOFOLLOW and checked again with fstat (the same file, still regular) before any read;
//   - nothing of a refused file is ever read, and errors quote only the name the file gave.
// The links in the user's own path (the directory they named) are followed: the user chose them.
// FileIdentity tells files apart whatever names reach them, so that walkers visit each file once.
// A ConfinedDirectory holds one descriptor of its directory for its lifetime. Its methods are
// thread-safe (they only use *at() calls on that descriptor).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/file_descriptor.h"

namespace trove {

// Longest name a file may give for another file (Linux's PATH_MAX): longer names are refused
// before any lookup.
inline constexpr size_t kMaxNamedPathBytes = 4096;
// Links followed while resolving one name (the kernel's own limit is 40): real layouts use one.
inline constexpr int kMaxLinkHops = 8;

// A file as the kernel knows it, whatever path reached it.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const FileIdentity&) const = default;
  auto operator<=>(const FileIdentity&) const = default;
};

// A regular file opened by the rule above. The descriptor is the file that was checked.
struct ConfinedFile {
  Fd fd;
  std::string path;  // the directory's path joined with the name, for messages and MappedFile
  uint64_t size = 0;
  FileIdentity identity;
};

class ConfinedDirectory {
 public:
  // Opens the directory the user named. Throws Error(kNotFound/kIo) naming it, or
  // Error(kUnsupported) when it is not a directory.
  static std::shared_ptr<const ConfinedDirectory> Open(const std::string& path);

  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }

  // The regular file `name` names, or nullopt when nothing has that name. Throws Error(kRefused)
  // for a name or link the rule refuses and for anything but a regular file (naming what it is),
  // Error(kIo) when the operating system refuses. Errors carry the name as their context; the
  // caller sets the file that gave the name.
  std::optional<ConfinedFile> OpenFile(std::string_view name) const;
  // OpenFile, with a missing file an Error(kNotFound).
  ConfinedFile RequireFile(std::string_view name) const;

  // Throws Error(kRefused) unless `name` is a name the rule accepts (its form only; nothing is
  // looked up).
  static void CheckName(std::string_view name);

 private:
  ConfinedDirectory() = default;
  std::string path_;
  Fd fd_;
  // The repository directory when this directory lies inside a Hugging Face cache snapshot
  // (`<repo>/snapshots/<revision>[/...]`), whose blobs its links may reach; empty otherwise.
  std::string hf_repository_;
  // This directory's canonical path, for resolving the cache's relative links lexically.
  std::string canonical_;
};

// Opens the file the user named for reading, never blocking (O_NONBLOCK: a FIFO is refused, not
// waited on) and never reading anything but a regular file. Throws Error(kNotFound/kIo) naming
// the path, Error(kUnsupported) for a directory or special file, Error(kUsage) for an empty path.
ConfinedFile OpenUserFile(const std::string& path);

}  // namespace trove
