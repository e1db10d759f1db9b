// zip/zip_layout.h: the bytes each ZipLayout puts in local headers, descriptors, central
// directory entries and end records.
//
// Pure functions of offsets and sizes, so the zip64 rules can be tested at offsets beyond 4 GiB
// without writing 4 GiB. The two layouts copy their origins:
//  - kPyTorch (PyTorch's miniz-based inline_container): version fields 0, flags 0x0808, DOS time
//    0, CRC and sizes in a data descriptor (16 bytes, or 24 when the local header carries a zip64
//    extra), zip64 extra first when the size or the offset reaches 0xFFFFFFFF, then "FB" + u16 pad
//    + 'Z'*pad, zip64 end records always. Empty stored entries: flags 0x0800, no descriptor.
//  - kTensordict (Python zipfile with force_zip64): local 32-bit sizes 0xFFFFFFFF, CRC and sizes
//    patched in after the payload, extra = [0x6474 padding block] + zip64 block (both sizes);
//    the central directory has a zip64 block (values above 2^31-1, Python's ZIP64_LIMIT) followed
//    by the local extra without its zip64 block; zip64 end records only when Python writes them.
// Thread-safe: no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trove/zip_writer.h"

namespace trove::zip {

// Largest alignment: the padding lives in a 16-bit-length extra field.
inline constexpr uint64_t kMaxZipAlign = uint64_t{1} << 15;
// Python's zipfile switches to zip64 central directory values above this (ZIP64_LIMIT).
inline constexpr uint64_t kPythonZip64Limit = (uint64_t{1} << 31) - 1;
// A compressed payload may be slightly larger than its input (deflate adds ~0.03%, bzip2 and
// lzma ~1%); an entry expected this close to 4 GiB gets zip64 fields in case it crosses.
inline constexpr uint64_t kCompressedZip64Threshold = 0xFFFFFFFFull - (0xFFFFFFFFull / 32);

struct LocalPlan {
  ZipMethod method = ZipMethod::kStored;
  std::string header;          // fixed fields, name and extra, with the values known so far
  uint64_t data_offset = 0;    // absolute offset of the first payload byte
  bool zip64 = false;          // the local header carries a zip64 extra (64-bit descriptor)
  uint64_t zip64_sizes_at = 0; // where its u64 uncompressed and compressed sizes are; 0: none
};

struct Patch {
  uint64_t at;  // within the local header
  std::string bytes;
};

// `expected_size` is kZipUnknownSize when streaming an entry of unknown length. A stored entry
// with `align` gets its payload at `phase` (< align) past a multiple of `align`.
LocalPlan PlanLocal(ZipLayout layout, std::string_view name, ZipMethod method, uint64_t offset, uint64_t align,
                    uint64_t expected_size, uint64_t phase = 0);
// The final CRC, sizes and flags to write over a planned header once the payload is done.
std::vector<Patch> LocalPatches(ZipLayout layout, const LocalPlan& plan, uint32_t crc, uint64_t compressed,
                                uint64_t uncompressed);
// True when a PyTorch-layout entry is written without a data descriptor (empty and stored).
bool PyTorchEmptyEntry(ZipMethod method, uint64_t compressed, uint64_t uncompressed);
std::string DataDescriptor(bool zip64, uint32_t crc, uint64_t compressed, uint64_t uncompressed);
// One central directory entry for an entry written with the given layout (flags, CRC, sizes,
// offset and local_extra as written).
std::string CentralEntry(ZipLayout layout, const ZipEntry& entry);
std::string EndRecords(ZipLayout layout, uint64_t count, uint64_t cd_offset, uint64_t cd_size);

}  // namespace trove::zip
