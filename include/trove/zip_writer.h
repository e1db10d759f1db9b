// trove/zip_writer.h: writes zip archives whose stored payloads are aligned for mapping.
//
// Entries are written one after another into an AtomicFile, then Finish() writes the central
// directory, the zip64 end records when asked or needed, and the end record. Payloads can be
// streamed in chunks (CRC-32 and size computed on the way) so an entry never has to be in memory
// whole. Two layouts of the alignment padding are supported, each byte-compatible with its
// origin:
//  - kPyTorch: PyTorch's inline_container: flags 0x0808 (data descriptor follows the payload,
//    sizes and CRC zero in the local header), local extra "FB" + u16 pad + 'Z'*pad, zip64 extra
//    placed first when needed, zip64 end records always.
//  - kTensordict: Python zipfile as tensordict's archive writer drives it (force_zip64): real
//    CRC and sizes in the local header (patched after the payload), a zip64 extra on every
//    entry and, on aligned entries, a padding block id 0x6474 of zero bytes placed *before* it;
//    UTF-8 flag on non-ASCII names; DOS date fixed at 1980-01-01 00:00 so output is reproducible;
//    zip64 end records only when Python would write them.
// The amount of padding is the caller's choice (BeginEntry's align and phase; PlacementFor).
// If a call throws, the archive is incomplete: drop the AtomicFile without committing it.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trove/atomic_file.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"

namespace trove {

enum class ZipLayout { kPyTorch, kTensordict };

// BeginEntry's expected_size when the length of a streamed entry is not known in advance.
inline constexpr uint64_t kZipUnknownSize = ~uint64_t{0};

// Where a stored payload should start: `phase` bytes past a multiple of `align`.
struct ZipPlacement {
  uint64_t align = 0;
  uint64_t phase = 0;
};
// Payloads at least this large that are copied from a mapped file start at the same offset within
// a page as in their source: the kernel then copies them in whole pages (about a fifth faster
// than pages split in two on the test machine). The extra padding is under one page, at most
// 0.4% of such a payload.
inline constexpr uint64_t kPageCongruentMinBytes = uint64_t{1} << 20;
// The page that placement aims at: the kernel's page on x86-64 and most arm64 systems (larger
// pages only make the placement less useful, never wrong).
inline constexpr uint64_t kZipPageBytes = 4096;
// The placement for a stored payload of `size` bytes that needs `align` (a power of two up to
// 4096), copied from `source_offset` in a file: page-congruent with its source as above when large
// enough and at a multiple of `align` within its page; else `align` alone.
ZipPlacement PlacementFor(uint64_t source_offset, uint64_t size, uint64_t align);
// The same for `bytes`, whose source is the file they are mapped from; bytes in memory: `align`.
ZipPlacement PlacementFor(const SharedBytes& bytes, uint64_t align);

class ZipWriter {
 public:
  ZipWriter(AtomicFile& out, ZipLayout layout);
  ~ZipWriter();
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;

  // Starts an entry. `align` (0 or a power of two up to 32768) places the payload's first byte
  // at a multiple of it, or `phase` (< align) bytes past one; it applies to kStored entries only
  // and is ignored otherwise.
  // Compression applies to the whole payload. `expected_size`, when known, must equal the bytes
  // then written; kPyTorch needs it for entries of 4 GiB or more (PyTorch decides the zip64
  // fields of the local header before the payload), kTensordict never does.
  // Names follow the reader's rules (no "..", leading '/', backslash, NUL) and must be unique.
  void BeginEntry(const std::string& name, ZipMethod method = ZipMethod::kStored, uint64_t align = 0,
                  uint64_t expected_size = kZipUnknownSize, uint64_t phase = 0);
  void Write(const void* data, uint64_t size);
  // Write of bytes whose CRC-32 the caller has already computed (several threads checksum the
  // pieces of a cast, core/cast_pipeline.h): it is combined in instead of read from the bytes.
  void WriteChecksummed(const void* data, uint64_t size, uint32_t crc32);
  // Writes bytes streaming them in windows (see SharedBytes::Stream). Bytes that carry their
  // recorded CRC-32 into a stored entry are not read to checksum them: the recorded value is
  // combined in, so a conversion copies a payload without touching it.
  void WriteBytes(const SharedBytes& bytes);
  void EndEntry();
  // Convenience: Begin + Write + End.
  void AddEntry(const std::string& name, const void* data, uint64_t size, ZipMethod method = ZipMethod::kStored,
                uint64_t align = 0);
  // Writes the central directory and end records. The AtomicFile is not committed here.
  void Finish();

  // The entries written so far, with their final flags, CRC-32, sizes, offsets and local extra
  // (PyTorch's serialization id combines their CRCs in order).
  const std::vector<ZipEntry>& written() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trove
