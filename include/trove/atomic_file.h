// trove/atomic_file.h: writing files and directories that appear whole or not at all.
//
// AtomicFile writes into an unnamed file in the destination's directory (O_TMPFILE; a hidden
// temporary name where the filesystem lacks it) and Commit() links or renames it over the
// destination (a new destination is linked in one step). Until Commit() the destination is
// untouched; if the process fails, dies or destroys the object first, nothing is left (with
// O_TMPFILE) and the old file stays intact. Replacing takes a hidden name for an instant before
// the rename: a writer killed just then leaves that name, which the next writer in that directory
// removes (each writer holds an flock on its file, so only orphans are taken).
// Large writes of bytes that are a view of a MappedFile are copied by the kernel from that file
// (CopyMappedBytes).
// AtomicDirectory does the same for a directory tree: it is built under a hidden temporary name
// beside the destination and swapped in by Commit() (an existing destination is exchanged
// atomically with renameat2(RENAME_EXCHANGE), then removed). A writer killed outright (SIGKILL,
// power loss) cannot remove its temporary tree: each AtomicDirectory holds an flock on its own
// tree, and the next writer in that directory removes the unlocked (orphaned) `.NAME.trove-tmp-*`
// trees it finds there.
// Durability (below) decides what a power loss or kernel crash can do; a failed or killed
// process never leaves a partial destination under either.
// Before it writes anything, each checks its destination against the one destination rule
// (CheckDestination below): an existing destination is replaced only when it is what trove writes
// there, and never when it is `/`, the working directory or a parent of it, or a source this
// process reads (SourceGuard) or a directory containing one.
// Every writer removes the orphans of every destination name in its directory, not only its own.
// Signals: with InstallWriteSignalHandlers, SIGINT, SIGTERM, SIGHUP and SIGPIPE during a write make
// the write loops throw, so the writers' destructors remove their temporaries and the
// program can exit with 128 + the signal.
// Neither class is thread-safe; use one from one thread. SourceGuard and the signal state are.
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

// What an existing destination may be for a writer to replace it.
enum class Replace {
  // Only what trove writes there: a regular file (or a symlink to one) for a file output; for a
  // directory output, a directory whose root holds a regular file meta.json (a tensordict), or an
  // empty directory.
  kOwnKind,
  // `--force`: any existing file or directory, still atomically. Never `/`, the working
  // directory or a parent of it, nor a source or a directory containing one.
  kAnything,
};

enum class OutputKind { kFile, kDirectory };

// The one destination rule, used by AtomicFile and AtomicDirectory (and callable by a CLI that
// wants to refuse before reading anything). Throws Error(kRefused) naming the destination and why
// it is not replaced; returns when a writer may create or replace it.
void CheckDestination(const std::string& destination, OutputKind kind, Replace replace = Replace::kOwnKind);

// Marks `path` (a file or directory this process reads) as a source for as long as the guard
// lives: CheckDestination refuses it, a symlink to it, and every directory containing it.
// Thread-safe.
class SourceGuard {
 public:
  explicit SourceGuard(const std::string& path);
  ~SourceGuard();
  SourceGuard(const SourceGuard&) = delete;
  SourceGuard& operator=(const SourceGuard&) = delete;

 private:
  std::string canonical_;
};

// Installs handlers for SIGINT, SIGTERM, SIGHUP and SIGPIPE (for programs such as the trove CLI;
// call once, early). While no AtomicFile or AtomicDirectory lives, such a signal ends the process
// at once with exit status 128 + signal. During a write it is recorded: the write loops throw
// Error(kIo, "interrupted by SIG...") at their next step (ThrowIfInterrupted), the writers'
// destructors remove their temporaries, and the program should then exit with 128 +
// InterruptSignal(). A second signal ends the process at once (a temporary tree it leaves is an
// orphan that the next writer in that directory removes). SIGALRM is taken too: after a signal
// it interrupts, every second, a blocking call the main thread entered just after the signal.
void InstallWriteSignalHandlers();

// The signal recorded during a write, or 0.
int InterruptSignal();

// Throws Error(kIo) when a handled signal arrived during a write. Write loops call it per step.
void ThrowIfInterrupted();

class AtomicFile {
 public:
  // Throws Error(kRefused) when CheckDestination refuses the destination, Error(kIo) when the
  // temporary cannot be made.
  explicit AtomicFile(std::string destination, Durability durability = Durability::kReplaceSafe,
                      Replace replace = Replace::kOwnKind);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void Write(const void* data, uint64_t size);  // throws Error(kIo) naming the destination
  void WriteAt(uint64_t offset, const void* data, uint64_t size);  // patch already-written bytes
  uint64_t position() const { return position_; }
  // A path that reads what has been written so far (after flushing), e.g. to check the output
  // before Commit; valid until Commit or destruction.
  std::string PathForReading();
  const std::string& destination() const { return destination_; }
  // Whether Commit will fsync (see sync_); a destination made meanwhile is fsync'ed too.
  bool syncs() const { return sync_; }
  void Commit();

 private:
  void Flush();
  std::string destination_;
  std::string temp_path_;  // empty when the file is unnamed (O_TMPFILE)
  Replace replace_;
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
  // Creates the temporary directory (after CheckDestination, as AtomicFile).
  explicit AtomicDirectory(std::string destination, Durability durability = Durability::kReplaceSafe,
                           Replace replace = Replace::kOwnKind);
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
