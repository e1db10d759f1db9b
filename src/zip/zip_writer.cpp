#include "trove/zip_writer.h"

#include <zlib.h>

#include <cstring>
#include <set>

#include "trove/error.h"
#include "zip/zip_compress.h"
#include "zip/zip_layout.h"
#include "zip/zip_records.h"

namespace trove {
namespace {

using namespace zip;

// An entry whose header and payload fit here is written in one piece after its CRC and sizes
// are patched in memory; larger ones are patched in the file.
constexpr uint64_t kStagedBytes = uint64_t{1} << 20;

std::string Entry(const std::string& name) { return "zip entry " + QuoteName(name); }

}  // namespace

// Everything the writer keeps; ZipWriter's methods forward here.
struct ZipWriter::Impl {
  Impl(AtomicFile& out, ZipLayout layout) : out_(out), layout_(layout), cursor_(out.position()) {}

  void BeginEntry(const std::string& name, ZipMethod method, uint64_t align, uint64_t expected_size, uint64_t phase);
  // crc: the bytes' CRC-32 when the caller has it already (WriteChecksummed).
  void Write(const void* data, uint64_t size, std::optional<uint32_t> crc = std::nullopt);
  void WriteBytes(const SharedBytes& bytes);
  void EndEntry();
  void Finish();
  void Emit(const void* data, uint64_t size);
  void FlushStaged();

  AtomicFile& out_;
  ZipLayout layout_;
  std::vector<ZipEntry> written_;
  std::set<std::string> names_;
  uint64_t cursor_ = 0;  // where the next byte lands: bytes given to out_ plus staged_
  bool finished_ = false;
  // Current entry state.
  bool open_ = false;
  ZipEntry current_;
  std::string header_;           // its local header as planned, patched at EndEntry
  bool header_zip64_ = false;    // the local header has a zip64 extra
  uint64_t zip64_sizes_at_ = 0;  // where that extra's sizes are in header_ (0: none)
  uint64_t expected_size_ = kZipUnknownSize;
  uint32_t crc_ = 0;
  uint64_t size_ = 0;
  uint64_t compressed_ = 0;
  // The local header and the first payload bytes stay here until the entry ends or outgrows
  // it, so that small entries are patched in memory instead of with a write at an offset.
  std::string staged_;
  bool staged_out_ = false;  // staged_ has been written; patches go through WriteAt
  // The local header was completed before its payload (WriteBytes knew the whole payload and its
  // CRC-32 up front) for this CRC and size: EndEntry patches nothing if they still hold.
  bool header_final_ = false;
  uint32_t final_crc_ = 0;
  uint64_t final_size_ = 0;
  std::unique_ptr<ZipCompressor> compressor_;
};

ZipWriter::ZipWriter(AtomicFile& out, ZipLayout layout) : impl_(std::make_unique<Impl>(out, layout)) {}

ZipWriter::~ZipWriter() = default;

void ZipWriter::BeginEntry(const std::string& name, ZipMethod method, uint64_t align, uint64_t expected_size,
                           uint64_t phase) {
  impl_->BeginEntry(name, method, align, expected_size, phase);
}
void ZipWriter::Write(const void* data, uint64_t size) { impl_->Write(data, size); }
void ZipWriter::WriteChecksummed(const void* data, uint64_t size, uint32_t crc32) { impl_->Write(data, size, crc32); }
void ZipWriter::WriteBytes(const SharedBytes& bytes) { impl_->WriteBytes(bytes); }
void ZipWriter::EndEntry() { impl_->EndEntry(); }
void ZipWriter::Finish() { impl_->Finish(); }
const std::vector<ZipEntry>& ZipWriter::written() const { return impl_->written_; }

void ZipWriter::Impl::Emit(const void* data, uint64_t size) {
  if (!staged_out_ && staged_.size() + size <= kStagedBytes) {
    staged_.append(static_cast<const char*>(data), static_cast<size_t>(size));
  } else {
    FlushStaged();
    out_.Write(data, size);
  }
  cursor_ += size;
}

void ZipWriter::Impl::FlushStaged() {
  if (staged_out_) return;
  out_.Write(staged_.data(), staged_.size());
  staged_.clear();
  staged_out_ = true;
}

ZipPlacement PlacementFor(uint64_t source_offset, uint64_t size, uint64_t align) {
  if (size < kPageCongruentMinBytes || align == 0 || align > kZipPageBytes) return {align, 0};
  const uint64_t phase = source_offset % kZipPageBytes;
  if (phase % align != 0) return {align, 0};
  return {kZipPageBytes, phase};
}

ZipPlacement PlacementFor(const SharedBytes& bytes, uint64_t align) {
  if (!bytes.mapped()) return {align, 0};
  // A file mapped from offset 0 puts each byte at the same offset within a page in memory as in
  // the file, so the address tells the source's page offset.
  return PlacementFor(reinterpret_cast<uintptr_t>(bytes.data()), bytes.size(), align);
}

void ZipWriter::Impl::BeginEntry(const std::string& name, ZipMethod method, uint64_t align, uint64_t expected_size,
                           uint64_t phase) {
  if (finished_) Fail(ErrorCode::kUsage, Entry(name) + ": the archive is already finished");
  if (open_) Fail(ErrorCode::kUsage, Entry(name) + ": entry " + QuoteName(current_.name) + " is still open");
  if (const char* problem = EntryNameProblem(name)) Fail(ErrorCode::kUsage, Entry(name) + ": " + problem);
  if (method != ZipMethod::kStored && method != ZipMethod::kDeflate && method != ZipMethod::kBzip2 &&
      method != ZipMethod::kLzma) {
    Fail(ErrorCode::kUsage, Entry(name) + ": unknown method " + std::to_string(static_cast<int>(method)));
  }
  if (align != 0 && ((align & (align - 1)) != 0 || align > kMaxZipAlign)) {
    Fail(ErrorCode::kUsage, Entry(name) + ": alignment " + std::to_string(align) +
                                " is not a power of two up to " + std::to_string(kMaxZipAlign));
  }
  if (phase != 0 && phase >= align) {
    Fail(ErrorCode::kUsage, Entry(name) + ": phase " + std::to_string(phase) + " is not below the alignment " +
                                std::to_string(align));
  }
  if (written_.size() >= kMaxZipEntries) {
    Fail(ErrorCode::kLimit, Entry(name) + ": more than kMaxZipEntries (" + std::to_string(kMaxZipEntries) +
                                ") entries, which readers refuse");
  }
  if (!names_.insert(name).second) Fail(ErrorCode::kUsage, Entry(name) + ": duplicate entry name");

  LocalPlan plan = PlanLocal(layout_, name, method, cursor_, align, expected_size, phase);
  current_ = ZipEntry{};
  current_.name = name;
  current_.method = static_cast<uint16_t>(method);
  current_.local_header_offset = cursor_;
  current_.data_offset = plan.data_offset;
  current_.zip64 = plan.zip64;
  header_ = std::move(plan.header);
  header_zip64_ = plan.zip64;
  zip64_sizes_at_ = plan.zip64_sizes_at;
  expected_size_ = expected_size;
  crc_ = 0;
  size_ = 0;
  compressed_ = 0;
  compressor_ = ZipCompressor::Make(method);
  header_final_ = false;
  staged_.clear();
  staged_out_ = false;
  open_ = true;
  Emit(header_.data(), header_.size());
}

void ZipWriter::Impl::Write(const void* data, uint64_t size, std::optional<uint32_t> crc) {
  if (!open_) Fail(ErrorCode::kUsage, "zip writer: Write without BeginEntry");
  if (size == 0) return;
  const auto* p = static_cast<const uint8_t*>(data);
  crc_ = crc ? static_cast<uint32_t>(crc32_combine(crc_, *crc, static_cast<z_off_t>(size))) : Crc32(p, size, crc_);
  if (__builtin_add_overflow(size_, size, &size_)) Fail(ErrorCode::kUsage, Entry(current_.name) + ": size overflows");
  if (compressor_ != nullptr) {
    compressor_->Push(p, size, [this](const uint8_t* out, uint64_t n) {
      compressed_ += n;
      Emit(out, n);
    });
  } else {
    compressed_ += size;
    Emit(p, size);
  }
}

void ZipWriter::Impl::WriteBytes(const SharedBytes& bytes) {
  const std::optional<uint32_t> recorded = bytes.recorded_crc32();
  if (!recorded || compressor_ != nullptr) {
    bytes.Stream([this](const uint8_t* p, size_t n) { Write(p, n); });
    return;
  }
  if (!open_) Fail(ErrorCode::kUsage, "zip writer: Write without BeginEntry");
  if (size_ == 0 && !staged_out_ && !bytes.empty()) {
    // The whole payload and its CRC are known before any of it is written: complete the local
    // header now, while it is still in memory, rather than rewriting it on disk afterwards (by
    // then its page may be under writeback, and the rewrite would wait for the disk).
    for (const Patch& p : LocalPatches(layout_, {static_cast<ZipMethod>(current_.method), header_, 0, header_zip64_,
                                                 zip64_sizes_at_},
                                       *recorded, bytes.size(), bytes.size())) {
      std::memcpy(header_.data() + p.at, p.bytes.data(), p.bytes.size());
      std::memcpy(staged_.data() + p.at, p.bytes.data(), p.bytes.size());
    }
    header_final_ = true;
    final_crc_ = *recorded;
    final_size_ = bytes.size();
  }
  if (__builtin_add_overflow(size_, bytes.size(), &size_)) {
    Fail(ErrorCode::kUsage, Entry(current_.name) + ": size overflows");
  }
  // Run by run: a mapped range goes to the output whole, so that it is copied by the kernel
  // (copy_file_range, page cache to page cache: core/write_behind.h's WriteOut) instead of read
  // into a buffer and written back (Stream reads with pread under --io auto).
  bytes.ForEachRun([this](const uint8_t* p, size_t n) { Emit(p, n); });
  compressed_ += bytes.size();
  crc_ = static_cast<uint32_t>(crc32_combine(crc_, *recorded, static_cast<z_off_t>(bytes.size())));
}

void ZipWriter::Impl::EndEntry() {
  if (!open_) Fail(ErrorCode::kUsage, "zip writer: EndEntry without BeginEntry");
  if (compressor_ != nullptr) {
    compressor_->Finish([this](const uint8_t* out, uint64_t n) {
      compressed_ += n;
      Emit(out, n);
    });
    compressor_.reset();
  }
  const std::string where = Entry(current_.name);
  if (expected_size_ != kZipUnknownSize && expected_size_ != size_) {
    Fail(ErrorCode::kUsage, where + ": " + std::to_string(size_) + " bytes written, " +
                                std::to_string(expected_size_) + " expected");
  }
  const auto method = static_cast<ZipMethod>(current_.method);
  const bool pytorch = layout_ == ZipLayout::kPyTorch;
  const bool descriptor = pytorch && !PyTorchEmptyEntry(method, compressed_, size_);
  if (pytorch && !header_zip64_ && (size_ >= kMax32 || compressed_ >= kMax32)) {
    Fail(ErrorCode::kUsage, where + ": reached 4 GiB without a local zip64 extra; pass expected_size to BeginEntry");
  }
  const bool header_done = header_final_ && final_crc_ == crc_ && final_size_ == size_ && compressed_ == size_;
  for (const Patch& p : header_done ? std::vector<Patch>{}
                                    : LocalPatches(layout_, {method, header_, 0, header_zip64_, zip64_sizes_at_},
                                                   crc_, compressed_, size_)) {
    std::memcpy(header_.data() + p.at, p.bytes.data(), p.bytes.size());
    if (!staged_out_) {
      std::memcpy(staged_.data() + p.at, p.bytes.data(), p.bytes.size());
    } else {
      out_.WriteAt(current_.local_header_offset + p.at, p.bytes.data(), p.bytes.size());
    }
  }
  if (descriptor) {
    const std::string d = DataDescriptor(header_zip64_, crc_, compressed_, size_);
    Emit(d.data(), d.size());
  }
  FlushStaged();

  current_.flags = LoadLe16(reinterpret_cast<const uint8_t*>(header_.data()) + kLocalFlagsAt);
  current_.crc32 = crc_;
  current_.compressed_size = compressed_;
  current_.uncompressed_size = size_;
  const uint64_t name_end = kLocalSize + current_.name.size();
  current_.local_extra = header_.substr(name_end);
  written_.push_back(std::move(current_));
  current_ = ZipEntry{};
  open_ = false;
}

void ZipWriter::AddEntry(const std::string& name, const void* data, uint64_t size, ZipMethod method, uint64_t align) {
  BeginEntry(name, method, align, size);
  Write(data, size);
  EndEntry();
}

void ZipWriter::Impl::Finish() {
  if (finished_) Fail(ErrorCode::kUsage, "zip writer: Finish called twice");
  if (open_) Fail(ErrorCode::kUsage, Entry(current_.name) + ": still open at Finish");
  finished_ = true;
  staged_out_ = true;  // nothing left to patch: write straight through
  const uint64_t cd_offset = cursor_;
  for (const ZipEntry& e : written_) {
    const std::string c = CentralEntry(layout_, e);
    Emit(c.data(), c.size());
  }
  const std::string end = EndRecords(layout_, written_.size(), cd_offset, cursor_ - cd_offset);
  Emit(end.data(), end.size());
}

}  // namespace trove
