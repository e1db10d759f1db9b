// trove/shared_bytes.h: immutable byte ranges that keep their backing memory alive.
//
// A SharedBytes is a (pointer, size) pair plus a reference-counted owner: a mapped file
// (zero-copy views of stored tensors) or owned heap memory (inflated or byte-swapped copies), or
// deferred bytes (a compressed zip entry) that are produced only when someone asks for them:
// Stream() produces them window by window in bounded memory, data() produces them whole once
// (shared by every copy and slice). Metadata commands therefore never inflate a leaf. Deferred
// bytes that are file ranges put together (a tensor assembled from a checkpoint's chunks or
// ranks) say which ranges (DeferredSource::Pieces): streaming them reads those ranges in turn,
// writers hand them to the kernel (ForEachRun), and a part of them reads only its pieces.
// Copying a SharedBytes copies the reference, never the bytes. The bytes are read-only.
// Thread-safety: like std::shared_ptr; concurrent reads of the bytes are safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace trove {

class SharedBytes;

// One pass over deferred bytes, front to back, producing them as they are read (a compressed
// entry: an inflater). Used by one thread at a time.
class DeferredReader {
 public:
  virtual ~DeferredReader() = default;
  // The next n bytes into out; never asked for bytes past the end (Error as for any read).
  virtual void Read(uint8_t* out, size_t n) = 0;
  // Moves on n bytes (still produced, not handed over).
  virtual void Skip(uint64_t n) = 0;
};

// The producer behind deferred bytes. Both members are called from any thread, maybe often.
class DeferredSource {
 public:
  virtual ~DeferredSource() = default;
  // All the bytes, held (Error as for any read).
  virtual SharedBytes Produce() const = 0;
  // A reader starting at `offset`, holding a bounded window's worth of state whatever the size:
  // every streaming read of deferred bytes (Stream, SharedBytes::Reader) goes through it, unless
  // the source gives their pieces (Pieces, below). By
  // default it reads Produce()'s bytes, for sources that can only make them whole (a tensor
  // assembled from chunks, a lazy mapping); a source that inflates streams instead.
  virtual std::unique_ptr<DeferredReader> Open(uint64_t offset) const;
  // The bytes the source holds them in when it produces them by inflating (a compressed entry's
  // compressed size), so that an expansion can be judged before anything is produced; nullopt
  // for a source that only copies or maps them.
  virtual std::optional<uint64_t> compressed_size() const { return std::nullopt; }
  // What [offset, offset + length) of the bytes are made of, in order, when the source can say so
  // without producing them: each piece is mapped or held bytes (a range of a file, which a writer
  // hands to the kernel whole: CopyMappedBytes), or deferred bytes of a source of its own that
  // streams them in bounded windows (a piece stored strided or byte-swapped). Every streaming
  // read (Stream, SharedBytes::Reader, ForEachRun) then reads only the pieces it overlaps, one
  // after another, and never holds the whole. nullopt (the default): the bytes can only be
  // produced (Produce, Open). Called with a range inside the bytes.
  virtual std::optional<std::vector<SharedBytes>> Pieces(uint64_t offset, uint64_t length) const;
};

class SharedBytes {
 public:
  SharedBytes() = default;
  SharedBytes(std::shared_ptr<const void> owner, const uint8_t* data, uint64_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}

  // Takes ownership of a vector's bytes (no copy).
  static SharedBytes FromVector(std::vector<uint8_t> bytes);
  static SharedBytes CopyOf(const void* data, uint64_t size);
  // Bytes of a shared read-only file mapping kept alive by `owner` (so Release may drop pages).
  static SharedBytes OfMapping(std::shared_ptr<const void> owner, const uint8_t* data, uint64_t size) {
    SharedBytes b(std::move(owner), data, size);
    b.mapped_ = true;
    return b;
  }

  // Bytes of `size` produced by `source` only when asked for (see the top of this file).
  static SharedBytes Deferred(std::shared_ptr<const DeferredSource> source, uint64_t size);
  // Bytes of a file mapped only when first asked for: `source` maps the file (Produce returns the
  // mapping's bytes) and its Open is never used. Unlike Deferred bytes they are cheap to ask for
  // whole, so deferred() is false and mapped() true: every reader treats them as the mapped bytes
  // they become. A sharded checkpoint's shards are mapped this way, when a tensor's bytes are read.
  static SharedBytes LazyMapped(std::shared_ptr<const DeferredSource> source, uint64_t size);

  // For deferred bytes, produces them all first (once; may throw as any read).
  const uint8_t* data() const { return deferred_ ? DeferredData() : data_; }
  uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<const uint8_t> span() const { return {data(), static_cast<size_t>(size_)}; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data()), static_cast<size_t>(size_)}; }
  // True while the bytes are deferred and nobody has asked for them whole.
  bool deferred() const;
  // For bytes a source inflates (a compressed zip entry, deferred or produced already): the
  // whole entry's compressed and inflated sizes (a slice reports its whole entry's, since reading
  // any of it inflates the entry up to there); nullopt for bytes held or mapped as they are.
  struct Compression {
    uint64_t compressed = 0;
    uint64_t inflated = 0;
  };
  std::optional<Compression> compression() const;
  // True when both are the same bytes of the same owner (never produces deferred bytes).
  bool SameBytes(const SharedBytes& other) const {
    return owner_ == other.owner_ && data_ == other.data_ && deferred_offset_ == other.deferred_offset_ &&
           size_ == other.size_;
  }

  // Where the bytes start, as a key telling the same bytes apart from others without producing
  // deferred ones: the address of held bytes; for deferred bytes (produced or not) their state
  // and the offset into it. Equal for two views of the same bytes, valid while both live.
  std::pair<const void*, uint64_t> identity() const {
    return deferred_ ? std::pair<const void*, uint64_t>(deferred_.get(), deferred_offset_)
                     : std::pair<const void*, uint64_t>(data_, 0);
  }

  // A sub-range sharing the owner. Throws Error(kCorrupt) when [offset, offset+length) is not inside.
  SharedBytes Slice(uint64_t offset, uint64_t length) const;

  // True when the bytes are a view of a file mapping (so their pages can be released after a
  // streaming pass and fault back in from the page cache).
  bool mapped() const;
  // Tells the kernel that [offset, offset+length) will not be needed soon: for mapped bytes the
  // pages leave this process's resident set (they stay in the page cache); otherwise a no-op.
  void Release(uint64_t offset, uint64_t length) const;
  // Hands the bytes to fn in windows, releasing each window's pages once fn returns: streaming
  // a mapped file of any size keeps only one window resident; deferred bytes are produced one
  // window at a time, never held. Mapped bytes the I/O mode says to pread (trove/io_mode.h) are
  // read into one window-sized buffer instead (kPread and kAuto); a file found shorter than its
  // mapping then throws the guard's error (FailChangedWhileRead).
  void Stream(const std::function<void(const uint8_t*, size_t)>& fn) const;
  // The bytes as the runs they are made of, in order, without producing deferred bytes whole:
  // deferred bytes whose source says which pieces they are (DeferredSource::Pieces) are those
  // pieces; any other bytes (held, mapped, deferred without pieces) are one run, themselves.
  std::vector<SharedBytes> Pieces() const;
  // For writers: hands fn the bytes run by run (Pieces): a held or mapped run whole, so that a
  // writer gives a mapped range to the kernel in one call (CopyMappedBytes, never faulting its
  // pages in here), and a deferred run window by window (Stream). Bounded memory whatever the size.
  void ForEachRun(const std::function<void(const uint8_t*, size_t)>& fn) const;
  // A sub-range as bytes of its own: for deferred bytes, asking for it whole (data()) produces
  // only [offset, offset + length), through the source's pieces when it has them (so only the
  // pieces it overlaps are read), instead of all the source's bytes as a Slice would; for other
  // bytes the same as Slice. A slice of a tensor assembled from many files reads only its part.
  SharedBytes OwnSlice(uint64_t offset, uint64_t length) const;
  // True when Stream and Reader read these bytes with pread rather than through their mapping
  // (trove/io_mode.h: kPread and kAuto): a caller
  // that would walk the mapping itself streams them instead.
  bool ReadsWithPread() const;
  // Copies [offset, offset + n) into out: for bytes of a MappedFile that keeps its descriptor, with
  // pread, without touching the mapping (a few bytes far apart, such as a zip's local headers,
  // would otherwise each fault in the folio around them); memcpy otherwise. Throws
  // Error(kCorrupt) for a range outside the bytes, and the guard's error for a file found
  // shorter than its mapping.
  void CopyOut(uint64_t offset, uint8_t* out, size_t n) const;
  // Asks the kernel to start reading [offset, offset + n) of the file behind mapped bytes now,
  // without waiting (posix_fadvise WILLNEED on its descriptor, madvise WILLNEED on the mapping
  // without one): a parser about to read many small pieces far apart in a cold file (a zip's
  // local headers) announces the next ones, so that the disk reads them together instead of one
  // round trip each. Advice only: a no-op for other bytes; a range past their end is cut there.
  void Prefetch(uint64_t offset, uint64_t n) const;

  class Reader;

  // The CRC-32 its container recorded for exactly these bytes (a zip entry's payload), carried so
  // that a writer copying them whole into another zip need not read them to checksum them. Not
  // verified: copied bytes keep the checksum they came with, so damage in the source stays
  // detectable in the output instead of being sealed under a fresh CRC. Kept by a Slice of the
  // whole range only; absent otherwise.
  std::optional<uint32_t> recorded_crc32() const { return recorded_crc32_; }
  SharedBytes WithRecordedCrc32(uint32_t crc) const {
    SharedBytes b = *this;
    b.recorded_crc32_ = crc;
    return b;
  }

  // True when both share one owner (one mapping or one allocation).
  bool SameOwner(const SharedBytes& other) const { return owner_ == other.owner_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  friend class MappedFile;
  struct DeferredState;
  const uint8_t* DeferredData() const;
  std::shared_ptr<DeferredState> deferred_;  // set for deferred bytes (owner_ is then the same object)
  uint64_t deferred_offset_ = 0;             // where this slice starts in the deferred bytes
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  std::optional<uint32_t> recorded_crc32_;
};

// Reads a SharedBytes front to back into the caller's buffers, so that several can be walked
// side by side in bounded memory (trove diff compares two compressed .tdz leaves window by
// window). Deferred bytes are produced as they are read, never held whole (unless something
// else asked for them whole already); the pages of mapped bytes leave the resident set once read
// past; or, when the I/O mode says so (trove/io_mode.h), they are read with pread through a
// small buffer (kAuto: what the page cache does not hold is copied into it from the mapping).
// Keeps the bytes alive. One reader is used by one thread at a time.
class SharedBytes::Reader {
 public:
  explicit Reader(SharedBytes bytes);
  ~Reader();
  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;

  // Copies the next n bytes into out. Throws Error(kUsage) for n beyond remaining(), and what
  // producing the bytes throws (Error(kCorrupt) naming the entry for a damaged compressed
  // stream; the guard's error for a mapped file found changed).
  void Read(uint8_t* out, size_t n);
  // Moves on n bytes without handing them over (deferred bytes are still produced).
  void Skip(uint64_t n);
  uint64_t position() const { return at_; }
  uint64_t remaining() const { return bytes_.size() - at_; }

 private:
  void ReleaseReadPages();
  // True when mapped bytes are read with pread (trove/io_mode.h): decided at the first read.
  bool ReadsWithPread();
  struct FileWindow;
  SharedBytes bytes_;
  uint64_t at_ = 0;
  uint64_t released_ = 0;  // mapped bytes before this have been released
  std::unique_ptr<DeferredReader> deferred_;
  std::unique_ptr<FileWindow> file_;  // set when reading with pread
  bool pread_decided_ = false;
};

// While it lives, faults on mapped bytes and reads of their file (CopyOut) read only the pages
// they need, not the read-ahead around them (madvise MADV_RANDOM and posix_fadvise
// POSIX_FADV_RANDOM; NORMAL again when it goes): for parsers that read a few bytes far apart (a
// zip's local headers) in a file that may be cold. Advice only: a no-op for bytes that are not a
// mapping. Used by one thread; another pass over the same file at the same time only reads
// slower or faster, never other bytes.
class RandomAccessWhile {
 public:
  explicit RandomAccessWhile(const SharedBytes& bytes);
  ~RandomAccessWhile();
  RandomAccessWhile(const RandomAccessWhile&) = delete;
  RandomAccessWhile& operator=(const RandomAccessWhile&) = delete;

 private:
  void* begin_ = nullptr;
  size_t length_ = 0;
  int fd_ = -1;  // the mapped file's descriptor (owned by its MappedFile, which the bytes keep open)
  SharedBytes bytes_;  // keeps the mapping, and so the descriptor, alive
};

// A whole file mapped read-only. Open() maps it once; views into it are SharedBytes whose
// owner is the mapping, so the mapping lives as long as any view of it. The file also stays open
// (one descriptor per MappedFile) so that CopyMappedBytes can have the kernel copy its bytes,
// unless Open is told not to keep it (a dataset of thousands of shards, which only reads through
// the mappings, must not use a descriptor for each) or a process-wide budget of kept descriptors
// is spent (then its bytes are copied from the mapping): descriptors stay bounded however many
// files are mapped.
//
// A file truncated by another process while mapped would raise SIGBUS on access: trove never
// writes into a file in place (writers replace files by rename), and the command-line tools run
// every command inside RunGuardingTruncation (below), which turns that SIGBUS into an Error.
// Every live mapping is registered so that the error can name its file.
class MappedFile : public std::enable_shared_from_this<MappedFile> {
 public:
  // Throws Error(kIo/kNotFound) naming the path. Without keep_descriptor the file is closed once
  // mapped (CopyMappedBytes then declines its bytes and callers copy them).
  // The path is opened without blocking (a FIFO is refused, not waited on) and must be a regular
  // file.
  static std::shared_ptr<MappedFile> Open(const std::string& path, bool keep_descriptor = true);
  // Maps `size` bytes of an open descriptor of a regular file, taking ownership of the descriptor
  // (closed on error too); `path` names the file in errors. For files opened by a rule of their
  // own (a shard an index names: core/confined_directory.h).
  static std::shared_ptr<MappedFile> FromDescriptor(int descriptor, std::string path, uint64_t size,
                                                    bool keep_descriptor = true);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  SharedBytes bytes() const;
  SharedBytes Slice(uint64_t offset, uint64_t length) const { return bytes().Slice(offset, length); }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;
  uint64_t map_size_ = 0;
  int fd_ = -1;
};

// The SIGBUS guard. Runs body() with truncation turned into an error: when touching a MappedFile's
// bytes raises SIGBUS on this thread meanwhile (another program shrank the file under the
// mapping), the handler replaces that whole mapping with zero pages and lets the access go on,
// so body runs on normally (destructors, locks and temporaries all behave as after any error);
// when body ends, however it ends, Error(kIo, "<path>: changed while being read") is thrown
// naming the file. Code that could run long on those zeros (Stream, ForEachChunk) and every
// writer's Commit call ThrowIfMappedFileChanged, so nothing read from a changed file is ever
// committed. Guards nest; a SIGBUS on a thread without a guard (or not at a mapped file) still
// ends the process. Safe for long-lived programs; not for use from a signal handler.
void RunGuardingTruncation(const std::function<void()>& body);
// Throws the guard's Error when a mapped file was found changed under this thread's guard.
// Cheap (one thread-local read): called per streamed window and before any output is committed.
void ThrowIfMappedFileChanged();
// Throws Error(kIo, "<path>: changed while being read").
[[noreturn]] void FailChangedWhileRead(const std::string& path);
// The path of the live MappedFile whose mapping holds `address`, or "" when none does. A write(2)
// whose source is a mapping truncated under it fails with EFAULT instead of raising SIGBUS;
// callers that write mapped bytes out use this to say which file was truncated.
std::string MappedFileAt(const void* address);
// The file behind mapped bytes, for a caller that maps the same pages again in another way (the
// Python module maps a file privately, copy-on-write, to hand out writable views): when `address`
// lies in a live MappedFile that kept its descriptor, a new descriptor of that same file (the
// caller closes it), the offset of `address` in the file, and the mapped bytes from there on;
// nullopt otherwise (no file behind it, or its descriptor closed). No path is opened again, so
// the answer cannot be another file that took the path meanwhile.
struct MappedFileDescriptor {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t length = 0;  // of the mapping from `address` to its end
  std::string path;
};
std::optional<MappedFileDescriptor> DuplicateMappedFile(const void* address);
// Writing mapped bytes out without touching them: when [data, +size) lies in one live
// MappedFile, the kernel copies it from that file to out_fd's current position
// (copy_file_range), page cache to page cache, without faulting the pages into this process.
// A range of 1 MiB or more whose offset within a page differs from the destination's is read
// from the file into a per-thread 256 KiB buffer and written instead (pread, write): cheaper than
// the kernel's copy of pages across two (docs/performance.md), and so is a range the kernel
// cannot copy between the two files (across file systems). Neither touches the mapping.
// Returns the bytes copied: `size`, or 0 for bytes not in a MappedFile, which the caller writes
// itself. Throws Error(kIo) naming
// `destination` for a write error, or the source when it was truncated meanwhile.
uint64_t CopyMappedBytes(int out_fd, const uint8_t* data, uint64_t size, const std::string& destination);
// For mappings made outside MappedFile (a leaf mapped by its prefix): registers [address,
// +length) under `path` for the two functions above and returns the owner that unregisters and
// unmaps it when the last view goes.
std::shared_ptr<const void> OwnMapping(void* address, uint64_t length, std::string path);

}  // namespace trove
