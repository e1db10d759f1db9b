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
//  - kTensordict: Python zipfile as tensordict's archive writer drives it: real CRC and sizes
//    in the local header (patched after the payload), a padding block id 0x6474 with zero
//    bytes placed *before* a zip64 extra block on every entry, UTF-8 flag on non-ASCII names.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trove/atomic_file.h"
#include "trove/zip_reader.h"

namespace trove {

enum class ZipLayout { kPyTorch, kTensordict };

class ZipWriter {
 public:
  ZipWriter(AtomicFile& out, ZipLayout layout);

  // Starts an entry. `align` (0 or a power of two) places the payload's first byte at a
  // multiple of it (only for kStored). Compression applies to the whole payload.
  void BeginEntry(const std::string& name, ZipMethod method = ZipMethod::kStored, uint64_t align = 0);
  void Write(const void* data, uint64_t size);
  void EndEntry();
  // Convenience: Begin + Write + End.
  void AddEntry(const std::string& name, const void* data, uint64_t size, ZipMethod method = ZipMethod::kStored,
                uint64_t align = 0);
  // Writes the central directory and end records. The AtomicFile is not committed here.
  void Finish();

  // CRC-32 of every payload so far, combined in order (PyTorch's serialization id uses it).
  const std::vector<ZipEntry>& written() const { return written_; }

 private:
  struct Impl;
  AtomicFile& out_;
  ZipLayout layout_;
  std::vector<ZipEntry> written_;
  // Current entry state.
  bool open_ = false;
  ZipEntry current_;
  uint32_t crc_ = 0;
  uint64_t size_ = 0;
  uint64_t compressed_ = 0;
  std::vector<uint8_t> pending_;  // compressed payload buffered per chunk
  void* stream_ = nullptr;        // compressor state (z_stream, bz_stream or lzma_stream)
};

}  // namespace trove
