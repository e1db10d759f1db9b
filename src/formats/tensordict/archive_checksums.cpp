// CRC-32 maintenance of a .tdz archive: checking them, and re-stamping them after mode="r+"
// edits (tensordict's refresh_archive_checksums) in a copy that replaces the archive only once
// the zip reader accepts it.
#include <string>
#include <vector>

#include "core/byte_reader.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/tensordict.h"
#include "trove/zip_reader.h"
#include "zip/zip_records.h"

namespace trove {
namespace {

using zip::kDescriptorSig;
constexpr uint16_t kFlagDataDescriptor = zip::kFlagDescriptor;
constexpr uint64_t kLocalCrcField = zip::kLocalCrcAt;
constexpr uint64_t kCentralCrcField = zip::kCentralCrcAt;

// Where the CRC field of `e`'s data descriptor is: the descriptor right after the payload, with or
// without its signature and with 4- or 8-byte sizes, in the one form that matches the central
// directory (the zip reader accepted the archive, so one does).
uint64_t DescriptorCrcOffset(const SharedBytes& bytes, const ZipEntry& e) {
  const uint64_t at = e.data_offset + e.compressed_size;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const bool with_sig = (attempt & 1) == 0;
    const bool wide = (attempt < 2) == e.zip64;
    const uint64_t len = (with_sig ? 4 : 0) + 4 + (wide ? 16 : 8);
    if (at > bytes.size() || len > bytes.size() - at) continue;
    ByteReader r(bytes.data(), bytes.size());
    r.Seek(at);
    if (with_sig && r.U32() != kDescriptorSig) continue;
    const uint64_t crc_at = r.position();
    const uint32_t crc = r.U32();
    const uint64_t csize = wide ? r.U64() : r.U32();
    const uint64_t usize = wide ? r.U64() : r.U32();
    if (crc == e.crc32 && csize == e.compressed_size && usize == e.uncompressed_size) return crc_at;
  }
  Fail(ErrorCode::kCorrupt, "entry '" + e.name + "': its data descriptor was not found");
}

}  // namespace

std::vector<std::string> CheckTdzChecksums(const std::string& archive) {
  auto file = MappedFile::Open(archive);  // its errors name the path already
  return WithFile(archive, [&] {
    ZipReader zip(file);
    std::vector<std::string> bad;
    const std::vector<ZipReader::CrcCheck> checks = zip.CheckCrcs(zip.entries());
    for (size_t i = 0; i < checks.size(); ++i) {
      if (checks[i].error) std::rethrow_exception(checks[i].error);
      if (!checks[i].matches) bad.push_back(zip.entries()[i].name);
    }
    return bad;
  });
}

std::vector<std::string> RefreshTdzChecksums(const std::string& archive) {
  auto file = MappedFile::Open(archive);
  return WithFile(archive, [&] {
    ZipReader zip(file);
    std::vector<std::pair<const ZipEntry*, uint32_t>> stale;
    for (const ZipEntry& e : zip.entries()) {
      ThrowIfInterrupted();
      SharedBytes payload = zip.Read(e);
      uint32_t crc = Crc32(payload.data(), payload.size());
      if (crc != e.crc32) stale.emplace_back(&e, crc);
    }
    std::vector<std::string> fixed;
    if (stale.empty()) return fixed;
    // Every place the archive records an entry's CRC, located through what the reader parsed
    // (so zip64 and every layout it accepts): the local header unless it holds the all-zero
    // values a data descriptor allows, the data descriptor, and the central directory.
    const SharedBytes bytes = file->bytes();
    std::vector<std::pair<uint64_t, uint32_t>> patches;
    for (const auto& [e, crc] : stale) {
      ByteReader local(bytes.data(), bytes.size());
      local.Seek(e->local_header_offset + kLocalCrcField);
      const uint32_t lcrc = local.U32(), lcsize = local.U32(), lusize = local.U32();
      if (lcrc != 0 || lcsize != 0 || lusize != 0) patches.emplace_back(e->local_header_offset + kLocalCrcField, crc);
      if (e->flags & kFlagDataDescriptor) patches.emplace_back(DescriptorCrcOffset(bytes, *e), crc);
      patches.emplace_back(e->central_offset + kCentralCrcField, crc);
      fixed.push_back(e->name);
    }
    // A copy with the new values replaces the archive, and only once the reader accepts it with
    // every CRC right: an archive that cannot be made sound is left as it was.
    AtomicFile out(archive);
    out.Write(bytes.data(), bytes.size());
    for (const auto& [offset, crc] : patches) {
      uint8_t le[4];
      StoreLe(le, crc, 4);
      out.WriteAt(offset, le, sizeof le);
    }
    {
      ZipReader check(MappedFile::Open(out.PathForReading()));
      if (check.entries().size() != zip.entries().size())
        Fail(ErrorCode::kCorrupt, "the rewritten archive lists a different number of entries; left as it was");
      for (const ZipEntry& e : check.entries()) {
        ThrowIfInterrupted();
        if (!check.CheckCrc(e))
          Fail(ErrorCode::kCorrupt, "entry '" + e.name + "': CRC-32 still wrong after the rewrite; archive left as it was");
      }
    }
    out.Commit();
    return fixed;
  });
}

}  // namespace trove
