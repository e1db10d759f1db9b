// trove/atomic_file.h: writing files and directories that appear whole or not at all.
//
// AtomicFile writes into an unnamed file in the destination's directory (O_TMPFILE; a hidden
// temporary name where the filesystem lacks it) and Commit() flushes, fsyncs and renames it over
// the destination (a new destination is linked in one step). Until Commit() the destination is
// untouched; if the process dies or the object is destroyed first, nothing is left (with
// O_TMPFILE) and the old file stays intact. Replacing takes a hidden name for an instant before
// the rename: a writer killed just then leaves that name, which the next writer of the same
// destination removes (each writer holds an flock on its file, so only orphans are taken).
// Large writes of bytes that are a view of a MappedFile are copied by the kernel from that file
// (CopyMappedBytes), and writeback of every 16 MiB written is started at once
// (src/core/write_behind.h), so Commit's fsync waits only for the tail.
// AtomicDirectory does the same for a directory tree: it is built under a hidden temporary name
// beside the destination and swapped in by Commit() (an existing destination is exchanged
// atomically with renameat2(RENAME_EXCHANGE), then removed). A writer killed outright (SIGKILL,
// power loss) cannot remove its temporary tree: each AtomicDirectory holds an flock on its own
// tree, and the next AtomicDirectory for the same destination removes the unlocked (orphaned)
// `.NAME.trove-tmp-*` trees it finds beside it.
// Neither is thread-safe; use one from one thread.
#pragma once

#include <cstdint>
#include <string>

namespace trove {

class AtomicFile {
 public:
  explicit AtomicFile(std::string destination);  // throws Error(kIo)
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void Write(const void* data, uint64_t size);  // throws Error(kIo) naming the destination
  void WriteAt(uint64_t offset, const void* data, uint64_t size);  // patch already-written bytes
  uint64_t position() const { return position_; }
  const std::string& destination() const { return destination_; }
  void Commit();

 private:
  void Flush();
  std::string destination_;
  std::string temp_path_;  // empty when the file is unnamed (O_TMPFILE)
  int fd_ = -1;
  uint64_t position_ = 0;
  std::string buffer_;
  uint64_t writeback_started_ = 0;  // see src/core/write_behind.h
  bool committed_ = false;
};

class AtomicDirectory {
 public:
  explicit AtomicDirectory(std::string destination);  // creates the temporary directory
  ~AtomicDirectory();  // removes the temporary tree unless committed
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  // Where to build the tree (an empty directory beside the destination).
  const std::string& path() const { return temp_path_; }
  const std::string& destination() const { return destination_; }
  void Commit();

 private:
  std::string destination_;
  std::string temp_path_;
  int lock_fd_ = -1;  // the temporary tree, flock'ed while this writer lives
  bool committed_ = false;
};

}  // namespace trove
