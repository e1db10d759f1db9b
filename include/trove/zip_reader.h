// trove/zip_reader.h: a strict reader for zip archives held in a mapped file (or in memory).
//
// The central directory (with zip64 records) is authoritative. The constructor checks every
// entry's local header against it (name, method, flags, sizes and CRC when present, the data
// descriptor when used), and refuses encrypted entries, unknown methods, entries past the end of
// the file or overlapping each other or the central directory, duplicate names, and names with a
// ".." component, a leading '/', a backslash or a NUL. Errors name the entry and an offset:
//   "entry 'archive/data/0' @ 1234: local header name 'x' differs from central directory name ..."
// Where common readers (torch's miniz, Python's zipfile, unzip) would see different archives or
// different bytes, the archive is refused (ZipDisagreement::kRefuse, the default) or, for
// scanners and --permissive readers, read the way torch reads it with each disagreement listed
// (kReport): which end record (the last signature with a whole record after it), where the zip64
// end record is (where the locator points; zipfile assumes right before the locator), bytes
// between the central directory and the end records (zipfile shifts every offset by them),
// central directory bytes past the entry count, local headers that differ from the central
// directory, overlapping entries and duplicate names.
// The constructor reads metadata only (never payload bytes), in time linear in the entries.
// Stored entries are zero-copy views of the mapping; deflate, bzip2 and lzma entries are
// decompressed into owned memory (Read) or deferred until their bytes are wanted (ReadDeferred),
// never beyond their declared size (a bomb stops there).
// A ZipReader is immutable after construction; reading entries from many threads is safe.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trove/error.h"
#include "trove/shared_bytes.h"

namespace trove {

// Caps (reasons): entries in one archive (a checkpoint has one per storage; tensordict one per
// leaf; this bounds the central-directory index in memory to a few hundred MB).
inline constexpr uint64_t kMaxZipEntries = 1'000'000;
// A decompressed entry is held in memory; beyond this, even a declared size is refused.
inline constexpr uint64_t kMaxInflatedEntryBytes = uint64_t{16} << 30;

enum class ZipMethod : uint16_t { kStored = 0, kDeflate = 8, kBzip2 = 12, kLzma = 14 };
// The names of the methods trove writes, in enum order: what ZipMethodName gives and
// ZipMethodFromName takes (the command line's --compression choices).
inline constexpr std::string_view kZipMethodNames[] = {"stored", "deflate", "bzip2", "lzma"};
// "stored", "deflate", "bzip2", "lzma"; "method N" for any other number.
std::string ZipMethodName(uint16_t method);
// The method a name gives (those four; "" is stored, "deflated" is deflate); Error(kUsage)
// listing them for any other name.
ZipMethod ZipMethodFromName(std::string_view name);

struct ZipEntry {
  std::string name;
  uint16_t method = 0;              // ZipMethod value
  uint16_t flags = 0;               // general-purpose bit flags (from the central directory)
  uint32_t crc32 = 0;               // as declared in the central directory
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
  uint64_t central_offset = 0;      // this entry's central directory header (0 for written entries)
  uint64_t data_offset = 0;         // first payload byte (after the local header's name and extra)
  bool zip64 = false;               // a zip64 extra was used (central directory) or present (local
                                    // header; then a data descriptor holds 64-bit sizes)
  std::string local_extra;          // raw local-header extra field (alignment padding lives here)
};

// What to do with an archive two common zip readers would read differently.
enum class ZipDisagreement { kRefuse, kReport };

struct ZipProblem {
  std::string entry;    // empty for archive-level problems
  uint64_t offset = 0;
  std::string message;
};

class ZipReader {
 public:
  // Parses and checks the archive. Throws Error(kCorrupt/kRefused/kUnsupported/kLimit) naming
  // the entry.
  explicit ZipReader(std::shared_ptr<MappedFile> file, ZipDisagreement mode = ZipDisagreement::kRefuse);
  // The same over bytes already in memory (fuzzing, nested archives); file() must not be used.
  explicit ZipReader(SharedBytes archive, ZipDisagreement mode = ZipDisagreement::kRefuse);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* Find(std::string_view name) const;  // exact name, O(log n)
  // torch's lookup (miniz without MZ_ZIP_FLAG_CASE_SENSITIVE): ASCII case ignored. Among names
  // that differ only in case (see case_collisions()) the exact spelling wins, else the first in
  // central-directory order; torch itself may open any of them. O(log n).
  const ZipEntry* FindIgnoringCase(std::string_view name) const;
  // Names that differ only in ASCII case, one problem per extra name. A torch archive with any is
  // read differently by torch (which may open any of them) and by Python's zipfile (which sees
  // them all); tensordict archives are read case-sensitively, so the caller decides.
  const std::vector<ZipProblem>& case_collisions() const { return case_collisions_; }
  // kReport only: where common readers disagree (empty under kRefuse: the constructor threw).
  const std::vector<ZipProblem>& disagreements() const { return disagreements_; }
  // kReport only: entries Python's zipfile reads past the central directory's entry count (torch
  // does not see them; Read() reads them). Not in entries(), Find() or FindIgnoringCase().
  const std::vector<ZipEntry>& zipfile_extra_entries() const { return zipfile_extra_; }
  // kReport only: entries refused on their own (a name with '..' or NUL, encryption, an unknown
  // method, another disk, inconsistent stored sizes), left out of entries(); the others are read
  // (torch's reader would open them), so a scanner still sees every pickle.
  const std::vector<ZipProblem>& refused_entries() const { return refused_; }
  // Throws what the constructor would have thrown under kRefuse (the first disagreement or refused
  // entry, same code and message); returns for an archive every reader sees alike. Lets one parse
  // in kReport serve both a scanner's or detector's look and a strict read.
  void RefuseDisagreements() const;
  const MappedFile& file() const { return *file_; }
  const std::shared_ptr<MappedFile>& shared_file() const { return file_; }  // null for in-memory
  const SharedBytes& bytes() const { return bytes_; }                        // the whole archive

  // The payload: a view for stored entries, decompressed owned bytes otherwise (checked against
  // the declared size; a mismatch is Error(kCorrupt) naming the entry).
  SharedBytes Read(const ZipEntry& entry) const;
  // The payload for a reader that may never look at it (a tensor's storage): a view for stored
  // entries, as Read; for compressed ones deferred bytes (SharedBytes::Deferred) that inflate
  // only when streamed (window by window, never held) or asked for whole, so that metadata
  // commands inflate nothing. Sizes are checked as Read checks them, when inflating.
  SharedBytes ReadDeferred(const ZipEntry& entry) const;
  // CRC-32 of the payload compared with the declared one; false on mismatch.
  bool CheckCrc(const ZipEntry& entry) const;
  // CheckCrc of each of `entries`, the work split across the worker threads (trove/threads.h):
  // a stored entry in pieces whose CRC-32s are combined, a compressed one whole. An entry whose
  // check throws gets its error; the others are checked all the same.
  struct CrcCheck {
    bool matches = false;
    std::exception_ptr error;  // what CheckCrc would have thrown
  };
  // `checked` (when given) is told the compressed bytes of each piece as it is done, from the
  // worker threads, possibly at once.
  std::vector<CrcCheck> CheckCrcs(const std::vector<ZipEntry>& entries,
                                  const std::function<void(uint64_t bytes)>& checked = {}) const;
  // Everything the constructor tolerated but a scanner should report (data-descriptor flags, local
  // headers with zero sizes, extra bytes between entries, a comment, ...).
  const std::vector<ZipProblem>& anomalies() const { return anomalies_; }

 private:
  void Parse(ZipDisagreement mode);
  std::shared_ptr<MappedFile> file_;
  SharedBytes bytes_;
  std::vector<ZipEntry> entries_;
  std::vector<uint32_t> sorted_;  // indices of entries_ sorted by name
  std::vector<uint32_t> folded_;  // indices of entries_ sorted by ASCII-lowercased name
  std::vector<ZipProblem> anomalies_;
  std::vector<ZipProblem> disagreements_;
  std::vector<ZipProblem> case_collisions_;
  std::vector<ZipEntry> zipfile_extra_;
  std::vector<ZipProblem> refused_;
  std::optional<Error> first_refusal_;
};

// How many bytes precede a zip archive that ends the file, as Python's zipfile computes them
// from the last end record (0 when it says the archive starts at byte 0, for zip64, or with no
// end record): zipfile reads every entry that much further on than its recorded offset.
uint64_t ZipfilePrefixBytes(const uint8_t* data, uint64_t size);

// CRC-32 (zip polynomial) of a byte range, continuing from `crc` (0 to start).
uint32_t Crc32(const uint8_t* data, uint64_t size, uint32_t crc = 0);

}  // namespace trove
