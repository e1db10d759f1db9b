// CRC-32 maintenance of a .tdz archive: checking them, and re-stamping them in place after
// mode="r+" edits (tensordict's refresh_archive_checksums).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "core/byte_reader.h"
#include "trove/error.h"
#include "trove/tensordict.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kDataDescriptorSig = 0x08074b50;
constexpr uint16_t kFlagDataDescriptor = 0x0008;

// Where each entry's CRC field sits in the central directory, by name. ZipReader has already
// validated the archive; this walk only locates fields, with every read bounds-checked.
std::map<std::string, uint64_t> CentralCrcOffsets(const SharedBytes& bytes) {
  const uint64_t size = bytes.size();
  if (size < 22) Fail(ErrorCode::kCorrupt, "too short for a zip end record");
  uint64_t end = UINT64_MAX;
  const uint64_t lowest = size > 22 + 65535 ? size - 22 - 65535 : 0;
  for (uint64_t at = size - 22 + 1; at-- > lowest;) {
    ByteReader r(bytes.data() + at, 4, at);
    if (r.U32() == kEndSig) {
      end = at;
      break;
    }
  }
  if (end == UINT64_MAX) Fail(ErrorCode::kCorrupt, "no zip end record");
  ByteReader er(bytes.data(), size);
  er.Seek(end + 10);
  uint64_t count = er.U16();
  er.Skip(4);
  uint64_t cd_offset = er.U32();
  if ((cd_offset == 0xFFFFFFFFu || count == 0xFFFF) && end >= 20) {
    ByteReader lr(bytes.data(), size);
    lr.Seek(end - 20);
    if (lr.U32() == kZip64LocatorSig) {
      lr.Skip(4);
      uint64_t z64 = lr.U64();
      ByteReader zr(bytes.data(), size);
      zr.Seek(z64);
      if (zr.U32() != kZip64EndSig) Fail(ErrorCode::kCorrupt, "bad zip64 end record");
      zr.Skip(8 + 2 + 2 + 4 + 4);
      zr.Skip(8);
      count = zr.U64();
      zr.Skip(8);
      cd_offset = zr.U64();
    }
  }
  std::map<std::string, uint64_t> out;
  ByteReader cr(bytes.data(), size);
  cr.Seek(cd_offset);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t header = cr.position();
    if (cr.U32() != kCentralHeaderSig) Fail(ErrorCode::kCorrupt, "bad central directory header");
    cr.Skip(24);
    uint64_t name_len = cr.U16(), extra_len = cr.U16(), comment_len = cr.U16();
    cr.Skip(12);
    std::string name(cr.Bytes(name_len));
    cr.Skip(extra_len + comment_len);
    out[name] = header + 16;
  }
  return out;
}

void PatchU32(int fd, uint64_t offset, uint32_t value, const std::string& path) {
  uint8_t le[4] = {static_cast<uint8_t>(value), static_cast<uint8_t>(value >> 8), static_cast<uint8_t>(value >> 16),
                   static_cast<uint8_t>(value >> 24)};
  if (::pwrite(fd, le, 4, static_cast<off_t>(offset)) != 4) Fail(ErrorCode::kIo, path + ": " + std::strerror(errno));
}

}  // namespace

std::vector<std::string> CheckTdzChecksums(const std::string& archive) {
  auto file = MappedFile::Open(archive);  // its errors name the path already
  return WithContext(archive, [&] {
    ZipReader zip(file);
    std::vector<std::string> bad;
    for (const ZipEntry& e : zip.entries())
      if (!zip.CheckCrc(e)) bad.push_back(e.name);
    return bad;
  });
}

std::vector<std::string> RefreshTdzChecksums(const std::string& archive) {
  auto file = MappedFile::Open(archive);
  return WithContext(archive, [&] {
    ZipReader zip(file);
    std::vector<std::pair<const ZipEntry*, uint32_t>> stale;
    for (const ZipEntry& e : zip.entries()) {
      SharedBytes payload = zip.Read(e);
      uint32_t crc = Crc32(payload.data(), payload.size());
      if (crc != e.crc32) stale.emplace_back(&e, crc);
    }
    std::vector<std::string> fixed;
    if (stale.empty()) return fixed;
    auto central = CentralCrcOffsets(file->bytes());
    int fd = ::open(archive.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) Fail(ErrorCode::kIo, std::strerror(errno));
    try {
      for (const auto& [e, crc] : stale) {
        auto c = central.find(e->name);
        if (c == central.end()) Fail(ErrorCode::kCorrupt, "entry '" + e->name + "' not found in the central directory");
        if (e->flags & kFlagDataDescriptor) {
          ByteReader dr(file->data(), file->size());
          dr.Seek(e->data_offset + e->compressed_size);
          uint64_t at = dr.position();
          if (dr.U32() == kDataDescriptorSig) at += 4;
          ByteReader check(file->data(), file->size());
          check.Seek(at);
          check.Need(4);
          PatchU32(fd, at, crc, archive);
        } else {
          PatchU32(fd, e->local_header_offset + 14, crc, archive);
        }
        PatchU32(fd, c->second, crc, archive);
        fixed.push_back(e->name);
      }
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) Fail(ErrorCode::kIo, std::strerror(errno));
    return fixed;
  });
}

}  // namespace trove
