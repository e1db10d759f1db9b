#include "zip/zip_layout.h"

#include <algorithm>

#include "core/byte_reader.h"
#include "zip/zip_records.h"

namespace trove::zip {
namespace {

// Python's zipfile: zip64 needs 4.5, bzip2 4.6, lzma 6.3 (version needed and made by).
uint16_t PythonVersion(ZipMethod method) {
  if (method == ZipMethod::kBzip2) return 46;
  if (method == ZipMethod::kLzma) return 63;
  return 45;
}
// Python on Unix records its host system as 3 in "version made by".
constexpr uint16_t kPythonMadeBySystem = 3;
// 1980-01-01 00:00, the first DOS date: fixed so that archives are reproducible.
constexpr uint16_t kTensordictDosDate = (0 << 9) | (1 << 5) | 1;
constexpr uint32_t kTensordictFileMode = 0100644u << 16;
constexpr uint16_t kPyTorchZip64MadeBy = 0x031E;
constexpr uint16_t kZip64Version = 45;

// Python sets UTF-8 only for non-ASCII names, and bit 1 for its LZMA end-of-stream marker.
uint16_t TensordictFlags(std::string_view name, ZipMethod method) {
  uint16_t flags = 0;
  for (char c : name) {
    if (static_cast<unsigned char>(c) >= 0x80) flags |= kFlagUtf8;
  }
  if (method == ZipMethod::kLzma) flags |= kFlagLzmaEndMarker;
  return flags;
}

// Bytes to add at `position` so that it lands `phase` past a multiple of `align`.
uint64_t PadFor(uint64_t position, uint64_t align, uint64_t phase) {
  return align == 0 ? 0 : (align + phase - position % align) % align;
}

void PutLocalFixed(std::string& h, uint16_t version, uint16_t flags, ZipMethod method, uint16_t date, uint32_t crc,
                   uint32_t csize, uint32_t usize, std::string_view name, uint64_t extra_len) {
  PutU32(h, kLocalSig);
  PutU16(h, version);
  PutU16(h, flags);
  PutU16(h, static_cast<uint16_t>(method));
  PutU16(h, 0);  // DOS time
  PutU16(h, date);
  PutU32(h, crc);
  PutU32(h, csize);
  PutU32(h, usize);
  PutU16(h, static_cast<uint16_t>(name.size()));
  PutU16(h, static_cast<uint16_t>(extra_len));
  h.append(name);
}

std::string U64Bytes(uint64_t v) {
  std::string s;
  PutU64(s, v);
  return s;
}

// The extra field without its zip64 blocks, as Python's _strip_extra leaves it.
std::string StripZip64(std::string_view extra) {
  std::string out;
  ByteReader r(reinterpret_cast<const uint8_t*>(extra.data()), extra.size());
  while (r.remaining() >= 4) {
    const uint64_t start = r.position();
    const uint16_t id = r.U16();
    const uint16_t len = r.U16();
    if (len > r.remaining()) break;
    r.Skip(len);
    if (id != kExtraZip64) out.append(extra.substr(start, 4 + len));
  }
  return out;
}

}  // namespace

LocalPlan PlanLocal(ZipLayout layout, std::string_view name, ZipMethod method, uint64_t offset, uint64_t align,
                    uint64_t expected_size, uint64_t phase) {
  LocalPlan plan;
  plan.method = method;
  const bool aligned = align > 0 && method == ZipMethod::kStored;
  std::string& h = plan.header;
  const uint64_t name_end = offset + kLocalSize + name.size();
  if (layout == ZipLayout::kPyTorch) {
    const bool known = expected_size != kZipUnknownSize;
    const bool big_size = known && (expected_size >= kMax32 ||
                                    (method != ZipMethod::kStored && expected_size >= kCompressedZip64Threshold));
    const bool big_offset = offset >= kMax32;
    std::string extra;
    if (big_size || big_offset) {
      plan.zip64 = true;
      PutU16(extra, kExtraZip64);
      PutU16(extra, static_cast<uint16_t>((big_size ? 16 : 0) + (big_offset ? 8 : 0)));
      if (big_size) {
        plan.zip64_sizes_at = kLocalSize + name.size() + extra.size();
        PutU64(extra, 0);  // sizes are patched in after the payload
        PutU64(extra, 0);
      }
      if (big_offset) PutU64(extra, offset);
    }
    if (aligned) {
      const uint64_t pad = PadFor(name_end + extra.size() + 4, align, phase);
      PutU16(extra, kExtraPyTorchPad);
      PutU16(extra, static_cast<uint16_t>(pad));
      extra.append(pad, 'Z');
    }
    PutLocalFixed(h, 0, kFlagUtf8 | kFlagDescriptor, method, 0, 0, 0, 0, name, extra.size());
    h += extra;
  } else {
    constexpr uint64_t kZip64Block = 4 + 16;
    std::string extra;
    if (aligned) {
      const uint64_t pad = PadFor(name_end + 4 + kZip64Block, align, phase);
      PutU16(extra, kExtraTensordictPad);
      PutU16(extra, static_cast<uint16_t>(pad));
      extra.append(pad, '\0');
    }
    plan.zip64 = true;
    plan.zip64_sizes_at = kLocalSize + name.size() + extra.size() + 4;
    PutU16(extra, kExtraZip64);
    PutU16(extra, 16);
    PutU64(extra, 0);
    PutU64(extra, 0);
    PutLocalFixed(h, PythonVersion(method), TensordictFlags(name, method), method, kTensordictDosDate, 0, kMax32, kMax32,
                  name, extra.size());
    h += extra;
  }
  plan.data_offset = offset + h.size();
  return plan;
}

bool PyTorchEmptyEntry(ZipMethod method, uint64_t compressed, uint64_t uncompressed) {
  return method == ZipMethod::kStored && compressed == 0 && uncompressed == 0;
}

std::vector<Patch> LocalPatches(ZipLayout layout, const LocalPlan& plan, uint32_t crc, uint64_t compressed,
                                uint64_t uncompressed) {
  std::vector<Patch> patches;
  if (plan.zip64_sizes_at != 0) {
    patches.push_back({plan.zip64_sizes_at, U64Bytes(uncompressed) + U64Bytes(compressed)});
  }
  if (layout == ZipLayout::kTensordict) {
    std::string c;
    PutU32(c, crc);
    patches.push_back({kLocalCrcAt, c});
  } else {
    if (PyTorchEmptyEntry(plan.method, compressed, uncompressed)) {
      std::string f;
      PutU16(f, kFlagUtf8);
      patches.push_back({kLocalFlagsAt, f});
    }
  }
  return patches;
}

std::string DataDescriptor(bool zip64, uint32_t crc, uint64_t compressed, uint64_t uncompressed) {
  std::string d;
  PutU32(d, kDescriptorSig);
  PutU32(d, crc);
  if (zip64) {
    PutU64(d, compressed);
    PutU64(d, uncompressed);
  } else {
    PutU32(d, static_cast<uint32_t>(compressed));
    PutU32(d, static_cast<uint32_t>(uncompressed));
  }
  return d;
}

std::string CentralEntry(ZipLayout layout, const ZipEntry& e) {
  const auto method = static_cast<ZipMethod>(e.method);
  std::string zip64;
  uint32_t csize = static_cast<uint32_t>(e.compressed_size);
  uint32_t usize = static_cast<uint32_t>(e.uncompressed_size);
  uint32_t offset = static_cast<uint32_t>(e.local_header_offset);
  std::string extra;
  uint16_t made_by = 0, needed = 0, date = 0;
  uint32_t attributes = 0;
  if (layout == ZipLayout::kPyTorch) {
    // Each field that does not fit is replaced by its sentinel and moved to the zip64 block.
    if (e.uncompressed_size >= kMax32) {
      PutU64(zip64, e.uncompressed_size);
      usize = kMax32;
    }
    if (e.compressed_size >= kMax32) {
      PutU64(zip64, e.compressed_size);
      csize = kMax32;
    }
    if (e.local_header_offset >= kMax32) {
      PutU64(zip64, e.local_header_offset);
      offset = kMax32;
    }
  } else {
    // Python moves both sizes together, and compares with its 2 GiB ZIP64_LIMIT.
    if (e.uncompressed_size > kPythonZip64Limit || e.compressed_size > kPythonZip64Limit) {
      PutU64(zip64, e.uncompressed_size);
      PutU64(zip64, e.compressed_size);
      usize = csize = kMax32;
    }
    if (e.local_header_offset > kPythonZip64Limit) {
      PutU64(zip64, e.local_header_offset);
      offset = kMax32;
    }
    needed = PythonVersion(method);
    made_by = static_cast<uint16_t>((kPythonMadeBySystem << 8) | needed);
    date = kTensordictDosDate;
    attributes = kTensordictFileMode;
  }
  if (!zip64.empty()) {
    PutU16(extra, kExtraZip64);
    PutU16(extra, static_cast<uint16_t>(zip64.size()));
    extra += zip64;
  }
  if (layout == ZipLayout::kTensordict) extra += StripZip64(e.local_extra);

  std::string c;
  PutU32(c, kCentralSig);
  PutU16(c, made_by);
  PutU16(c, needed);
  PutU16(c, e.flags);
  PutU16(c, e.method);
  PutU16(c, 0);  // DOS time
  PutU16(c, date);
  PutU32(c, e.crc32);
  PutU32(c, csize);
  PutU32(c, usize);
  PutU16(c, static_cast<uint16_t>(e.name.size()));
  PutU16(c, static_cast<uint16_t>(extra.size()));
  PutU16(c, 0);  // comment length
  PutU16(c, 0);  // disk number
  PutU16(c, 0);  // internal attributes
  PutU32(c, attributes);
  PutU32(c, offset);
  c += e.name;
  c += extra;
  return c;
}

std::string EndRecords(ZipLayout layout, uint64_t count, uint64_t cd_offset, uint64_t cd_size) {
  const bool zip64 = layout == ZipLayout::kPyTorch ||
                     count > kMax16 || cd_offset > kPythonZip64Limit || cd_size > kPythonZip64Limit;
  std::string r;
  if (zip64) {
    const uint64_t z_end = cd_offset + cd_size;
    PutU32(r, kZip64EndSig);
    PutU64(r, kZip64EndSize - 12);
    PutU16(r, layout == ZipLayout::kPyTorch ? kPyTorchZip64MadeBy : kZip64Version);
    PutU16(r, kZip64Version);
    PutU32(r, 0);  // this disk
    PutU32(r, 0);  // central directory disk
    PutU64(r, count);
    PutU64(r, count);
    PutU64(r, cd_size);
    PutU64(r, cd_offset);
    PutU32(r, kZip64LocatorSig);
    PutU32(r, 0);  // disk of the zip64 end record
    PutU64(r, z_end);
    PutU32(r, 1);  // total disks
  }
  PutU32(r, kEndSig);
  PutU16(r, 0);
  PutU16(r, 0);
  PutU16(r, static_cast<uint16_t>(std::min<uint64_t>(count, kMax16)));
  PutU16(r, static_cast<uint16_t>(std::min<uint64_t>(count, kMax16)));
  PutU32(r, static_cast<uint32_t>(std::min<uint64_t>(cd_size, kMax32)));
  PutU32(r, static_cast<uint32_t>(std::min<uint64_t>(cd_offset, kMax32)));
  PutU16(r, 0);  // comment length
  return r;
}

}  // namespace trove::zip
