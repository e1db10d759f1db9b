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
// (CheckDestination below): trove never deletes a file it did not write. An existing destination
// is replaced only when it is what the writer writes there (a file for a file; for a tree, a
// directory holding only the files its format writes); a writer of files into a directory
// (shards and their index) replaces only its own files there and leaves every other file as it
// is. Never `/`; as a tree, never the working directory or a parent of it, nor a directory
// containing a source this process reads (SourceGuard); as a file, never one inside a directory
// source. A source itself may be the destination (converting a file in place: it is replaced by
// rename once the new one is whole, as any destination is).
// Every writer removes the orphans of every destination name in its directory, not only its own.
// Neither class is thread-safe; use one from one thread. SourceGuard and the signal state are.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

// What a writer writes at its destination, and so what it may replace there.
enum class OutputKind {
  // One file. An existing destination must be a regular file (or a link to one: the link is
  // replaced, never written through).
  kFile,
  // A directory tree that replaces the destination whole (a tensordict). An existing destination
  // must be a directory that is empty or holds, in every sub-directory, only files the writer's
  // format writes (OwnFileTest); any other file there stops the write.
  kTree,
  // Files written into a directory (a sharded checkpoint's shards and index, a dataset's shards
  // and manifest). An existing directory stays (the working directory too), with every file in
  // it the writer does not write; files of the same names as the writer's are replaced, each
  // under AtomicFile's rule for a file. A missing one is made as a tree is.
  kFilesInDirectory,
};

// Whether a file (by its name alone) is of the kind a kTree writer's format writes: such files
// are replaced with the tree; any other stops the write. Null: only an empty directory is
// replaced.
using OwnFileTest = bool (*)(std::string_view name);

// The one destination rule, used by AtomicFile and AtomicDirectory (and callable by a CLI that
// wants to refuse before reading anything). Throws Error(kRefused) naming the destination and why
// it is not replaced; returns when a writer may create or replace it.
void CheckDestination(const std::string& destination, OutputKind kind, OwnFileTest own = nullptr);

// Whether `path` is a source this process reads (a SourceGuard lives for it): a writer that
// removes stale files of its own kind (an earlier sharding's shards) never removes a source.
bool IsGuardedSource(const std::string& path);

// Whether a source may also be the destination, replaced in place once the new output is whole
// (`trove convert m.pt m.pt`): only where the output is the same data in a form the user asked
// for. A text corpus, an archive being unpacked or a model a report describes never is.
enum class InPlace { kRefused, kAllowed };

// Marks `path` (a file or directory this process reads) as a source for as long as the guard
// lives: CheckDestination refuses every directory containing it as a tree destination, and it
// itself (or a symlink to it) unless every guard of it says InPlace::kAllowed. Thread-safe.
class SourceGuard {
 public:
  explicit SourceGuard(const std::string& path, InPlace in_place = InPlace::kRefused);
  ~SourceGuard();
  SourceGuard(const SourceGuard&) = delete;
  SourceGuard& operator=(const SourceGuard&) = delete;

 private:
  std::string canonical_;
  InPlace in_place_;
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
  explicit AtomicFile(std::string destination, Durability durability = Durability::kReplaceSafe);
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
  // Replacing an existing file, the new one takes its owner and permission bits.
  void Commit();

 private:
  void Flush();
  void KeepOwnerAndMode();
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
  // Creates the temporary directory (after CheckDestination, as AtomicFile). `kind` is kTree or
  // kFilesInDirectory.
  explicit AtomicDirectory(std::string destination, Durability durability = Durability::kReplaceSafe,
                           OutputKind kind = OutputKind::kTree, OwnFileTest own = nullptr);
  ~AtomicDirectory();  // removes the temporary tree unless committed
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  // Where to build the tree (an empty directory beside the destination).
  const std::string& path() const { return temp_path_; }
  const std::string& destination() const { return destination_; }
  // Whether Commit syncs the tree (see AtomicFile::sync_): writers of its files start writeback
  // early only then.
  bool syncs() const { return sync_; }
  // kFilesInDirectory into an existing directory: the tree's files move in one by one, in name
  // order, `name` after all others (an index after the shards it names). Call before Commit.
  void MoveLast(std::string name) { last_ = std::move(name); }
  // kTree, or a destination that did not exist: the tree replaces it in one step.
  // kFilesInDirectory into an existing directory: its files move in (each replacing a file of
  // the same name in one step); the rest of the directory stays as it was.
  void Commit();

 private:
  std::string destination_;
  OutputKind kind_;
  OwnFileTest own_;
  std::string last_;
  std::string temp_path_;
  bool sync_ = false;
  int lock_fd_ = -1;  // the temporary tree, flock'ed while this writer lives
  bool committed_ = false;
};

}  // namespace trove
