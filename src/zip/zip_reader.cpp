#include "trove/zip_reader.h"

#include <libdeflate.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/byte_reader.h"
#include "core/worker_pool.h"
#include "trove/error.h"
#include "zip/zip_decompress.h"
#include "zip/zip_records.h"

namespace trove {
namespace {

using namespace zip;

// A hostile archive can make every entry anomalous; past this many the report only counts them.
constexpr size_t kMaxAnomalies = 1000;
// Python's zipfile looks for the end record in the last 22 + 65536 bytes. miniz (torch's reader)
// scans 4 KiB blocks backwards and stops after the block that reaches 65535 + 22 bytes from the
// end, so it can find a record up to one block further: trove searches that far, and a record
// only miniz can reach is a disagreement.
constexpr uint64_t kZipfileEndWindow = kEndSize + (uint64_t{1} << 16);
constexpr uint64_t kTorchEndWindow = kZipfileEndWindow + 4096;

std::string Hex(uint64_t v) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), kHex[v & 15]);
    v >>= 4;
  } while (v != 0);
  return "0x" + s;
}

std::string Where(std::string_view name, uint64_t offset) {
  return "entry " + QuoteName(name) + " @ " + std::to_string(offset);
}

[[noreturn]] void EntryFail(ErrorCode code, std::string_view name, uint64_t offset, const std::string& what) {
  Fail(code, Where(name, offset) + ": " + what);
}

uint64_t CheckedAdd(uint64_t a, uint64_t b, std::string_view where, const char* what) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    Fail(ErrorCode::kCorrupt, std::string(where) + ": " + what + " overflows 64 bits");
  }
  return r;
}

struct ExtraBlock {
  uint16_t id;
  ByteReader data;  // the block's data, at its offset in the file
};

// Splits an extra field (a sub-reader over it, so blocks keep their file offsets) into its
// blocks; false when a block runs past the field's end.
bool SplitExtra(ByteReader r, std::vector<ExtraBlock>* blocks) {
  while (r.remaining() >= 4) {
    uint16_t id = r.U16();
    uint16_t len = r.U16();
    if (len > r.remaining()) return false;
    blocks->push_back({id, r.Sub(len)});
  }
  return r.at_end();
}

// The zip64 block's data, or nullptr when there is none. Two of them would let two readers
// disagree about sizes, so that is an error.
const ExtraBlock* FindZip64(const std::vector<ExtraBlock>& blocks, std::string_view where) {
  const ExtraBlock* found = nullptr;
  for (const ExtraBlock& b : blocks) {
    if (b.id != kExtraZip64) continue;
    if (found != nullptr) Fail(ErrorCode::kCorrupt, std::string(where) + ": two zip64 extra blocks");
    found = &b;
  }
  return found;
}

// Extra ids that legitimately differ between a local header and its central directory entry.
bool IsLayoutExtra(uint16_t id) {
  return id == kExtraZip64 || id == kExtraPyTorchPad || id == kExtraTensordictPad || id == 0xD935 /* Android */;
}

std::string ExtraIds(const std::vector<ExtraBlock>& blocks) {
  std::set<uint16_t> ids;
  for (const ExtraBlock& b : blocks) {
    if (!IsLayoutExtra(b.id)) ids.insert(b.id);
  }
  std::string s;
  for (uint16_t id : ids) s += (s.empty() ? "" : ",") + Hex(id);
  return s;
}

// A byte range owned by one entry (local header, payload, descriptor) or by the archive's
// central directory or end records, for the overlap and gap checks.
struct Extent {
  uint64_t begin;
  uint64_t end;
  int64_t entry;  // index into entries, or kCentral / kEnd
};
// How many local headers the parser checks between two releases of the mapped pages: at most
// this many folios (2 MiB each at most) are mapped by opening at any time.
constexpr size_t kLocalHeadersPerRelease = 16;
// The most page cache the kernel maps around one touched page (a PMD-sized folio): a release
// widens the touched range to this grid.
constexpr uint64_t kLargestFolioBytes = uint64_t{2} << 20;
constexpr int64_t kCentral = -1;
constexpr int64_t kEnd = -2;
// The bytes of names and extra fields read with a local header in one read (torch's are under a
// hundred, with a padding extra field of up to 64 bytes); longer ones take a second read.
constexpr uint64_t kLocalFieldsGuess = 480;
// How many local headers ahead of the one being checked the kernel is asked to read already: in a
// cold file each would otherwise be one disk round trip after the other (the 200 headers of a 1 GB
// checkpoint took 50-70 ms, a tenth of a cold read of all of it), while a window keeps in flight only a few
// pages per header whatever the entry count.
constexpr size_t kLocalHeadersAhead = 64;
// Headers this close to the first of a run are asked for with it in one call: the bytes between
// them (small entries' data) are few, and cold they would be read in the same disk request anyway.
constexpr uint64_t kPrefetchRunBytes = uint64_t{64} << 10;

class Parser {
 public:
  // `release`, when given, drops this process's mapping of [from, to) of the archive (see Parse).
  // `source`, when given, is the archive's bytes: local headers and data descriptors are then
  // copied out of its file (SharedBytes::CopyOut) instead of read in the mapping.
  Parser(const uint8_t* data, uint64_t size, ZipDisagreement mode,
         std::function<void(uint64_t, uint64_t)> release = nullptr, const SharedBytes* source = nullptr)
      : data_(data), size_(size), file_(data, size), mode_(mode), release_(std::move(release)), source_(source) {}

  void Run(std::vector<ZipEntry>* entries, std::vector<ZipProblem>* anomalies, std::vector<ZipProblem>* disagreements,
           std::vector<ZipEntry>* zipfile_extra, std::vector<ZipProblem>* refused);
  // kReport: what kRefuse would have thrown (the first disagreement or refused entry).
  std::optional<Error> first_refusal_;

 private:
  void Note(std::string entry, uint64_t offset, std::string message) {
    if (anomalies_.size() < kMaxAnomalies) {
      anomalies_.push_back({std::move(entry), offset, std::move(message)});
    } else {
      ++dropped_;
    }
  }
  // Two common readers would see different archives or bytes: an error under kRefuse (with the
  // code a plain error of that kind has), a listed problem under kReport (then read as torch does).
  void Disagree(ErrorCode code, std::string entry, uint64_t offset, std::string message) {
    if (mode_ == ZipDisagreement::kRefuse) Fail(code, message);
    if (!first_refusal_) first_refusal_.emplace(code, message);
    if (disagreements_.size() < kMaxAnomalies) {
      disagreements_.push_back({std::move(entry), offset, std::move(message)});
    } else {
      ++dropped_disagreements_;
    }
  }
  uint64_t FindEnd();
  void ReadEnd(uint64_t eocd);
  // The entry, or nullopt when it is refused on its own (a name, flag, method or disk trove does
  // not read) and the mode is kReport: then the refusal is listed and the other entries read on.
  std::optional<ZipEntry> ReadCentral(ByteReader& cd, uint64_t index);
  void RefuseEntry(ErrorCode code, const std::string& name, uint64_t offset, const std::string& what, bool* refused) {
    if (mode_ == ZipDisagreement::kRefuse) EntryFail(code, name, offset, what);
    if (!first_refusal_) first_refusal_.emplace(code, Where(name, offset) + ": " + what);
    if (refused_.size() < kMaxAnomalies) refused_.push_back({name, offset, Where(name, offset) + ": " + what});
    *refused = true;
  }
  void CheckLocal(ZipEntry& e, uint64_t* extent_end);
  uint64_t CheckDescriptor(const ZipEntry& e, uint64_t at);
  // A reader of the archive from `at` holding at least min(n, the rest of the archive) bytes: a
  // copy (into `copy`) read from the file when there is one, else the mapping. Each local header
  // touched in the mapping faulted in the folio around it (up to 2 MiB): the page-table work
  // cost a verify of 200 entries about 10 ms before any checksum began.
  ByteReader ReaderAt(uint64_t at, uint64_t n, std::vector<uint8_t>& copy) const;
  // Entries [i, returned index) have their local headers in increasing order within
  // kPrefetchRunBytes of entry i's (at most kLocalHeadersAhead of them); `last` is the last one's
  // offset. One read or one read-ahead request covers them all.
  size_t HeaderRun(size_t i, uint64_t* last) const;
  // Reads the local headers of the run starting at entry i, and what lies between them, into
  // window_ in one read, when the run has more than one entry (see ReaderAt).
  void ReadHeaderWindow(size_t i);
  std::string_view NameOf(int64_t index) const;
  void CheckExtents();

  const uint8_t* data_;
  uint64_t size_;
  ByteReader file_;
  ZipDisagreement mode_;
  std::function<void(uint64_t, uint64_t)> release_;
  const SharedBytes* source_;
  std::vector<ZipEntry> entries_;
  std::vector<Extent> extents_;
  std::vector<ZipProblem> anomalies_;
  std::vector<ZipProblem> disagreements_;
  std::vector<ZipEntry> zipfile_extra_;  // kReport: entries past the count that zipfile reads
  std::vector<ZipProblem> refused_;      // kReport: entries refused on their own
  uint64_t dropped_ = 0;
  uint64_t dropped_disagreements_ = 0;
  // Bytes [window_at_, +window_.size()) of the archive, copied out of its file in one read: a run
  // of local headers close together (an archive of small entries) and the data descriptors and
  // small payloads between them. ReaderAt serves reads inside it from here: two reads per entry
  // cost a hot `info` of 100,000 one-element tensors 200,000 system calls.
  std::vector<uint8_t> window_;
  uint64_t window_at_ = 0;
  // The central directory and where the end records begin.
  uint64_t count_ = 0;
  uint64_t cd_offset_ = 0;
  uint64_t cd_size_ = 0;
  uint64_t end_start_ = 0;
  // Tolerated on many entries at once; reported once with a count.
  uint64_t descriptor_count_ = 0;
  std::string first_descriptor_;
  uint64_t zero_local_count_ = 0;
  std::string first_zero_local_;
};

uint64_t Parser::FindEnd() {
  if (size_ < kEndSize) {
    Fail(ErrorCode::kCorrupt, "not a zip archive: " + std::to_string(size_) + " bytes cannot hold an end record");
  }
  auto comment_end = [&](uint64_t pos) {
    ByteReader r(data_ + pos + 20, 2, pos + 20);
    return pos + kEndSize + r.U16();
  };
  // torch's reader and Python's zipfile both take the last signature with a whole record after
  // it; trove reads that one too, and lists every other signature near the end that some reader
  // would take instead.
  uint64_t chosen = UINT64_MAX;
  uint64_t truncated = UINT64_MAX;  // the last signature without a whole record after it
  std::vector<uint64_t> reaching;   // earlier signatures whose comment ends exactly at the end of the file
  ForEachEndSignature(data_, size_, kTorchEndWindow, [&](uint64_t pos) {
    if (size_ - pos < kEndSize) {
      if (truncated == UINT64_MAX) truncated = pos;
    } else if (chosen == UINT64_MAX) {
      chosen = pos;
    } else if (comment_end(pos) == size_ && reaching.size() < 4) {
      reaching.push_back(pos);
    }
    return true;
  });
  if (chosen == UINT64_MAX) Fail(ErrorCode::kCorrupt, "not a zip archive: no end of central directory record");
  const std::string where = "end record @ " + std::to_string(chosen);
  // zipfile takes a comment-less record in the last 22 bytes before searching at all.
  const bool zipfile_shortcut = chosen == size_ - kEndSize && comment_end(chosen) == size_;
  if (truncated != UINT64_MAX && !zipfile_shortcut) {
    Disagree(ErrorCode::kCorrupt, "", truncated,
             "end record signature @ " + std::to_string(truncated) + " has only " + std::to_string(size_ - truncated) +
                 " bytes after it: Python's zipfile stops there (not a zip), torch's reader skips it and reads the "
                 "end record @ " + std::to_string(chosen));
  }
  if (size_ - chosen > kZipfileEndWindow) {
    Disagree(ErrorCode::kCorrupt, "", chosen,
             where + " is " + std::to_string(size_ - chosen) + " bytes from the end of the file: torch's reader finds it, "
                     "Python's zipfile (which looks " + std::to_string(kZipfileEndWindow) + " bytes back) finds none");
  }
  for (uint64_t other : reaching) {
    Disagree(ErrorCode::kCorrupt, "", other,
             "two end records: the one @ " + std::to_string(other) + " has a comment reaching the end of the file and "
                 "holding another end record @ " + std::to_string(chosen) +
                 "; torch's reader and Python's zipfile take the later one, readers that check the comment length "
                 "the earlier one");
  }
  const uint64_t end = comment_end(chosen);
  if (end < size_) Note("", end, std::to_string(size_ - end) + " bytes after the end record and its comment");
  if (end > size_) Note("", chosen, where + ": its comment length runs " + std::to_string(end - size_) + " bytes past the end of the file");
  return chosen;
}

void Parser::ReadEnd(uint64_t eocd) {
  const std::string where = "end record @ " + std::to_string(eocd);
  ByteReader r = file_;
  r.Seek(eocd + 4);
  const uint16_t disk = r.U16();
  const uint16_t cd_disk = r.U16();
  const uint16_t count_disk = r.U16();
  const uint16_t count = r.U16();
  const uint32_t cd_size = r.U32();
  const uint32_t cd_offset = r.U32();
  const uint16_t comment = r.U16();
  if (comment > 0) Note("", eocd, "archive comment of " + std::to_string(comment) + " bytes");

  uint64_t locator = 0;
  bool zip64 = false;
  if (eocd >= kZip64LocatorSize) {
    locator = eocd - kZip64LocatorSize;
    ByteReader l = file_;
    l.Seek(locator);
    zip64 = l.U32() == kZip64LocatorSig;
  }
  if (!zip64) {
    if (disk != 0 || cd_disk != 0) Fail(ErrorCode::kUnsupported, where + ": multi-disk archives are not supported");
    if (count_disk != count) {
      Fail(ErrorCode::kCorrupt, where + ": " + std::to_string(count_disk) + " entries on this disk but " +
                                    std::to_string(count) + " in total");
    }
    count_ = count;
    cd_size_ = cd_size;
    cd_offset_ = cd_offset;
    end_start_ = eocd;
    return;
  }

  const std::string lwhere = "zip64 end locator @ " + std::to_string(locator);
  ByteReader l = file_;
  l.Seek(locator + 4);
  const uint32_t z_disk_of_end = l.U32();
  const uint64_t z_end = l.U64();
  const uint32_t disks = l.U32();
  if (z_disk_of_end != 0 || disks > 1) {
    Fail(ErrorCode::kUnsupported, lwhere + ": multi-disk archives are not supported");
  }
  if (z_end > locator || locator - z_end < kZip64EndSize) {
    Fail(ErrorCode::kCorrupt, lwhere + ": zip64 end record offset " + std::to_string(z_end) +
                                  " does not leave room for the record before the locator");
  }
  const std::string zwhere = "zip64 end record @ " + std::to_string(z_end);
  ByteReader z = file_;
  z.Seek(z_end);
  if (z.U32() != kZip64EndSig) Fail(ErrorCode::kCorrupt, zwhere + ": bad signature");
  const uint64_t rest = z.U64();
  // Python's zipfile assumes the record has no extensible data and reads it 56 bytes before the
  // locator; torch's reader follows the locator. Anywhere else, they read different records.
  if (z_end != locator - kZip64EndSize) {
    const uint64_t extensible = rest >= kZip64EndSize - 12 ? rest - (kZip64EndSize - 12) : 0;
    Disagree(ErrorCode::kCorrupt, "", z_end,
             zwhere + (extensible > 0 ? " carries " + std::to_string(extensible) + " bytes of extensible data and" : "") +
                 " is not right before its locator @ " + std::to_string(locator) +
                 ": torch's reader reads it where the locator points, Python's zipfile reads a record @ " +
                 std::to_string(locator - kZip64EndSize));
  }
  if (rest < kZip64EndSize - 12 || rest > locator - z_end - 12) {
    Fail(ErrorCode::kCorrupt, zwhere + ": record size " + std::to_string(rest) + " does not fit before the locator");
  }
  z.Skip(4);  // versions made by / needed
  const uint32_t z_disk = z.U32();
  const uint32_t z_cd_disk = z.U32();
  const uint64_t z_count_disk = z.U64();
  const uint64_t z_count = z.U64();
  const uint64_t z_cd_size = z.U64();
  const uint64_t z_cd_offset = z.U64();
  if (z_disk != 0 || z_cd_disk != 0) Fail(ErrorCode::kUnsupported, zwhere + ": multi-disk archives are not supported");
  if (z_count_disk != z_count) {
    Fail(ErrorCode::kCorrupt, zwhere + ": " + std::to_string(z_count_disk) + " entries on this disk but " +
                                  std::to_string(z_count) + " in total");
  }
  // The classic record holds either the sentinel or the same value; anything else means two
  // readers could see two different central directories.
  auto agree = [&](const char* field, uint64_t classic, uint64_t sentinel, uint64_t wide) {
    if (classic != sentinel && classic != wide) {
      Fail(ErrorCode::kCorrupt, zwhere + ": " + field + " " + std::to_string(wide) + " disagrees with the end record's " +
                                    std::to_string(classic));
    }
  };
  agree("disk number", disk, kMax16, 0);
  agree("central directory disk", cd_disk, kMax16, 0);
  agree("entries on this disk", count_disk, kMax16, z_count_disk);
  agree("entry count", count, kMax16, z_count);
  agree("central directory size", cd_size, kMax32, z_cd_size);
  agree("central directory offset", cd_offset, kMax32, z_cd_offset);
  count_ = z_count;
  cd_size_ = z_cd_size;
  cd_offset_ = z_cd_offset;
  end_start_ = z_end;
}

std::optional<ZipEntry> Parser::ReadCentral(ByteReader& cd, uint64_t index) {
  const uint64_t at = cd.offset();
  const std::string where = "central directory entry #" + std::to_string(index) + " @ " + std::to_string(at);
  ZipEntry e;
  e.central_offset = at;
  uint64_t disk = 0;
  ByteReader extra;
  WithContext(where, [&] {
    if (cd.U32() != kCentralSig) Fail(ErrorCode::kCorrupt, "bad signature");
    cd.Skip(4);  // versions made by / needed
    e.flags = cd.U16();
    e.method = cd.U16();
    cd.Skip(4);  // DOS time and date
    e.crc32 = cd.U32();
    e.compressed_size = cd.U32();
    e.uncompressed_size = cd.U32();
    const uint16_t name_len = cd.U16();
    const uint16_t extra_len = cd.U16();
    const uint16_t comment_len = cd.U16();
    disk = cd.U16();
    cd.Skip(6);  // internal and external attributes
    e.local_header_offset = cd.U32();
    e.name = std::string(cd.Bytes(name_len));
    extra = cd.Sub(extra_len);
    cd.Skip(comment_len);
  });
  bool refused = false;
  if (const char* problem = EntryNameProblem(e.name)) {
    RefuseEntry(ErrorCode::kRefused, e.name, at, std::string("refused name: ") + problem, &refused);
  }
  if ((e.flags & (kFlagEncrypted | kFlagStrongEncryption | kFlagMaskedHeaders)) != 0) {
    RefuseEntry(ErrorCode::kRefused, e.name, at, "encrypted entry (flags " + Hex(e.flags) + ")", &refused);
  }
  if (e.method != 0 && e.method != 8 && e.method != 12 && e.method != 14) {
    RefuseEntry(ErrorCode::kUnsupported, e.name, at, "compression method " + std::to_string(e.method) + " is not supported",
                &refused);
  }
  if (refused) return std::nullopt;
  std::vector<ExtraBlock> blocks;
  const bool extra_ok = SplitExtra(extra, &blocks);
  const bool needs64 = e.uncompressed_size == kMax32 || e.compressed_size == kMax32 ||
                       e.local_header_offset == kMax32 || disk == kMax16;
  if (needs64) {
    const std::string ewhere = Where(e.name, at);
    if (!extra_ok) Fail(ErrorCode::kCorrupt, ewhere + ": malformed extra field holding the zip64 values");
    const ExtraBlock* z = FindZip64(blocks, ewhere);
    if (z == nullptr) Fail(ErrorCode::kCorrupt, ewhere + ": a size or offset is 0xFFFFFFFF but there is no zip64 extra");
    ByteReader zr = z->data;
    WithContext(ewhere + ": zip64 extra", [&] {
      if (e.uncompressed_size == kMax32) e.uncompressed_size = zr.U64();
      if (e.compressed_size == kMax32) e.compressed_size = zr.U64();
      if (e.local_header_offset == kMax32) e.local_header_offset = zr.U64();
      if (disk == kMax16) disk = zr.U32();
    });
    e.zip64 = true;
  } else if (!extra_ok) {
    Note(e.name, at, "malformed central directory extra field");
  }
  if (disk != 0) RefuseEntry(ErrorCode::kUnsupported, e.name, at, "entry on disk " + std::to_string(disk), &refused);
  if (e.method == 0 && e.compressed_size != e.uncompressed_size) {
    RefuseEntry(ErrorCode::kCorrupt, e.name, at,
                "stored entry with compressed size " + std::to_string(e.compressed_size) + " but uncompressed size " +
                    std::to_string(e.uncompressed_size),
                &refused);
  }
  if (refused) return std::nullopt;
  // Kept for the local-header comparison (layout blocks excluded).
  e.local_extra = ExtraIds(blocks);
  return e;
}

void Parser::CheckLocal(ZipEntry& e, uint64_t* extent_end) {
  const uint64_t at = e.local_header_offset;
  const std::string where = Where(e.name, at);
  const std::string central_ids = std::move(e.local_extra);
  e.local_extra.clear();
  if (CheckedAdd(at, kLocalSize, where, "local header end") > size_) {
    Fail(ErrorCode::kCorrupt, where + ": local header runs past the end of the file (" + std::to_string(size_) + " bytes)");
  }
  // The fixed header and, in the same read, names and extra fields up to a few hundred bytes.
  std::vector<uint8_t> copy;
  ByteReader r = ReaderAt(at, kLocalSize + kLocalFieldsGuess, copy);
  if (source_ != nullptr && copy.size() >= kLocalSize) {
    const uint64_t fields = uint64_t{copy[26]} | uint64_t{copy[27]} << 8 | uint64_t{copy[28]} << 16 | uint64_t{copy[29]} << 24;
    const uint64_t whole = kLocalSize + (fields & 0xFFFF) + (fields >> 16);
    if (whole > copy.size()) r = ReaderAt(at, whole, copy);
  }
  uint16_t lflags = 0, lmethod = 0;
  uint32_t lcrc = 0;
  uint64_t lcsize = 0, lusize = 0;
  std::string_view lname, lextra;
  ByteReader lextra_reader;
  WithContext(where, [&] {
    if (r.U32() != kLocalSig) Fail(ErrorCode::kCorrupt, "no local header signature at the entry's offset");
    r.Skip(2);  // version needed
    lflags = r.U16();
    lmethod = r.U16();
    r.Skip(4);  // DOS time and date
    lcrc = r.U32();
    lcsize = r.U32();
    lusize = r.U32();
    const uint16_t name_len = r.U16();
    const uint16_t extra_len = r.U16();
    lname = r.Bytes(name_len);
    lextra_reader = r.Sub(extra_len);
    lextra = lextra_reader.Rest();
  });
  // torch's reader takes the name, method and sizes from the central directory and only the
  // lengths from the local header; Python's zipfile refuses a different name, and a streaming
  // reader (unzip -, pip's wheel readers) sees the local header's entry.
  if (lname != e.name) {
    Disagree(ErrorCode::kCorrupt, e.name, at,
             where + ": local header name " + QuoteName(lname) + " differs from central directory name " + QuoteName(e.name));
  }
  if (lmethod != e.method) {
    Disagree(ErrorCode::kCorrupt, e.name, at,
             where + ": local header method " + std::to_string(lmethod) + " differs from central directory method " +
                 std::to_string(e.method));
  }
  if ((lflags & (kFlagEncrypted | kFlagStrongEncryption | kFlagMaskedHeaders)) != 0) {
    Fail(ErrorCode::kRefused, where + ": local header marks the entry encrypted (flags " + Hex(lflags) + ")");
  }
  if (((lflags ^ e.flags) & kFlagDescriptor) != 0) {
    Fail(ErrorCode::kCorrupt, where + ": local header flags " + Hex(lflags) + " and central directory flags " +
                                  Hex(e.flags) + " disagree on the data descriptor bit");
  }
  if (lflags != e.flags) {
    Note(e.name, at, "local header flags " + Hex(lflags) + " differ from central directory flags " + Hex(e.flags));
  }

  std::vector<ExtraBlock> blocks;
  const bool extra_ok = SplitExtra(lextra_reader, &blocks);
  const ExtraBlock* z64 = extra_ok ? FindZip64(blocks, where) : nullptr;
  if (z64 != nullptr) e.zip64 = true;
  if (lcsize == kMax32 || lusize == kMax32) {
    if (!extra_ok) Fail(ErrorCode::kCorrupt, where + ": malformed local extra field holding the zip64 sizes");
    if (z64 == nullptr) Fail(ErrorCode::kCorrupt, where + ": local header size is 0xFFFFFFFF but there is no zip64 extra");
    ByteReader zr = z64->data;
    WithContext(where + ": local zip64 extra", [&] {
      if (lusize == kMax32) lusize = zr.U64();
      if (lcsize == kMax32) lcsize = zr.U64();
    });
  } else if (!extra_ok) {
    Note(e.name, at, "malformed local extra field");
  }
  if (extra_ok && ExtraIds(blocks) != central_ids) {
    Note(e.name, at, "extra blocks differ: local header has [" + ExtraIds(blocks) + "], central directory [" +
                         central_ids + "]");
  }

  const bool local_zero = lcrc == 0 && lcsize == 0 && lusize == 0;
  if ((lflags & kFlagDescriptor) != 0) {
    if (descriptor_count_++ == 0) first_descriptor_ = e.name;
  } else if (local_zero && (e.crc32 != 0 || e.compressed_size != 0 || e.uncompressed_size != 0)) {
    if (zero_local_count_++ == 0) first_zero_local_ = e.name;
  }
  // All-zero local values are tolerated (with a descriptor they are meant to be zero); any other
  // values must agree, or a streaming reader would see a different entry than we do.
  if (!local_zero && (lcrc != e.crc32 || lcsize != e.compressed_size || lusize != e.uncompressed_size)) {
    Disagree(ErrorCode::kCorrupt, e.name, at,
             where + ": local header says crc " + Hex(lcrc) + ", sizes " + std::to_string(lcsize) + "/" +
                 std::to_string(lusize) + "; central directory says crc " + Hex(e.crc32) + ", sizes " +
                 std::to_string(e.compressed_size) + "/" + std::to_string(e.uncompressed_size));
  }

  e.local_extra = std::string(lextra);
  e.data_offset = at + kLocalSize + lname.size() + lextra.size();  // <= size_: read above
  const uint64_t payload_end = CheckedAdd(e.data_offset, e.compressed_size, where, "payload end");
  if (payload_end > size_) {
    Fail(ErrorCode::kCorrupt, where + ": payload [" + std::to_string(e.data_offset) + ", " +
                                  std::to_string(payload_end) + ") runs past the end of the file (" +
                                  std::to_string(size_) + " bytes)");
  }
  *extent_end = payload_end;
  if ((lflags & kFlagDescriptor) != 0) *extent_end = CheckDescriptor(e, payload_end);
}

// Finds the data descriptor right after the payload and checks it against the central
// directory; returns where it ends. The signature is optional and the size fields are 4 or 8
// bytes wide (8 when the local header has a zip64 extra), so the expected form is tried first.
uint64_t Parser::CheckDescriptor(const ZipEntry& e, uint64_t at) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    const bool with_sig = (attempt & 1) == 0;
    const bool wide = (attempt < 2) == e.zip64;
    const uint64_t len = (with_sig ? 4 : 0) + 4 + (wide ? 16 : 8);
    if (len > size_ - at) continue;
    std::vector<uint8_t> copy;
    ByteReader r = ReaderAt(at, len, copy);
    if (with_sig && r.U32() != kDescriptorSig) continue;
    const uint32_t crc = r.U32();
    const uint64_t csize = wide ? r.U64() : r.U32();
    const uint64_t usize = wide ? r.U64() : r.U32();
    if (crc == e.crc32 && csize == e.compressed_size && usize == e.uncompressed_size) return at + len;
  }
  Fail(ErrorCode::kCorrupt, Where(e.name, e.local_header_offset) + ": data descriptor @ " + std::to_string(at) +
                                " does not match the central directory (crc " + Hex(e.crc32) + ", sizes " +
                                std::to_string(e.compressed_size) + "/" + std::to_string(e.uncompressed_size) + ")");
}

ByteReader Parser::ReaderAt(uint64_t at, uint64_t n, std::vector<uint8_t>& copy) const {
  if (source_ == nullptr || at > size_) {
    ByteReader r = file_;
    r.Seek(at);
    return r;
  }
  const uint64_t want = std::min(n, size_ - at);
  if (at >= window_at_ && want <= window_.size() && at - window_at_ <= window_.size() - want) {
    const uint8_t* from = window_.data() + (at - window_at_);
    copy.assign(from, from + want);
  } else {
    copy.resize(static_cast<size_t>(want));
    source_->CopyOut(at, copy.data(), copy.size());
  }
  return ByteReader(copy.data(), copy.size(), at);
}

size_t Parser::HeaderRun(size_t i, uint64_t* last) const {
  const uint64_t first = entries_[i].local_header_offset;
  *last = first;
  size_t j = i + 1;
  for (; j < entries_.size() && j < i + kLocalHeadersAhead; ++j) {
    const uint64_t at = entries_[j].local_header_offset;
    if (at < *last || at - first > kPrefetchRunBytes) break;
    *last = at;
  }
  return j;
}

void Parser::ReadHeaderWindow(size_t i) {
  if (source_ == nullptr) return;
  const uint64_t first = entries_[i].local_header_offset;
  if (first >= window_at_ && first - window_at_ < window_.size()) return;  // read with an earlier run
  uint64_t last = 0;
  if (HeaderRun(i, &last) == i + 1 || first >= size_) {
    window_.clear();
    return;
  }
  // The last header's fields as CheckLocal first reads them; ends past the file are clipped.
  const uint64_t length = std::min(size_ - first, last - first + kLocalSize + kLocalFieldsGuess);
  window_.resize(static_cast<size_t>(length));
  source_->CopyOut(first, window_.data(), window_.size());
  window_at_ = first;
}

std::string_view Parser::NameOf(int64_t index) const {
  if (index == kCentral) return "the central directory";
  if (index == kEnd) return "the end records";
  return entries_[static_cast<size_t>(index)].name;
}

void Parser::CheckExtents() {
  std::sort(extents_.begin(), extents_.end(), [](const Extent& a, const Extent& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t prev_end = 0;
  int64_t prev = kEnd;
  bool first = true;
  for (const Extent& x : extents_) {
    auto label = [&](int64_t index) {
      return index < 0 ? std::string(NameOf(index)) : "entry " + QuoteName(NameOf(index));
    };
    if (!first && x.begin < prev_end) {
      const ZipEntry* entry = x.entry >= 0 ? &entries_[static_cast<size_t>(x.entry)] : nullptr;
      const ZipEntry* other = prev >= 0 ? &entries_[static_cast<size_t>(prev)] : nullptr;
      const ZipEntry* named = entry != nullptr ? entry : other;
      std::string msg = label(x.entry) + " [" + std::to_string(x.begin) + ", " + std::to_string(x.end) +
                        ") overlaps " + label(prev) + " (which ends at " + std::to_string(prev_end) + ")";
      // miniz never checks; Python's zipfile (3.12 on) and unzip refuse overlapping entries.
      if (named != nullptr) {
        Disagree(ErrorCode::kCorrupt, named->name, named->local_header_offset, Where(named->name, named->local_header_offset) + ": " + msg);
      } else {
        Disagree(ErrorCode::kCorrupt, "", x.begin, msg);
      }
    }
    if (x.begin > prev_end) {
      std::string msg = std::to_string(x.begin - prev_end) + " bytes " +
                        (first ? std::string("before ") : "between " + label(prev) + " and ") + label(x.entry);
      Note(x.entry >= 0 ? std::string(NameOf(x.entry)) : std::string(), prev_end, std::move(msg));
    }
    first = false;
    if (x.end >= prev_end) {
      prev_end = x.end;
      prev = x.entry;
    }
  }
}

void Parser::Run(std::vector<ZipEntry>* entries, std::vector<ZipProblem>* anomalies,
                 std::vector<ZipProblem>* disagreements, std::vector<ZipEntry>* zipfile_extra,
                 std::vector<ZipProblem>* refused) {
  ReadEnd(FindEnd());
  const std::string cwhere = "central directory @ " + std::to_string(cd_offset_);
  if (count_ > kMaxZipEntries) {
    Fail(ErrorCode::kLimit, cwhere + ": " + std::to_string(count_) + " entries exceed kMaxZipEntries (" +
                                std::to_string(kMaxZipEntries) + ")");
  }
  const uint64_t cd_end = CheckedAdd(cd_offset_, cd_size_, cwhere, "end");
  if (cd_end > end_start_) {
    Fail(ErrorCode::kCorrupt, cwhere + ": [" + std::to_string(cd_offset_) + ", " + std::to_string(cd_end) +
                                  ") runs past the end records at " + std::to_string(end_start_) + " (file is " +
                                  std::to_string(size_) + " bytes)");
  }
  if (count_ * kCentralSize > cd_size_) {  // count_ is capped, so no overflow
    Fail(ErrorCode::kCorrupt, cwhere + ": " + std::to_string(count_) + " entries cannot fit in " +
                                  std::to_string(cd_size_) + " bytes");
  }
  if (cd_end < end_start_) {
    // Python's zipfile takes such bytes for data glued before the archive and reads every entry
    // that much further on; torch's reader takes the offsets as they are.
    Disagree(ErrorCode::kCorrupt, "", cd_end,
             std::to_string(end_start_ - cd_end) + " bytes between the central directory and the end records: Python's "
                 "zipfile reads every entry " + std::to_string(end_start_ - cd_end) +
                 " bytes further on than torch's reader does");
  }

  entries_.reserve(static_cast<size_t>(count_));
  extents_.reserve(static_cast<size_t>(count_) + 2);
  ByteReader cd(data_ + cd_offset_, cd_size_, cd_offset_);
  for (uint64_t i = 0; i < count_; ++i) {
    if (std::optional<ZipEntry> e = ReadCentral(cd, i)) entries_.push_back(std::move(*e));
  }
  if (!cd.at_end()) {
    // zipfile reads entries until the directory's size is used up, whatever the count says.
    Disagree(ErrorCode::kCorrupt, "", cd.offset(),
             cwhere + ": " + std::to_string(cd.remaining()) + " bytes after the last of its " + std::to_string(count_) +
                 " entries: Python's zipfile reads them as more entries, torch's reader stops at the count");
    // What zipfile would see there, for a scanner to look at; it stops at the first entry that
    // does not parse (zipfile would refuse the archive there).
    for (uint64_t i = count_; cd.remaining() >= kCentralSize && entries_.size() + zipfile_extra_.size() < kMaxZipEntries; ++i) {
      try {
        std::optional<ZipEntry> e = ReadCentral(cd, i);
        if (!e) continue;
        uint64_t end = 0;
        CheckLocal(*e, &end);
        zipfile_extra_.push_back(std::move(*e));
      } catch (const Error&) {
        break;
      }
    }
  }
  uint64_t touched_from = size_, touched_to = 0;  // what the checks since the last release touched
  // Headers close together (an archive of small entries) are asked for in one call covering
  // the run of them: one system call per entry cost a hot `info` of 100,000 entries 100,000 calls.
  size_t prefetched_to = 0;  // entries below this index were asked for already
  const auto prefetch = [&](size_t i) {
    if (source_ == nullptr || i >= entries_.size() || i < prefetched_to) return;
    uint64_t last = 0;
    prefetched_to = HeaderRun(i, &last);
    const uint64_t first = entries_[i].local_header_offset;
    source_->Prefetch(first, last - first + kLocalSize + kLocalFieldsGuess);
  };
  for (size_t i = 0; i < kLocalHeadersAhead; ++i) prefetch(i);
  for (size_t i = 0; i < entries_.size(); ++i) {
    prefetch(i + kLocalHeadersAhead);
    ReadHeaderWindow(i);
    uint64_t end = 0;
    CheckLocal(entries_[i], &end);
    touched_from = std::min(touched_from, entries_[i].local_header_offset);
    touched_to = std::max(touched_to, end);
    // Each local header checked maps the folio around it (up to 2 MiB): drop them as we go, so
    // that opening an archive of many large entries stays small at its peak too.
    if (release_ && ((i + 1) % kLocalHeadersPerRelease == 0 || i + 1 == entries_.size())) {
      const uint64_t from = touched_from / kLargestFolioBytes * kLargestFolioBytes;
      const uint64_t to = std::min(size_, (touched_to / kLargestFolioBytes + 1) * kLargestFolioBytes);
      if (from < to) release_(from, to);
      touched_from = size_;
      touched_to = 0;
    }
    extents_.push_back({entries_[i].local_header_offset, end, static_cast<int64_t>(i)});
  }
  extents_.push_back({cd_offset_, cd_end, kCentral});
  extents_.push_back({end_start_, size_, kEnd});
  CheckExtents();

  if (descriptor_count_ > 0) {
    Note(first_descriptor_, 0, std::to_string(descriptor_count_) + " entries use a data descriptor (CRC and sizes after the payload)");
  }
  if (zero_local_count_ > 0) {
    Note(first_zero_local_, 0, std::to_string(zero_local_count_) + " local headers have zero CRC and sizes without a data descriptor");
  }
  if (dropped_ > 0) Note("", 0, std::to_string(dropped_) + " more anomalies not listed");
  if (dropped_disagreements_ > 0) {
    disagreements_.push_back({"", 0, std::to_string(dropped_disagreements_) + " more disagreements not listed"});
  }
  *entries = std::move(entries_);
  *anomalies = std::move(anomalies_);
  *disagreements = std::move(disagreements_);
  *zipfile_extra = std::move(zipfile_extra_);
  *refused = std::move(refused_);
}

}  // namespace

ZipReader::ZipReader(std::shared_ptr<MappedFile> file, ZipDisagreement mode) : file_(std::move(file)) {
  if (file_ == nullptr) Fail(ErrorCode::kUsage, "ZipReader: null file");
  bytes_ = file_->bytes();
  Parse(mode);
}

ZipReader::ZipReader(SharedBytes archive, ZipDisagreement mode) : bytes_(std::move(archive)) { Parse(mode); }

namespace {

char FoldAscii(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// -1, 0, 1 as a < b, a == b, a > b, comparing ASCII-lowercased bytes as unsigned.
int CompareFolded(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(FoldAscii(a[i]));
    const auto y = static_cast<unsigned char>(FoldAscii(b[i]));
    if (x != y) return x < y ? -1 : 1;
  }
  return a.size() == b.size() ? 0 : (a.size() < b.size() ? -1 : 1);
}

}  // namespace

std::string ZipMethodName(uint16_t method) {
  switch (method) {
    case static_cast<uint16_t>(ZipMethod::kStored): return "stored";
    case static_cast<uint16_t>(ZipMethod::kDeflate): return "deflate";
    case static_cast<uint16_t>(ZipMethod::kBzip2): return "bzip2";
    case static_cast<uint16_t>(ZipMethod::kLzma): return "lzma";
    default: return "method " + std::to_string(method);
  }
}

ZipMethod ZipMethodFromName(std::string_view name) {
  if (name.empty() || name == "stored") return ZipMethod::kStored;
  if (name == "deflate" || name == "deflated") return ZipMethod::kDeflate;
  if (name == "bzip2") return ZipMethod::kBzip2;
  if (name == "lzma") return ZipMethod::kLzma;
  Fail(ErrorCode::kUsage, "unknown compression '" + std::string(name) + "' (stored, deflate, bzip2 or lzma)");
}

// How many bytes precede a zip archive that ends the file: Python's zipfile (and so most
// scanners) finds the end record, sees where the central directory really is, and reads entry
// offsets relative to that, so a zip glued behind other bytes is still a zip to them. 0 when
// the end record says the archive starts at byte 0, or when there is no end record.
uint64_t ZipfilePrefixBytes(const uint8_t* data, uint64_t size) {
  // The last whole end record whose signature starts in the last kEndSize + 0xFFFF bytes (the
  // reader's FindEnd searches the same way, further back: kTorchEndWindow).
  const uint64_t at = LastWholeEndRecord(data, size, kEndSize + kMax16);
  if (at == UINT64_MAX) return 0;
  const uint64_t cd_size = LoadLe32(data + at + 12), cd_offset = LoadLe32(data + at + 16);
  if (cd_size == kMax32 || cd_offset == kMax32) return 0;  // zip64: offsets are taken as they are
  if (cd_size > at || cd_offset > at - cd_size) return 0;
  return at - cd_size - cd_offset;
}

void ZipReader::RefuseDisagreements() const {
  if (first_refusal_) throw *first_refusal_;
}

void ZipReader::Parse(ZipDisagreement mode) {
  // Checking every local header touches a page near each entry, and the kernel maps whole folios
  // (up to 2 MiB) around a touched page: in a mapped archive of many large entries that adds up
  // to hundreds of MB of resident (page-cache) memory from opening alone. The parser drops what
  // it touched as it goes, and all of it at the end; payloads fault back in when read.
  std::function<void(uint64_t, uint64_t)> release;
  if (bytes_.mapped()) release = [this](uint64_t from, uint64_t to) { bytes_.Release(from, to - from); };
  Parser parser(bytes_.data(), bytes_.size(), mode, release, bytes_.mapped() ? &bytes_ : nullptr);
  {
    // The local headers are a few bytes every entry apart: read from a cold file, each fault
    // would otherwise read the disk's whole read-ahead around its header (8 MiB on some disks),
    // one fault at a time, i.e. most of the archive before anything asked for a payload.
    const RandomAccessWhile random(bytes_);
    parser.Run(&entries_, &anomalies_, &disagreements_, &zipfile_extra_, &refused_);
  }
  first_refusal_ = std::move(parser.first_refusal_);
  // The end records and the central directory were read too.
  if (release) release(0, bytes_.size());
  sorted_.resize(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) sorted_[i] = static_cast<uint32_t>(i);
  std::sort(sorted_.begin(), sorted_.end(), [&](uint32_t a, uint32_t b) {
    return entries_[a].name != entries_[b].name ? entries_[a].name < entries_[b].name : a < b;
  });
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const ZipEntry& a = entries_[sorted_[i - 1]];
    const ZipEntry& b = entries_[sorted_[i]];
    if (a.name == b.name) {
      // Python's zipfile keeps the last of them, torch's reader whichever its binary search meets.
      const std::string msg = Where(b.name, b.local_header_offset) + ": duplicate entry name (also at " +
                              std::to_string(a.local_header_offset) + ")";
      if (mode == ZipDisagreement::kRefuse) Fail(ErrorCode::kRefused, msg);
      if (!first_refusal_) first_refusal_.emplace(ErrorCode::kRefused, msg);
      if (disagreements_.size() < kMaxAnomalies) disagreements_.push_back({b.name, b.local_header_offset, msg});
    }
  }
  folded_ = sorted_;
  std::stable_sort(folded_.begin(), folded_.end(), [&](uint32_t a, uint32_t b) {
    return CompareFolded(entries_[a].name, entries_[b].name) < 0;
  });
  for (size_t i = 1; i < folded_.size(); ++i) {
    const ZipEntry& a = entries_[folded_[i - 1]];
    const ZipEntry& b = entries_[folded_[i]];
    if (a.name == b.name || CompareFolded(a.name, b.name) != 0) continue;
    if (case_collisions_.size() >= kMaxAnomalies) break;
    case_collisions_.push_back({b.name, b.local_header_offset,
                                Where(b.name, b.local_header_offset) + ": name differs only in case from " +
                                    QuoteName(a.name) + " @ " + std::to_string(a.local_header_offset) +
                                    ": torch's reader ignores case when it looks a name up and may open either; "
                                    "Python's zipfile sees both"});
  }
}

const ZipEntry* ZipReader::FindIgnoringCase(std::string_view name) const {
  auto it = std::lower_bound(folded_.begin(), folded_.end(), name,
                             [&](uint32_t i, std::string_view n) { return CompareFolded(entries_[i].name, n) < 0; });
  const ZipEntry* first = nullptr;
  for (; it != folded_.end() && CompareFolded(entries_[*it].name, name) == 0; ++it) {
    const ZipEntry* e = &entries_[*it];
    if (e->name == name) return e;
    if (first == nullptr || e < first) first = e;  // entries_ is in central-directory order
  }
  return first;
}

const ZipEntry* ZipReader::Find(std::string_view name) const {
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), name,
                             [&](uint32_t i, std::string_view n) { return entries_[i].name < n; });
  if (it == sorted_.end() || entries_[*it].name != name) return nullptr;
  return &entries_[*it];
}

namespace {

// The payload with the entry's CRC-32 attached. PyTorch can write records without checksums
// (CRC 0 throughout): a zero is taken as "none recorded" (a real payload's CRC is 0 once in 2^32,
// and then the writer merely computes it).
SharedBytes Recorded(const SharedBytes& payload, const ZipEntry& entry) {
  return entry.crc32 == 0 ? payload : payload.WithRecordedCrc32(entry.crc32);
}

}  // namespace

SharedBytes ZipReader::Read(const ZipEntry& entry) const {
  const std::string where = Where(entry.name, entry.local_header_offset);
  SharedBytes raw = WithContext(where, [&] { return bytes_.Slice(entry.data_offset, entry.compressed_size); });
  if (entry.method == static_cast<uint16_t>(ZipMethod::kStored)) {
    if (entry.compressed_size != entry.uncompressed_size) {
      Fail(ErrorCode::kCorrupt, where + ": stored entry sizes differ");
    }
    return Recorded(raw, entry);
  }
  return Recorded(zip::Decompress(entry.method, raw.data(), raw.size(), entry.uncompressed_size, where), entry);
}

SharedBytes ZipReader::ReadDeferred(const ZipEntry& entry) const {
  if (entry.method == static_cast<uint16_t>(ZipMethod::kStored)) return Read(entry);
  const std::string where = Where(entry.name, entry.local_header_offset);
  SharedBytes raw = WithContext(where, [&] { return bytes_.Slice(entry.data_offset, entry.compressed_size); });
  return Recorded(zip::DeferredDecompress(std::move(raw), entry.method, entry.uncompressed_size, where,
                                          file_ ? file_->path() : std::string()),
                  entry);
}

bool ZipReader::CheckCrc(const ZipEntry& entry) const {
  // In windows whose pages are released after use: checking a stored entry of any size keeps
  // one window resident.
  // A compressed entry is inflated window by window, never held.
  uint32_t crc = 0;
  if (entry.method == static_cast<uint16_t>(ZipMethod::kStored)) {
    Read(entry).Stream([&](const uint8_t* p, size_t n) { crc = Crc32(p, n, crc); });
  } else {
    const std::string where = Where(entry.name, entry.local_header_offset);
    SharedBytes raw = WithContext(where, [&] { return bytes_.Slice(entry.data_offset, entry.compressed_size); });
    zip::DecompressStream(entry.method, raw.data(), raw.size(), entry.uncompressed_size, where,
                          [&](const uint8_t* p, size_t n) { crc = Crc32(p, n, crc); });
  }
  return crc == entry.crc32;
}

// A stored entry's CRC-32 is computed in pieces of this size, one per worker at a time: large
// enough that combining (crc32_combine, a few microseconds) costs nothing, small enough that an
// entry of a few hundred MB splits across every thread.
constexpr uint64_t kCrcPieceBytes = uint64_t{16} << 20;

std::vector<ZipReader::CrcCheck> ZipReader::CheckCrcs(const std::vector<ZipEntry>& entries,
                                                      const std::function<void(uint64_t bytes)>& checked) const {
  struct Piece {
    size_t entry;
    uint64_t begin, length;
    uint32_t crc = 0;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < entries.size(); ++i) {
    const ZipEntry& e = entries[i];
    if (e.method != static_cast<uint16_t>(ZipMethod::kStored) || e.uncompressed_size <= kCrcPieceBytes) {
      pieces.push_back({i, 0, 0});  // checked whole by CheckCrc
      continue;
    }
    for (uint64_t at = 0; at < e.uncompressed_size; at += kCrcPieceBytes) {
      pieces.push_back({i, at, std::min(kCrcPieceBytes, e.uncompressed_size - at)});
    }
  }
  std::vector<CrcCheck> out(entries.size());
  std::vector<std::exception_ptr> errors(pieces.size());
  RunPieces(pieces.size(), [&](uint64_t k) {
    Piece& piece = pieces[k];
    const ZipEntry& e = entries[piece.entry];
    try {
      if (piece.length == 0) {
        out[piece.entry].matches = CheckCrc(e);
      } else {
        uint32_t crc = 0;
        Read(e).Slice(piece.begin, piece.length).Stream([&](const uint8_t* p, size_t n) { crc = Crc32(p, n, crc); });
        piece.crc = crc;
      }
    } catch (const Error&) {
      errors[k] = std::current_exception();
    }
    if (checked) checked(piece.length == 0 ? e.compressed_size : piece.length);
  });
  // Each split entry's CRC from its pieces, in order; the first error of an entry is its error.
  for (size_t k = 0; k < pieces.size();) {
    const size_t entry = pieces[k].entry;
    uint32_t crc = 0;
    bool split = false;
    for (; k < pieces.size() && pieces[k].entry == entry; ++k) {
      if (errors[k] && !out[entry].error) out[entry].error = errors[k];
      if (pieces[k].length == 0) continue;
      split = true;
      crc = k > 0 && pieces[k - 1].entry == entry && pieces[k].begin > 0
                ? static_cast<uint32_t>(crc32_combine(crc, pieces[k].crc, static_cast<z_off_t>(pieces[k].length)))
                : pieces[k].crc;
    }
    if (split) out[entry].matches = crc == entries[entry].crc32;
  }
  return out;
}

uint32_t Crc32(const uint8_t* data, uint64_t size, uint32_t crc) {
  return static_cast<uint32_t>(libdeflate_crc32(crc, data, static_cast<size_t>(size)));
}

}  // namespace trove
