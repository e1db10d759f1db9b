#include "trove/shared_bytes.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <new>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/confined_directory.h"
#include "core/large_buffer.h"
#include "trove/error.h"
#include "trove/io_mode.h"

namespace trove {

SharedBytes SharedBytes::FromVector(std::vector<uint8_t> bytes) {
  auto owner = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  const uint8_t* data = owner->data();
  uint64_t size = owner->size();
  return SharedBytes(std::move(owner), data, size);
}

SharedBytes SharedBytes::CopyOf(const void* data, uint64_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  return FromVector(std::vector<uint8_t>(p, p + size));
}

struct SharedBytes::DeferredState {
  std::shared_ptr<const DeferredSource> source;
  bool lazy_mapping = false;  // LazyMapped: the source maps a file
  uint64_t size = 0;          // of all the bytes the source produces
  std::once_flag once;
  std::atomic<bool> produced{false};
  SharedBytes bytes;
};

SharedBytes SharedBytes::LazyMapped(std::shared_ptr<const DeferredSource> source, uint64_t size) {
  SharedBytes b = Deferred(std::move(source), size);
  b.deferred_->lazy_mapping = true;
  return b;
}

bool SharedBytes::mapped() const { return mapped_ || (deferred_ && deferred_->lazy_mapping); }

SharedBytes SharedBytes::Deferred(std::shared_ptr<const DeferredSource> source, uint64_t size) {
  auto state = std::make_shared<DeferredState>();
  state->source = std::move(source);
  state->size = size;
  SharedBytes b;
  b.owner_ = state;
  b.deferred_ = std::move(state);
  b.size_ = size;
  return b;
}

std::optional<SharedBytes::Compression> SharedBytes::compression() const {
  if (!deferred_ || deferred_->lazy_mapping) return std::nullopt;
  const std::optional<uint64_t> compressed = deferred_->source->compressed_size();
  if (!compressed) return std::nullopt;
  return Compression{*compressed, deferred_->size};
}

bool SharedBytes::deferred() const { return deferred_ && !deferred_->lazy_mapping && !deferred_->produced.load(); }

const uint8_t* SharedBytes::DeferredData() const {
  DeferredState& s = *deferred_;
  std::call_once(s.once, [&s] {
    s.bytes = s.source->Produce();
    s.produced = true;
  });
  if (deferred_offset_ + size_ > s.bytes.size()) {
    Fail(ErrorCode::kCorrupt, "deferred bytes produced " + std::to_string(s.bytes.size()) + " bytes, " +
                                  std::to_string(deferred_offset_ + size_) + " expected");
  }
  return s.bytes.data() + deferred_offset_;
}

SharedBytes SharedBytes::Slice(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    Fail(ErrorCode::kCorrupt, "range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                                  ") is outside " + std::to_string(size_) + " bytes");
  }
  if (deferred_) {
    SharedBytes out = *this;
    out.deferred_offset_ += offset;
    out.size_ = length;
    if (offset != 0 || length != size_) out.recorded_crc32_.reset();
    return out;
  }
  SharedBytes out(owner_, data_ + offset, length);
  out.mapped_ = mapped_;
  if (offset == 0 && length == size_) out.recorded_crc32_ = recorded_crc32_;
  return out;
}

namespace {

// Takes the whole pages inside [p, +n) of a file mapping out of this process's resident set (they
// stay in the page cache); the pages at either end are left, since neighbours may still be in use.
void DropMappedPages(const uint8_t* p, uint64_t n) {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + n) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace

void SharedBytes::Release(uint64_t offset, uint64_t length) const {
  if (offset >= size_) return;
  length = std::min(length, size_ - offset);
  if (deferred_) {
    // A lazy mapping made already releases as the mapping it is; one not made has no pages.
    if (deferred_->lazy_mapping && deferred_->produced.load()) deferred_->bytes.Release(deferred_offset_ + offset, length);
    return;
  }
  if (!mapped_) return;
  DropMappedPages(data_ + offset, length);
}

namespace {

struct MappedRange {
  uint64_t length = 0;
  std::string path;
  int fd = -1;  // the mapped file, open for reading (MappedFile only), for CopyMappedBytes
  // How far into the file read-ahead was last asked for, by any pass over it (ReadAhead).
  std::shared_ptr<std::atomic<uint64_t>> advised_end;
};

// Live mappings by start address, so that a fault address can be traced back to its file and
// mapped bytes can be copied from it. Only normal code touches it (the signal handler only
// records the address).
struct MappingRegistry {
  std::mutex mutex;
  std::map<uintptr_t, MappedRange> by_start;
};

// The registered range holding `address`, or none.
const MappedRange* RangeAt(MappingRegistry& r, uintptr_t address, uintptr_t* start) {
  auto it = r.by_start.upper_bound(address);
  if (it == r.by_start.begin()) return nullptr;
  --it;
  if (address - it->first >= it->second.length) return nullptr;
  *start = it->first;
  return &it->second;
}

MappingRegistry& Registry() {
  static MappingRegistry* registry = new MappingRegistry();  // never destroyed: mappings may outlive exit
  return *registry;
}

// Guards active on this thread, and the first mapped file found changed under one of them. The
// handler touches only these (initial-exec TLS in the executable: async-signal-safe), the
// registry (below) and mmap(2).
thread_local int tls_guard_depth = 0;
thread_local bool tls_changed = false;
thread_local char tls_changed_path[4096];
struct sigaction g_previous_bus_action;
uintptr_t g_page_size = 4096;

// How long the handler waits for another thread to release the registry (it is held only for a
// lookup or an insertion, never while mapped bytes are touched) before giving up and dying as
// the signal would have.
constexpr int kRegistryLockAttempts = 1 << 20;

// Replaces the mapping holding `address` with zero pages so that the faulting access (and every
// later one) completes, and records the file. True when `address` is in a registered mapping.
bool ZeroChangedMapping(uintptr_t address) {
  MappingRegistry& r = Registry();
  int attempts = 0;
  while (!r.mutex.try_lock()) {
    if (++attempts == kRegistryLockAttempts) return false;
    ::sched_yield();
  }
  bool done = false;
  uintptr_t start = 0;
  if (const MappedRange* range = RangeAt(r, address, &start)) {
    const uintptr_t begin = start / g_page_size * g_page_size;
    const uintptr_t end = (start + range->length + g_page_size - 1) / g_page_size * g_page_size;
    // The whole mapping at once: one fault per file, and any size of file is done at once.
    void* z = ::mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                     -1, 0);
    if (z != MAP_FAILED) {
      if (!tls_changed) {
        const size_t n = std::min(range->path.size(), sizeof tls_changed_path - 1);
        std::memcpy(tls_changed_path, range->path.data(), n);
        tls_changed_path[n] = '\0';
        tls_changed = true;
      }
      done = true;
    }
  }
  r.mutex.unlock();
  return done;
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  // BUS_ADRERR at a mapped file: a page past the file's end, i.e. the file shrank under us.
  if (tls_guard_depth > 0 && info->si_code == BUS_ADRERR &&
      ZeroChangedMapping(reinterpret_cast<uintptr_t>(info->si_addr))) {
    return;  // the access is retried and now reads zeros; the guard reports the change
  }
  // Not ours to explain: behave as if we had never been installed.
  if (g_previous_bus_action.sa_flags & SA_SIGINFO) {
    if (g_previous_bus_action.sa_sigaction != nullptr) return g_previous_bus_action.sa_sigaction(sig, info, context);
  } else if (g_previous_bus_action.sa_handler != SIG_DFL && g_previous_bus_action.sa_handler != SIG_IGN) {
    return g_previous_bus_action.sa_handler(sig);
  }
  // Returning re-executes the faulting access, which now meets the default action.
  ::signal(SIGBUS, SIG_DFL);
}

void InstallSigbusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page_size = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO;
    if (::sigaction(SIGBUS, &action, &g_previous_bus_action) != 0) {
      Fail(ErrorCode::kIo, std::string("installing the SIGBUS guard: ") + std::strerror(errno));
    }
  });
}

std::string FileAtAddress(uintptr_t address) {
  MappingRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  uintptr_t start = 0;
  const MappedRange* range = RangeAt(r, address, &start);
  return range == nullptr ? std::string() : range->path;
}

}  // namespace

void FailChangedWhileRead(const std::string& path) {
  throw Error(ErrorCode::kIo, "changed while being read").SetFile(path);
}

void ThrowIfMappedFileChanged() {
  if (tls_changed) FailChangedWhileRead(tls_changed_path);
}

void RunGuardingTruncation(const std::function<void()>& body) {
  InstallSigbusHandler();
  ++tls_guard_depth;
  // Whatever body ended with, a change seen meanwhile is the error to report: what body made of
  // the zeros it read (a parse error, a checksum finding) is only a consequence.
  auto finish = [] {
    const bool changed = tls_changed;
    if (--tls_guard_depth == 0) tls_changed = false;
    if (changed) FailChangedWhileRead(tls_changed_path);
  };
  try {
    body();
  } catch (...) {
    finish();
    throw;
  }
  finish();
}

// Windows of Stream(): large enough that each write(2) is efficient, small enough that resident
// memory stays bounded.
constexpr uint64_t kStreamWindowBytes = uint64_t{8} << 20;
// A Reader releases the mapped pages it has read past in batches of at least this many bytes:
// one madvise per few windows of a diff, not one per window.
constexpr uint64_t kReleaseBatchBytes = uint64_t{4} << 20;

namespace {

// --- Reading mapped bytes with pread (trove/io_mode.h) -----------------------------------------

// How far ahead of a pread pass the kernel is asked to read (posix_fadvise WILLNEED), and in
// steps of how much: a few windows, so that the next request is in flight while this one is
// used; it costs page cache, never this process's memory.
constexpr uint64_t kReadAheadBytes = uint64_t{32} << 20;
constexpr uint64_t kReadAheadStepBytes = uint64_t{16} << 20;
// A Reader's buffer in pread mode: its callers read a few thousand elements at a time, and a
// pread per call would be a system call per few KB.
constexpr uint64_t kReaderBufferBytes = uint64_t{2} << 20;
// A read at least this large goes straight into the caller's memory: the system call then costs
// a few percent of the copy it makes, and a second copy out of the buffer would cost all of it.
constexpr uint64_t kReaderDirectBytes = uint64_t{256} << 10;
// Buffers a thread keeps for its next pass (core/large_buffer.h): a Reader's (a diff holds a few
// Readers at once) and a Stream's window (one at a time).
constexpr size_t kSpareReaderBuffers = 4;
constexpr size_t kSpareStreamWindows = 1;
using ReaderBuffers = SpareBuffers<kReaderBufferBytes, kSpareReaderBuffers>;
using StreamWindows = SpareBuffers<kStreamWindowBytes, kSpareStreamWindows>;

// Where mapped bytes can be read with pread instead: the mapped file's descriptor (kept open by
// the MappedFile the bytes' owner keeps alive), the bytes' offset in it and its mapped size.
struct PreadSource {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t file_size = 0;
  std::string path;
  std::shared_ptr<std::atomic<uint64_t>> advised_end;  // the file's (MappedRange::advised_end)
};

// The file behind mapped bytes [data, +size): none for bytes not in one MappedFile, or in one
// that closed its descriptor.
std::optional<PreadSource> FileSourceOf(const uint8_t* data, uint64_t size) {
  if (size == 0) return std::nullopt;
  MappingRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  uintptr_t start = 0;
  const MappedRange* range = RangeAt(r, reinterpret_cast<uintptr_t>(data), &start);
  if (range == nullptr || range->fd < 0) return std::nullopt;
  const uint64_t offset = reinterpret_cast<uintptr_t>(data) - start;
  if (size > range->length - offset) return std::nullopt;
  return PreadSource{range->fd, offset, range->length, range->path, range->advised_end};
}

// The pread source of mapped bytes [data, +size) when the I/O mode says to pread them: kPread
// and kAuto (for a streaming pass, large preads beat the mapping hot and cold: docs/performance.md).
// None for the mapping: kMmap, bytes not in a MappedFile, or a MappedFile that closed its
// descriptor (then the mapping is read).
std::optional<PreadSource> PreadSourceOf(const uint8_t* data, uint64_t size) {
  if (GetIoMode() == IoMode::kMmap) return std::nullopt;
  return FileSourceOf(data, size);
}

// Keeps the kernel reading ahead of a front-to-back pass over [0, size) of a file's bytes, in
// either mode (a mapping's own read-ahead is a few hundred KB per fault: a cold file then comes
// in at a fraction of the disk's rate). The advice runs on past the bytes' end into the rest of
// the file (up to kReadAheadBytes): a pass over every tensor reads one after another, and the
// next one's first read then finds its pages in flight. Advice only: failure changes nothing
// but speed.
//
// The passes over one file share how far ahead was asked for (MappedRange::advised_end): asking
// costs a page-cache lookup per page even when every page is there, and a pass over a tensor of
// 5 MB (or a pipelined cast's piece of 1 MiB) that asked for its own 32 MiB ahead every time
// looked up each page of the file 7 to 32 times (10% of a verify). A pass skips what the file's
// mark says was asked for just ahead of it (within twice the read-ahead: a mark far ahead or
// behind belongs to another pass, or to an earlier one whose pages may since have been evicted).
class ReadAhead {
 public:
  ReadAhead(const PreadSource& source, uint64_t size)
      : fd_(source.fd), offset_(source.offset), limit_(source.file_size - source.offset), file_mark_(source.advised_end) {
    ::posix_fadvise(fd_, static_cast<off_t>(offset_), static_cast<off_t>(size), POSIX_FADV_SEQUENTIAL);
  }

  // Asks for [at, end + kReadAheadBytes) once less than a step of it is left unasked: the read
  // about to be made is submitted whole, and what follows it while it is used.
  void Advise(uint64_t at, uint64_t end) {
    if (advised_ >= std::min(limit_, end + kReadAheadBytes - kReadAheadStepBytes)) return;
    uint64_t from = std::max(advised_, at);
    const uint64_t to = std::min(limit_, end + kReadAheadBytes);
    // In file offsets: what another pass asked for just ahead of this read is not asked again.
    const uint64_t file_at = offset_ + at, file_end = offset_ + end, file_to = offset_ + to;
    const auto near = [&](uint64_t mark) { return mark > file_at && mark <= file_end + 2 * kReadAheadBytes; };
    if (file_mark_) {
      const uint64_t mark = file_mark_->load(std::memory_order_relaxed);
      if (near(mark)) from = std::max(from, std::min(mark, file_to) - offset_);
    }
    if (to > from) {
      ::posix_fadvise(fd_, static_cast<off_t>(offset_ + from), static_cast<off_t>(to - from), POSIX_FADV_WILLNEED);
    }
    advised_ = to;
    if (file_mark_) {
      uint64_t mark = file_mark_->load(std::memory_order_relaxed);
      while ((mark < file_to || !near(mark)) &&
             !file_mark_->compare_exchange_weak(mark, file_to, std::memory_order_relaxed)) {
      }
    }
  }

 private:
  int fd_;
  uint64_t offset_;
  uint64_t limit_;  // bytes of the file from the start of ours
  std::shared_ptr<std::atomic<uint64_t>> file_mark_;  // may be null
  uint64_t advised_ = 0;
};

// Maps a window of a file mapping's pages in one call instead of a fault every few pages (which
// the kernel then takes inside whatever system call the window is handed to). Advice: failure
// (an old kernel) leaves the faults to happen as before.
void PopulateWindow(const uint8_t* p, uint64_t n) {
#ifdef MADV_POPULATE_READ
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(p) / page * page;
  ::madvise(reinterpret_cast<void*>(first), reinterpret_cast<uintptr_t>(p) + n - first, MADV_POPULATE_READ);
#else
  (void)p;
  (void)n;
#endif
}

// Reads [0, size) of a pread source front to back, keeping the kernel's read-ahead ahead of it.
class FileWindowReader {
 public:
  FileWindowReader(PreadSource source, uint64_t size) : source_(std::move(source)), ahead_(source_, size) {}

  // Bytes [at, at + n) into out. A short read means the file shrank under us: the guard's error.
  void Read(uint64_t at, uint8_t* out, size_t n) {
    ahead_.Advise(at, at + n);
    for (size_t done = 0; done < n;) {
      const ssize_t got = ::pread(source_.fd, out + done, n - done, static_cast<off_t>(source_.offset + at + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        throw Error(ErrorCode::kIo, std::string("read: ") + std::strerror(errno)).SetFile(source_.path);
      }
      if (got == 0) FailChangedWhileRead(source_.path);
      done += static_cast<size_t>(got);
    }
  }

 private:
  PreadSource source_;
  ReadAhead ahead_;
};

}  // namespace

// A Reader's pread state (trove/io_mode.h): the file and a buffer of the bytes read next.
struct SharedBytes::Reader::FileWindow {
  FileWindow(PreadSource source, uint64_t bytes) : file(std::move(source), bytes), size(bytes) {}
  // Bytes [at, at + n) of the Reader's bytes into out: through the buffer for small reads.
  void Read(uint64_t at, uint8_t* out, size_t n) {
    if (at < start || at + n > start + length) {
      if (n >= kReaderDirectBytes) return file.Read(at, out, n);
      if (!buffer) buffer = ReaderBuffers::Take();
      start = at;
      length = std::min(kReaderBufferBytes, size - at);
      file.Read(start, buffer.get(), static_cast<size_t>(length));
    }
    std::memcpy(out, buffer.get() + (at - start), n);
  }
  FileWindowReader file;
  uint64_t size;
  ReaderBuffers::Held buffer;
  uint64_t start = 0, length = 0;  // of the buffered bytes
};

std::unique_ptr<DeferredReader> DeferredSource::Open(uint64_t offset) const {
  class ProducedReader : public DeferredReader {
   public:
    ProducedReader(SharedBytes bytes, uint64_t at) : bytes_(std::move(bytes)), at_(at) {}
    void Read(uint8_t* out, size_t n) override {
      std::memcpy(out, bytes_.data() + at_, n);
      at_ += n;
    }
    void Skip(uint64_t n) override { at_ += n; }

   private:
    SharedBytes bytes_;
    uint64_t at_;
  };
  return std::make_unique<ProducedReader>(Produce(), offset);
}

std::optional<std::vector<SharedBytes>> DeferredSource::Pieces(uint64_t, uint64_t) const { return std::nullopt; }

namespace {

// Deferred bytes read as the pieces their source says they are made of (DeferredSource::Pieces),
// one after another, each through a Reader of its own opened when it is reached: a piece skipped
// whole is never opened, so its file is never touched.
class PiecesReader : public DeferredReader {
 public:
  explicit PiecesReader(std::vector<SharedBytes> pieces) : pieces_(std::move(pieces)) {}

  void Read(uint8_t* out, size_t n) override {
    while (n > 0) {
      SharedBytes::Reader& r = Current();
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, r.remaining()));
      r.Read(out, take);
      out += take;
      n -= take;
    }
  }
  void Skip(uint64_t n) override {
    while (n > 0) {
      if (!reader_ || reader_->remaining() == 0) {
        if (next_ < pieces_.size() && pieces_[next_].size() <= n) {
          n -= pieces_[next_++].size();
          continue;
        }
      }
      SharedBytes::Reader& r = Current();
      const uint64_t take = std::min(n, r.remaining());
      r.Skip(take);
      n -= take;
    }
  }

 private:
  SharedBytes::Reader& Current() {
    while (!reader_ || reader_->remaining() == 0) {
      if (next_ >= pieces_.size()) Fail(ErrorCode::kCorrupt, "deferred bytes: read past their last piece");
      reader_.reset();  // the piece read (its pages released) before the next is opened
      reader_.emplace(pieces_[next_++]);
    }
    return *reader_;
  }

  std::vector<SharedBytes> pieces_;
  size_t next_ = 0;
  std::optional<SharedBytes::Reader> reader_;
};

// A part of deferred bytes as bytes of their own (SharedBytes::OwnSlice): produced whole, only
// the part is read, through its source's pieces when it has them.
class OwnSliceSource : public DeferredSource {
 public:
  explicit OwnSliceSource(SharedBytes part) : part_(std::move(part)) {}

  SharedBytes Produce() const override {
    const size_t n = static_cast<size_t>(part_.size());
    std::shared_ptr<uint8_t[]> out(new uint8_t[n == 0 ? 1 : n]);  // every byte is written below
    SharedBytes::Reader(part_).Read(out.get(), n);
    const uint8_t* data = out.get();
    return SharedBytes(std::shared_ptr<const void>(out, data), data, n);
  }
  std::unique_ptr<DeferredReader> Open(uint64_t offset) const override {
    class PartReader : public DeferredReader {
     public:
      explicit PartReader(SharedBytes bytes) : reader_(std::move(bytes)) {}
      void Read(uint8_t* out, size_t n) override { reader_.Read(out, n); }
      void Skip(uint64_t n) override { reader_.Skip(n); }

     private:
      SharedBytes::Reader reader_;
    };
    return std::make_unique<PartReader>(part_.Slice(offset, part_.size() - offset));
  }
  std::optional<std::vector<SharedBytes>> Pieces(uint64_t offset, uint64_t length) const override {
    return part_.Slice(offset, length).Pieces();
  }

 private:
  SharedBytes part_;
};

}  // namespace

std::vector<SharedBytes> SharedBytes::Pieces() const {
  if (deferred()) {
    if (std::optional<std::vector<SharedBytes>> pieces = deferred_->source->Pieces(deferred_offset_, size_)) {
      return std::move(*pieces);
    }
  }
  return {*this};
}

void SharedBytes::ForEachRun(const std::function<void(const uint8_t*, size_t)>& fn) const {
  if (deferred()) {
    if (std::optional<std::vector<SharedBytes>> pieces = deferred_->source->Pieces(deferred_offset_, size_)) {
      for (const SharedBytes& piece : *pieces) piece.ForEachRun(fn);
    } else {
      Stream(fn);
    }
    return;
  }
  if (size_ == 0) return;
  fn(data(), static_cast<size_t>(size_));
  ThrowIfMappedFileChanged();
}

SharedBytes SharedBytes::OwnSlice(uint64_t offset, uint64_t length) const {
  SharedBytes part = Slice(offset, length);
  if (!deferred() || (offset == 0 && length == size_)) return part;
  return Deferred(std::make_shared<OwnSliceSource>(std::move(part)), length);
}

void SharedBytes::Stream(const std::function<void(const uint8_t*, size_t)>& fn) const {
  if (deferred()) {
    if (std::optional<std::vector<SharedBytes>> pieces = deferred_->source->Pieces(deferred_offset_, size_)) {
      for (const SharedBytes& piece : *pieces) piece.Stream(fn);
      return;
    }
    std::unique_ptr<DeferredReader> reader = deferred_->source->Open(deferred_offset_);
    const uint64_t window = std::min(size_, kStreamWindowBytes);
    const StreamWindows::Held buf = StreamWindows::Take();
    for (uint64_t done = 0; done < size_;) {
      const uint64_t n = std::min(window, size_ - done);
      reader->Read(buf.get(), static_cast<size_t>(n));
      fn(buf.get(), static_cast<size_t>(n));
      ThrowIfMappedFileChanged();  // the compressed bytes may be a mapping too
      done += n;
    }
    return;
  }
  const uint8_t* base = data();  // deferred bytes produced already: in memory
  if (mapped()) {
    if (std::optional<PreadSource> source = PreadSourceOf(base, size_)) {
      FileWindowReader file(std::move(*source), size_);
      const uint64_t window = std::min(size_, kStreamWindowBytes);
      const StreamWindows::Held buf = StreamWindows::Take();
      for (uint64_t done = 0; done < size_;) {
        const uint64_t n = std::min(window, size_ - done);
        file.Read(done, buf.get(), static_cast<size_t>(n));
        fn(buf.get(), static_cast<size_t>(n));
        done += n;
      }
      return;
    }
  }
  // Through the mapping: the same read-ahead advice, so that its faults find their pages coming.
  std::optional<ReadAhead> ahead;
  if (mapped()) {
    if (std::optional<PreadSource> source = FileSourceOf(base, size_)) ahead.emplace(*source, size_);
  }
  for (uint64_t done = 0; done < size_;) {
    uint64_t n = std::min<uint64_t>(kStreamWindowBytes, size_ - done);
    if (ahead) {
      ahead->Advise(done, done + n);
      PopulateWindow(base + done, n);
    }
    fn(base + done, static_cast<size_t>(n));
    Release(done, n);
    ThrowIfMappedFileChanged();  // no point streaming on through zeros
    done += n;
  }
}

SharedBytes::Reader::Reader(SharedBytes bytes) : bytes_(std::move(bytes)) {
  if (!bytes_.deferred()) return;
  if (std::optional<std::vector<SharedBytes>> pieces = bytes_.deferred_->source->Pieces(bytes_.deferred_offset_, bytes_.size_)) {
    deferred_ = std::make_unique<PiecesReader>(std::move(*pieces));
  } else {
    deferred_ = bytes_.deferred_->source->Open(bytes_.deferred_offset_);
  }
}

SharedBytes::Reader::~Reader() = default;
SharedBytes::Reader::Reader(Reader&&) noexcept = default;
SharedBytes::Reader& SharedBytes::Reader::operator=(Reader&&) noexcept = default;

void SharedBytes::Reader::Read(uint8_t* out, size_t n) {
  if (n > remaining()) {
    Fail(ErrorCode::kUsage, "read of " + std::to_string(n) + " bytes at " + std::to_string(at_) + " of " +
                                std::to_string(bytes_.size()));
  }
  if (n == 0) return;
  if (deferred_) {
    deferred_->Read(out, n);
  } else if (ReadsWithPread()) {
    file_->Read(at_, out, n);
  } else {
    std::memcpy(out, bytes_.data() + at_, n);
  }
  at_ += n;
  if (bytes_.mapped() && !file_) ReleaseReadPages();
  ThrowIfMappedFileChanged();  // no point reading on through zeros
}

bool SharedBytes::ReadsWithPread() const {
  return mapped() && size_ > 0 && GetIoMode() != IoMode::kMmap && PreadSourceOf(data(), size_).has_value();
}

bool SharedBytes::Reader::ReadsWithPread() {
  if (!pread_decided_) {
    pread_decided_ = true;
    if (bytes_.mapped()) {
      if (std::optional<PreadSource> source = PreadSourceOf(bytes_.data(), bytes_.size())) {
        file_ = std::make_unique<FileWindow>(std::move(*source), bytes_.size());
      }
    }
  }
  return file_ != nullptr;
}

void SharedBytes::Reader::Skip(uint64_t n) {
  if (n > remaining()) {
    Fail(ErrorCode::kUsage, "skip of " + std::to_string(n) + " bytes at " + std::to_string(at_) + " of " +
                                std::to_string(bytes_.size()));
  }
  if (deferred_) deferred_->Skip(n);
  at_ += n;
  released_ = std::max(released_, at_);  // skipped pages were never touched
}

void SharedBytes::Reader::ReleaseReadPages() {
  // Up to the last page boundary read past, so that the next read's first page stays mapped.
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint8_t* base = bytes_.data();  // mapped bytes (a lazy mapping is made by the read)
  const uintptr_t end = reinterpret_cast<uintptr_t>(base + at_) / page * page;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(base + released_);
  if (end <= begin || end - begin < kReleaseBatchBytes) return;
  bytes_.Release(released_, end - begin);
  released_ += end - begin;
}

RandomAccessWhile::RandomAccessWhile(const SharedBytes& bytes) {
  if (!bytes.mapped() || bytes.empty() || bytes.deferred()) return;
  if (std::optional<PreadSource> source = FileSourceOf(bytes.data(), bytes.size())) {
    if (::posix_fadvise(source->fd, 0, 0, POSIX_FADV_RANDOM) == 0) {
      fd_ = source->fd;
      bytes_ = bytes;
    }
  }
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t begin = first / page * page;
  const uintptr_t end = (first + bytes.size() + page - 1) / page * page;
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_RANDOM) != 0) return;
  begin_ = reinterpret_cast<void*>(begin);
  length_ = end - begin;
}

RandomAccessWhile::~RandomAccessWhile() {
  if (begin_ != nullptr) ::madvise(begin_, length_, MADV_NORMAL);
  if (fd_ >= 0) ::posix_fadvise(fd_, 0, 0, POSIX_FADV_NORMAL);
}

void SharedBytes::CopyOut(uint64_t offset, uint8_t* out, size_t n) const {
  if (offset > size_ || n > size_ - offset) {
    Fail(ErrorCode::kCorrupt, "copy of " + std::to_string(n) + " bytes at " + std::to_string(offset) + " of " +
                                  std::to_string(size_));
  }
  if (n == 0) return;
  std::optional<PreadSource> source;
  if (mapped() && !deferred()) source = FileSourceOf(data_ + offset, n);
  if (!source) {
    std::memcpy(out, data() + offset, n);
    ThrowIfMappedFileChanged();
    return;
  }
  for (size_t done = 0; done < n;) {
    const ssize_t got = ::pread(source->fd, out + done, n - done, static_cast<off_t>(source->offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::kIo, std::string("read: ") + std::strerror(errno)).SetFile(source->path);
    }
    if (got == 0) FailChangedWhileRead(source->path);
    done += static_cast<size_t>(got);
  }
}

void SharedBytes::Prefetch(uint64_t offset, uint64_t n) const {
  if (offset >= size_ || !mapped_ || deferred_) return;
  n = std::min(n, size_ - offset);
  if (std::optional<PreadSource> source = FileSourceOf(data_ + offset, n)) {
    ::posix_fadvise(source->fd, static_cast<off_t>(source->offset), static_cast<off_t>(n), POSIX_FADV_WILLNEED);
    return;
  }
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(data_ + offset);
  const uintptr_t begin = first / page * page;
  ::madvise(reinterpret_cast<void*>(begin), first + n - begin, MADV_WILLNEED);
}

std::string MappedFileAt(const void* address) { return FileAtAddress(reinterpret_cast<uintptr_t>(address)); }

std::optional<MappedFileDescriptor> DuplicateMappedFile(const void* address) {
  MappingRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mutex);  // the descriptor stays open while we duplicate it
  uintptr_t start = 0;
  const MappedRange* range = RangeAt(r, reinterpret_cast<uintptr_t>(address), &start);
  if (range == nullptr || range->fd < 0) return std::nullopt;
  const int fd = ::fcntl(range->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  MappedFileDescriptor out;
  out.fd = fd;
  // A MappedFile maps its whole file from offset 0.
  out.offset = reinterpret_cast<uintptr_t>(address) - start;
  out.length = range->length - out.offset;
  out.path = range->path;
  return out;
}

std::shared_ptr<const void> OwnMapping(void* address, uint64_t length, std::string path) {
  {
    MappingRegistry& r = Registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.by_start[reinterpret_cast<uintptr_t>(address)] = {length, std::move(path), -1, nullptr};
  }
  return std::shared_ptr<const void>(address, [length](const void* p) {
    {
      MappingRegistry& r = Registry();
      std::lock_guard<std::mutex> lock(r.mutex);
      r.by_start.erase(reinterpret_cast<uintptr_t>(p));
    }
    ::munmap(const_cast<void*>(p), length);
  });
}

namespace {

// Descriptors MappedFiles keep open at once (for CopyMappedBytes and DuplicateMappedFile). A
// checkpoint of thousands of shards would otherwise hold a descriptor per shard and meet the
// process's limit (1,024 by default); past this many, or past a quarter of the process's limit
// (the rest is the program's), a mapping closes its descriptor once mapped and its bytes are
// written out by copying from the mapping instead.
constexpr int kMaxKeptDescriptors = 256;
std::atomic<int> g_kept_descriptors{0};

int KeptDescriptorBudget() {
  static const int budget = [] {
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kMaxKeptDescriptors;
    return static_cast<int>(std::min<rlim_t>(kMaxKeptDescriptors, limit.rlim_cur / 4));
  }();
  return budget;
}

}  // namespace

std::shared_ptr<MappedFile> MappedFile::Open(const std::string& path, bool keep_descriptor) {
  ConfinedFile opened = OpenUserFile(path);
  return FromDescriptor(opened.fd.release(), path, opened.size, keep_descriptor);
}

std::shared_ptr<MappedFile> MappedFile::FromDescriptor(int descriptor, std::string path, uint64_t size,
                                                       bool keep_descriptor) {
  Fd owned(descriptor);
  // The path is the error's file field: whoever names the file again (Open, a CLI) adds nothing.
  auto fail = [&](ErrorCode code, const std::string& reason) { throw Error(code, reason).SetFile(path); };
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = size;
  if (file->size_ > 0) {
    void* m = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, owned.get(), 0);
    if (m == MAP_FAILED) fail(ErrorCode::kIo, std::string("mmap: ") + std::strerror(errno));
    file->map_ = m;
    file->map_size_ = file->size_;
    file->data_ = static_cast<const uint8_t*>(m);
    int fd = -1;
    if (keep_descriptor && g_kept_descriptors.fetch_add(1) < KeptDescriptorBudget()) {
      fd = owned.release();
    } else if (keep_descriptor) {
      g_kept_descriptors.fetch_sub(1);
    }
    MappingRegistry& r = Registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.by_start[reinterpret_cast<uintptr_t>(m)] = {file->map_size_, path, fd, std::make_shared<std::atomic<uint64_t>>(0)};
    file->fd_ = fd;  // kept for CopyMappedBytes; closed with the mapping
  } else {
    static const uint8_t kEmpty[1] = {0};
    file->data_ = kEmpty;
  }
  return file;
}

MappedFile::~MappedFile() {
  if (map_ == nullptr) return;
  {
    MappingRegistry& r = Registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.by_start.erase(reinterpret_cast<uintptr_t>(map_));
  }
  ::munmap(map_, map_size_);
  if (fd_ >= 0) {
    ::close(fd_);
    g_kept_descriptors.fetch_sub(1);
  }
}

namespace {

// Ranges shorter than this go to copy_file_range whatever their alignment: one call, and too few
// pages for the split copy below to cost anything.
constexpr uint64_t kBufferedCopyMinBytes = uint64_t{1} << 20;
// The buffer of a copy through user space: small enough to stay in a core's L2 cache between the
// read and the write, so the second copy costs little even when other processes share the core
// (1 MiB, the L2's size on the benchmark machine, was slower under load than the kernel's copy);
// large enough that the system calls are a small part of the time. Kept per thread for good.
constexpr size_t kBufferedCopyBytes = size_t{256} << 10;
// Where a copy's pieces should start in the destination. The kernel's copy_file_range between
// files without shared extents moves a pipe's worth (64 KiB) at a time, and the buffer above
// moves 256 KiB: when the destination position is not a multiple of that, every piece begins
// inside a block and the page cache builds it out of small folios. So the first piece ends at a
// multiple of this in the destination and the rest start there. 1000 MiB on ext4, page cache
// warm: copy_file_range to a destination 5440 bytes in, 227 ms; with a first piece up to the next
// 64 KiB, 161 ms (from offset 0 to 0: 159 ms); the 256 KiB buffer, 219 ms and 188 ms. Into a
// tmpfs it makes no difference.
constexpr uint64_t kCopyDestinationBlockBytes = kBufferedCopyBytes;

// The length of a copy's first piece from destination offset `at` (docs/performance.md): up to
// the next kCopyDestinationBlockBytes, or `limit`.
uint64_t FirstPieceBytes(uint64_t at, uint64_t limit) {
  const uint64_t head = (kCopyDestinationBlockBytes - at % kCopyDestinationBlockBytes) % kCopyDestinationBlockBytes;
  return head == 0 ? limit : std::min(head, limit);
}

size_t PageBytes() {
  static const size_t page = [] {
    const long size = ::sysconf(_SC_PAGESIZE);
    return size > 0 ? static_cast<size_t>(size) : size_t{4096};
  }();
  return page;
}

// [in_offset, +size) of in_fd appended to out_fd (now at out_offset) through a buffer: pread, then
// write. Used when the source and destination offsets differ within a page, where the kernel's
// copy_file_range assembles every destination page from two source pages (docs/performance.md).
// The bytes sit in the buffer at the destination's offset within a page, so the write copies
// page onto page as an aligned copy does; only the read into the cached buffer is shifted. The
// first piece ends on a destination block (FirstPieceBytes), the others start on one.
uint64_t CopyThroughBuffer(int in_fd, uint64_t in_offset, int out_fd, uint64_t out_offset, uint64_t size,
                           const std::string& source, const std::string& destination) {
  const size_t page = PageBytes();
  // Allocated on a thread's first such copy and kept: a fresh allocation per call would be a new
  // mapping, faulted in page by page each time.
  thread_local std::unique_ptr<uint8_t[]> storage;
  if (!storage) storage.reset(new uint8_t[kBufferedCopyBytes + 2 * page]);
  const uintptr_t base = (reinterpret_cast<uintptr_t>(storage.get()) + page - 1) / page * page;
  uint64_t done = 0;
  while (done < size) {
    const uint64_t limit = std::min<uint64_t>(size - done, kBufferedCopyBytes);
    const size_t want = static_cast<size_t>(done == 0 ? FirstPieceBytes(out_offset, limit) : limit);
    uint8_t* const buffer = reinterpret_cast<uint8_t*>(base + (out_offset + done) % page);
    const ssize_t got = ::pread(in_fd, buffer, want, static_cast<off_t>(in_offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      Fail(ErrorCode::kIo, source + ": " + std::strerror(errno));
    }
    if (got == 0) FailChangedWhileRead(source);  // the file ends before the mapping does
    size_t written = 0;
    while (written < static_cast<size_t>(got)) {
      const ssize_t w = ::write(out_fd, buffer + written, static_cast<size_t>(got) - written);
      if (w < 0) {
        if (errno == EINTR) continue;
        Fail(ErrorCode::kIo, destination + ": " + std::strerror(errno));
      }
      written += static_cast<size_t>(w);
    }
    done += static_cast<uint64_t>(got);
  }
  return done;
}

}  // namespace

uint64_t CopyMappedBytes(int out_fd, const uint8_t* data, uint64_t size, const std::string& destination) {
  int in_fd = -1;
  off64_t in_offset = 0;
  std::string source;
  {
    MappingRegistry& r = Registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    uintptr_t start = 0;
    const MappedRange* range = RangeAt(r, reinterpret_cast<uintptr_t>(data), &start);
    // The whole run must lie in the one mapping; the caller's view keeps it (and its fd) alive.
    if (range == nullptr || range->fd < 0 || size > range->length - (reinterpret_cast<uintptr_t>(data) - start)) {
      return 0;
    }
    in_fd = range->fd;
    in_offset = static_cast<off64_t>(reinterpret_cast<uintptr_t>(data) - start);
    source = range->path;
  }
  // A destination without a position (a pipe: -1) cannot take copy_file_range either: left to it below.
  const off64_t out_offset = ::lseek64(out_fd, 0, SEEK_CUR);
  if (size >= kBufferedCopyMinBytes) {
    const uint64_t page = PageBytes();
    if (out_offset >= 0 && static_cast<uint64_t>(in_offset) % page != static_cast<uint64_t>(out_offset) % page) {
      return CopyThroughBuffer(in_fd, static_cast<uint64_t>(in_offset), out_fd, static_cast<uint64_t>(out_offset), size,
                               source, destination);
    }
  }
  // Bounded requests keep each call short (and the offsets far from overflow).
  constexpr uint64_t kCopyStep = uint64_t{1} << 30;
  uint64_t done = 0;
  while (done < size) {
    const uint64_t limit = std::min(size - done, kCopyStep);
    const size_t want = static_cast<size_t>(
        done == 0 && out_offset >= 0 ? FirstPieceBytes(static_cast<uint64_t>(out_offset), limit) : limit);
    ssize_t n = ::copy_file_range(in_fd, &in_offset, out_fd, nullptr, want, 0);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      // The kernel cannot copy between these two files (across file systems, as into a tmpfs
      // from a disk; special files; an O_APPEND destination): the rest goes through the buffer.
      // Not a write(2) from the mapping: that faults every source page into this process (a
      // 1 GB .pt written into /dev/shm at 0.4 of cp's rate, through the buffer at cp's own).
      if (err == EXDEV || err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == EBADF) {
        const off64_t now_at = ::lseek64(out_fd, 0, SEEK_CUR);
        return done + CopyThroughBuffer(in_fd, static_cast<uint64_t>(in_offset), out_fd,
                                        now_at >= 0 ? static_cast<uint64_t>(now_at) : 0, size - done, source,
                                        destination);
      }
      Fail(ErrorCode::kIo, destination + ": " + std::strerror(err));
    }
    if (n == 0) FailChangedWhileRead(source);
    done += static_cast<uint64_t>(n);
  }
  return done;
}

SharedBytes MappedFile::bytes() const {
  SharedBytes b(std::shared_ptr<const void>(shared_from_this(), data_), data_, size_);
  b.mapped_ = map_ != nullptr;
  return b;
}

}  // namespace trove
