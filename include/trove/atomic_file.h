// trove/atomic_file.h: writing files and directories that appear whole or not at all.
//
// AtomicFile writes into an unnamed file in the destination's directory (O_TMPFILE; a hidden
// temporary name where the filesystem lacks it) and Commit() links or renames it over the
// destination (a new destination is linked in one step). Until Commit() the destination is
// untouched; if the process fails, dies or destroys the object first, nothing is left (with
// O_TMPFILE) and the old file stays intact. Replacing takes a hidden name for an instant before
// the rename: a writer killed just then leaves that name, which the next writer of the same
// destination removes (each writer holds an flock on its file, so only orphans are taken).
// Large writes of bytes that are a view of a MappedFile are copied by the kernel from that file
// (CopyMappedBytes).
// AtomicDirectory does the same for a directory tree: it is built under a hidden temporary name
// beside the destination and swapped in by Commit() (an existing destination is exchanged
// atomically with renameat2(RENAME_EXCHANGE), then removed). A writer killed outright (SIGKILL,
// power loss) cannot remove its temporary tree: each AtomicDirectory holds an flock on its own
// tree, and the next AtomicDirectory for the same destination removes the unlocked (orphaned)
// `.NAME.trove-tmp-*` trees it finds beside it.
// Durability (below) decides what a power loss or kernel crash can do; a failed or killed
// process never leaves a partial destination under either.
// Neither class is thread-safe; use one from one thread.
#pragma once

#include <cstdint>
#include <string>

namespace trove {

// What Commit() promises against a power loss or kernel crash (against a failed or killed process
// both promise the same: the destination is whole or untouched).
enum class Durability {
  // The default, as cp, torch.save and tensordict write: a new destination is not fsync'ed, so a
  // power loss shortly after Commit may lose it (an empty or short file can then appear under its
  // name). Replacing an existing destination makes the new contents durable before the swap, so
  // what was there can never be lost.
  kReplaceSafe,
  // Durable before it appears (`--sync`; LevelDB's WriteOptions::sync): fsync (syncfs for a
  // tree) before the link or rename, then of the directory. Once Commit returns, the destination
  // survives a power loss. Writeback starts while the data is written (src/core/write_behind.h),
  // so the final fsync waits only for the tail; still, the write runs at the disk's speed.
  kDurable,
};

class AtomicFile {
 public:
  explicit AtomicFile(std::string destination, Durability durability = Durability::kReplaceSafe);  // throws Error(kIo)
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void Write(const void* data, uint64_t size);  // throws Error(kIo) naming the destination
  void WriteAt(uint64_t offset, const void* data, uint64_t size);  // patch already-written bytes
  uint64_t position() const { return position_; }
  const std::string& destination() const { return destination_; }
  // Whether Commit will fsync (see sync_); a destination made meanwhile is fsync'ed too.
  bool syncs() const { return sync_; }
  void Commit();

 private:
  void Flush();
  std::string destination_;
  std::string temp_path_;  // empty when the file is unnamed (O_TMPFILE)
  int fd_ = -1;
  uint64_t position_ = 0;
  std::string buffer_;
  // Whether Commit fsyncs: kDurable, or a destination that exists (when writing begins, or by
  // Commit). Writeback is started early (src/core/write_behind.h) only when this is known at the
  // start: otherwise it would compete with the copy for nothing.
  bool sync_ = false;
  uint64_t writeback_started_ = 0;
  bool committed_ = false;
};

class AtomicDirectory {
 public:
  // Creates the temporary directory.
  explicit AtomicDirectory(std::string destination, Durability durability = Durability::kReplaceSafe);
  ~AtomicDirectory();  // removes the temporary tree unless committed
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  // Where to build the tree (an empty directory beside the destination).
  const std::string& path() const { return temp_path_; }
  const std::string& destination() const { return destination_; }
  // Whether Commit syncs the tree (see AtomicFile::sync_): writers of its files start writeback
  // early only then.
  bool syncs() const { return sync_; }
  void Commit();

 private:
  std::string destination_;
  std::string temp_path_;
  bool sync_ = false;
  int lock_fd_ = -1;  // the temporary tree, flock'ed while this writer lives
  bool committed_ = false;
};

}  // namespace trove
