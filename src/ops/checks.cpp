#include "trove/checks.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "core/confined_directory.h"
#include "core/progress.h"
#include "formats/format_registry.h"
#include "formats/pt/legacy_tar.h"
#include "formats/pt/pt_checks.h"
#include "formats/pt/pt_reader.h"
#include "formats/safetensors/sharded_reader.h"
#include "formats/tensordict/tree_checks.h"
#include "ops/detect.h"
#include "pickle/pickle_scan.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/zip_reader.h"

namespace trove {

CheckReport VerifyDetected(const ops::Detection& d, const VerifyOptions& options);
CheckReport ScanDetected(const ops::Detection& d);

namespace {

// Caps (reasons):
// A TorchScript/torch.package record not named like a pickle is checked for one (its first bytes)
// only up to this size when compressed: the check inflates it, and real pickled resources are
// small. Stored records of any size are checked (a view, nothing inflated).
constexpr uint64_t kMaxSniffedRecordBytes = uint64_t{64} << 20;

// Structure: what a reader would refuse, read from what detection already parsed.
// `already_said`: whether the report holds this error already (a shard's own check found it).
void CheckStructure(CheckReport& report, const ops::Detection& d,
                    const std::function<bool(const Error&)>& already_said = nullptr) {
  try {
    ops::OpenDetected(d, {});
  } catch (const Error& e) {
    if (already_said && already_said(e)) return;
    if (e.code() == ErrorCode::kIo || e.code() == ErrorCode::kNotFound) {
      report.AddError(Severity::kMedium, "", e, "not readable: ");
      return;
    }
    report.AddError(e.code() == ErrorCode::kRefused ? Severity::kHigh : Severity::kMedium, "", e);
  }
}

// A sharded checkpoint: each shard checked as a file of its own (a .bin shard's CRCs and
// pickle), its findings under the shard's name, then the index against the shards. Shards are
// opened by the rule for files a file names (core/confined_directory.h), each file once however
// many names reach it, and a shard must be a .safetensors or torch.save file by content: an index
// naming an index (itself, a cycle, a graph of them) is a finding, never a walk.
CheckReport CheckShards(const ops::Detection& d, const std::function<CheckReport(const ops::Detection&)>& check) {
  CheckReport report;
  report.path = d.path;
  report.format = std::string(FormatName(Format::kShardedIndex));
  const std::string index = ShardIndexOf(d);
  std::vector<std::string> shards;
  std::shared_ptr<const ConfinedDirectory> dir;
  try {
    shards = ShardFiles(index, d.directory ? IndexNamedBy::kDirectory : IndexNamedBy::kUser);
    const std::string parent = std::filesystem::path(index).parent_path().string();
    dir = ConfinedDirectory::Open(parent.empty() ? std::string(".") : parent);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo || e.code() == ErrorCode::kNotFound) throw;
    report.AddError(e.code() == ErrorCode::kRefused ? Severity::kHigh : Severity::kMedium, "", e);
    return report;
  }
  std::set<FileIdentity> visited;
  std::set<std::string> with_findings;  // shards whose own check found something
  for (const std::string& name : shards) {
    // A shard the rule refuses, a missing one or one that is no shard: CheckStructure below
    // reports it, as reading the checkpoint meets it.
    std::optional<ConfinedFile> file;
    try {
      file = dir->OpenFile(name);
    } catch (const Error&) {
      continue;
    }
    if (!file) continue;
    if (!visited.insert(file->identity).second) continue;
    CheckReport part;
    try {
      const ops::Detection shard = ops::DetectFile(std::move(*file));
      // A shard of another format is still checked as what it is (whatever loads it runs what
      // it holds), but an index is never followed from an index.
      if (shard.format == Format::kShardedIndex || shard.format == Format::kUnknown) continue;
      part = check(shard);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnsupported) throw;
      report.AddError(Severity::kMedium, name, e);
      continue;
    }
    report.entries_checked += part.entries_checked;
    report.bytes_checked += part.bytes_checked;
    report.bytes_without_checksum += part.bytes_without_checksum;
    if (!part.findings.empty()) with_findings.insert(name);
    for (auto& f : part.findings) {
      report.Add(f.severity, f.entry.empty() ? name : name + "/" + f.entry, f.offset, f.message, f.key_path);
      report.findings.back().call = f.call;
    }
    for (auto& g : part.globals) report.globals.push_back({name + "/" + g.entry, g.name, g.offset, g.allowed, g.policy_class});
  }
  // Reading the whole checkpoint meets a broken shard again: said once, under the shard's name.
  CheckStructure(report, d, [&](const Error& e) {
    return with_findings.count(std::filesystem::path(e.file()).filename().string()) > 0;
  });
  return report;
}

// The zip a zip format was detected with, or (when that parse failed) the error that parse gives,
// named by the path: an unreadable container is an error, not a finding.
std::shared_ptr<const ZipReader> DetectedZip(const ops::Detection& d) {
  if (d.zip) return d.zip;
  return WithFile(d.path, [&] { return std::make_shared<const ZipReader>(d.file, ZipDisagreement::kReport); });
}

// TorchScript's mobile flatbuffer and the 1.0 preview's container: code archives that are no
// zip. One finding says so (nothing in them is a pickle torch.load would run).
bool CodeFileNotZip(CheckReport& report, const ops::Detection& d) {
  if (d.format != Format::kTorchScript || d.zip || d.file == nullptr) return false;
  const std::string kind = TorchCodeFileKind(
      std::string_view(reinterpret_cast<const char*>(d.file->data()), std::min<uint64_t>(d.file->size(), 16)));
  if (kind.empty()) return false;
  report.Add(Severity::kHigh, "", 0, kind + ": it holds code, not just data (trove reads none of it)");
  report.entries_checked++;
  report.bytes_checked += d.file->size();
  return true;
}

bool IsZipContainer(Format format) {
  const FormatDriver* driver = FindFormatDriver(format);
  return driver != nullptr && driver->zip_container;
}

// Reading a directory's structure is shown on the progress line as a step over its files' bytes,
// counted by a walk that looks at most at this many entries (the total is the line's estimate,
// never a check, and must not cost more than the read it announces).
constexpr uint64_t kMaxProgressWalkEntries = uint64_t{1} << 16;

uint64_t SaturatingSum(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

// The bytes verify's structure step reads or bounds-checks, for its progress line: a zip
// container's pickles, a file's bytes, a directory's regular files (symbolic links not followed).
uint64_t StructureBytes(const ops::Detection& d) {
  if (d.zip && IsZipContainer(d.format)) {
    uint64_t total = 0;
    for (const ZipEntry& e : d.zip->entries()) {
      if (NamedLikePickle(e.name)) total = SaturatingSum(total, e.uncompressed_size);
    }
    return total;
  }
  if (d.file) return d.file->size();
  if (!d.directory) return 0;
  namespace fs = std::filesystem;
  std::error_code error;
  uint64_t total = 0, seen = 0;
  for (fs::recursive_directory_iterator it(d.path, fs::directory_options::skip_permission_denied, error), end;
       !error && it != end && seen < kMaxProgressWalkEntries; it.increment(error), ++seen) {
    std::error_code ignored;
    if (it->symlink_status(ignored).type() != fs::file_type::regular) continue;
    const uintmax_t size = it->file_size(ignored);
    if (!ignored) total = SaturatingSum(total, size);
  }
  return total;
}

}  // namespace

CheckReport VerifyDetected(const ops::Detection& d, const VerifyOptions& options) {
  CheckReport report;
  report.path = d.path;
  const Format format = d.format;
  report.format = std::string(FormatName(format));
  if (format == Format::kShardedIndex) {
    return CheckShards(d, [&](const ops::Detection& shard) { return VerifyDetected(shard, options); });
  }
  if (format == Format::kUnknown) ops::OpenDetected(d, {});  // throws what the file is instead
  if (CodeFileNotZip(report, d)) return report;
  const FormatDriver* driver = FindFormatDriver(format);
  if (driver != nullptr && driver->verify != nullptr) {
    // A directory format's hook shows its own steps; a file format's check is one step over the file.
    ProgressReporter step(options.progress, d.directory || !d.file ? 0 : d.file->size());
    step.Begin();
    driver->verify(d, report, options.progress);
    step.Finish();
    return report;
  }
  if (IsZipContainer(format)) {
    // An unreadable container throws (exit 2); one that zip readers read differently is a problem.
    const std::shared_ptr<const ZipReader> zip = DetectedZip(d);
    for (const auto& p : zip->disagreements()) {
      report.Add(Severity::kHigh, p.entry, p.offset, "zip readers disagree: " + p.message);
    }
    for (const auto& r : zip->refused_entries()) report.Add(Severity::kHigh, r.entry, r.offset, r.message);
    uint64_t crc_bytes = 0;
    for (const ZipEntry& e : zip->entries()) crc_bytes += e.compressed_size;
    ProgressReporter progress(options.progress, crc_bytes);
    progress.Begin();
    std::function<void(uint64_t)> checked;
    if (progress.active()) checked = [&](uint64_t bytes) { progress.Add(bytes); };
    const std::vector<ZipReader::CrcCheck> crcs = zip->CheckCrcs(zip->entries(), checked);
    progress.Finish();
    for (size_t i = 0; i < crcs.size(); ++i) {
      const ZipEntry& e = zip->entries()[i];
      report.entries_checked++;
      report.bytes_checked += e.compressed_size;
      try {
        if (crcs[i].error) std::rethrow_exception(crcs[i].error);
        if (!crcs[i].matches) {
          if (e.crc32 == 0) {
            report.bytes_without_checksum += e.compressed_size;
            report.Add(Severity::kInfo, e.name, e.data_offset, "no CRC-32 recorded (0); bytes unchecked");
          } else {
            report.Add(Severity::kMedium, e.name, e.data_offset, "CRC-32 mismatch: the bytes differ from what was written");
          }
        }
      } catch (const Error& err) {
        report.Add(Severity::kMedium, e.name, e.data_offset, err.message());
      }
    }
  }
  // Reading the structure (the pickle of a large checkpoint, a directory of many files) counts
  // nothing until it ends: a step of its own, shown from its start.
  ProgressReporter reading(options.progress, StructureBytes(d));
  reading.Begin();
  try {
    // The same parse read as a document: a sound archive is parsed once.
    Document doc = ops::OpenDetected(d, {});
    for (const auto& w : doc.warnings) report.Add(Severity::kInfo, "", 0, w);
    // Sound, but not all data trove understands: worth saying, not a problem of the file.
    if (const std::vector<UnknownObject> unknown = FindUnknownObjects(doc); !unknown.empty()) {
      report.Add(Severity::kInfo, "", 0,
                 std::to_string(unknown.size()) + " object(s) of classes trove does not know, read as inert data "
                 "(nothing run): " + UnknownClassesText(unknown) + " (convert writes them only with --keep-unknown)",
                 unknown.front().key);
    }
    if (!IsZipContainer(format)) {
      // Legacy .pt, tensordict directories, .safetensors: formats without checksums.
      report.entries_checked += doc.records.size();
      report.bytes_checked += doc.file_size;
      report.bytes_without_checksum += doc.file_size;
    }
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo || e.code() == ErrorCode::kNotFound) throw;
    report.AddError(Severity::kMedium, "", e);
  }
  reading.Finish();
  return report;
}

CheckReport ScanDetected(const ops::Detection& d) {
  const std::string& path = d.path;
  CheckReport report;
  report.path = path;
  const Format format = d.format;
  report.format = std::string(FormatName(format));
  if (format == Format::kShardedIndex) return CheckShards(d, ScanDetected);
  const FormatDriver* driver = FindFormatDriver(format);
  if (d.directory) {
    // A directory format: its own findings, then what reading it meets.
    if (driver != nullptr && driver->scan != nullptr) {
      driver->scan(d, report);
      CheckStructure(report, d);
      return report;
    }
  }
  // A directory detection did not recognise: nothing trove reads.
  if (d.directory) throw Error(ErrorCode::kUnsupported, NotADirectoryFormatText()).SetFile(path);
  const std::shared_ptr<MappedFile>& file = d.file;
  if (CodeFileNotZip(report, d)) return report;
  if (IsZipContainer(format)) {
    // Python's zipfile shifts every offset when the end records leave room for data before the
    // archive; torch's reader does not. Both views are scanned.
    if (const uint64_t shift = ZipfilePrefixBytes(file->data(), file->size()); shift > 0) {
      const size_t at = report.findings.size();
      uint64_t entries = 0, first = 0;
      if (ScanZipfileView(report, file, shift, &entries, &first)) {
        report.findings.insert(report.findings.begin() + static_cast<std::ptrdiff_t>(at),
                               {Severity::kCritical, "", shift,
                                "zip readers disagree: Python's zipfile reads every entry " + std::to_string(shift) +
                                    " bytes further on than torch's reader (it takes them for data before the "
                                    "archive) and sees " + std::to_string(entries) + " entries there; scanned as "
                                    "'zipfile view'",
                                {}, {}});
      }
    }
    std::shared_ptr<const ZipReader> zip = d.zip;
    if (!zip) {
      try {
        // Read as torch reads it, with every point where zip readers part ways listed.
        zip = std::make_shared<const ZipReader>(file, ZipDisagreement::kReport);
      } catch (const Error& e) {
        // Path tricks (".." and absolute names), encrypted entries, overlaps and headers that
        // disagree with the central directory all stop the zip reader: each is reported here.
        report.AddError(Severity::kHigh, "", e, "zip container refused: ");
        return report;
      }
    }
    for (const auto& a : zip->anomalies()) {
      // Data descriptors that agree with the central directory are how torch.save writes every
      // record: worth listing, not alarming.
      bool usual = a.message.find("use a data descriptor") != std::string::npos;
      report.Add(usual ? Severity::kInfo : Severity::kMedium, a.entry, a.offset, a.message);
    }
    // Readers that see different archives or bytes: whatever trove scans, torch or another tool
    // may run something else.
    // Path tricks (".." and absolute names), encryption and unknown methods: the entry is not
    // read; the rest of the archive, which torch's reader would still open, is scanned.
    for (const auto& r : zip->refused_entries()) {
      report.Add(Severity::kHigh, r.entry, r.offset, "zip entry refused: " + r.message);
    }
    for (const auto& p : zip->disagreements()) {
      report.Add(Severity::kCritical, p.entry, p.offset, "zip readers disagree: " + p.message);
    }
    if (format != Format::kTdz) {
      for (const auto& c : zip->case_collisions()) {
        report.Add(Severity::kCritical, c.entry, c.offset, "zip readers disagree: " + c.message);
      }
    }
    for (const auto& e : zip->entries()) {
      const std::string rest = TorchRecordName(e.name);
      if (IsTorchScriptCodeRecord(rest)) {
        report.Add(Severity::kHigh, e.name, e.data_offset, "TorchScript/torch.package record: the archive carries code");
      }
      // Every entry whose name torch's loaders (ignoring case) or tensordict would unpickle, and
      // in TorchScript/torch.package archives every other record that starts like a pickle
      // (torch.package loads pickled resources by any name).
      const bool named = NamedLikePickle(e.name);
      const bool sniff = !named && format == Format::kTorchScript && !IsStorageRecord(e.name);
      if (!named && !sniff) continue;
      if (sniff && e.method != static_cast<uint16_t>(ZipMethod::kStored) && e.uncompressed_size > kMaxSniffedRecordBytes) {
        report.Add(Severity::kMedium, e.name, e.data_offset,
                                   "compressed record larger than kMaxSniffedRecordBytes: not checked for a pickle");
        continue;
      }
      SharedBytes bytes;
      try {
        bytes = zip->Read(e);
      } catch (const Error& err) {
        report.Add(Severity::kMedium, e.name, e.data_offset, err.message());
        continue;
      }
      if (sniff && !LooksLikePickle(bytes.data(), bytes.size())) continue;
      if (format == Format::kTdz && IsPickledSidecar(e.name)) {
        ScanSidecar(report, e.name, bytes);
      } else {
        ScanTorchPickle(report, e.name, bytes.data(), bytes.size());
      }
    }
    for (const auto& e : zip->zipfile_extra_entries()) {
      if (!NamedLikePickle(e.name)) continue;
      const std::string label = "zipfile view: " + e.name;
      try {
        SharedBytes bytes = zip->Read(e);
        ScanTorchPickle(report, label, bytes.data(), bytes.size());
      } catch (const Error& err) {
        report.Add(Severity::kMedium, label, e.data_offset, err.message());
      }
    }
    if (driver != nullptr && driver->scan != nullptr && d.zip) driver->scan(d, report);
    if (format == Format::kTdz) CheckStructure(report, d);
    return report;
  }
  // torch.load hands every file that does not start as a zip to Python's tarfile first, whatever
  // its magic: a file tarfile accepts is read as a legacy tar checkpoint.
  const bool tar = LooksLikeTar(file->data(), file->size());
  if (tar) ScanLegacyTar(report, file);
  if (driver != nullptr && driver->scan != nullptr) {
    driver->scan(d, report);
    return report;
  }
  if (format == Format::kUnknown) {
    // Not a format trove reads, but maybe one that others run: a bare pickle, or a zip hidden
    // behind other bytes (a "magic bypass" polyglot). Anything else is an error, not a report.
    ScanPolyglot(report, file, /*scan_leading_pickle=*/true);
    if (report.findings.empty()) throw Error(ErrorCode::kUnsupported, "not a format trove reads").SetFile(path);
    return report;
  }
  // .psk.d (and refused formats): no pickle in the container; reading them checks their
  // structure, and a zip hidden inside is a polyglot.
  CheckStructure(report, d);
  ScanPolyglot(report, file, /*scan_leading_pickle=*/false);
  report.entries_checked++;
  report.bytes_checked += file->size();
  return report;
}

CheckReport Verify(const std::string& path) { return VerifyDetected(ops::Detect(path), {}); }

CheckReport Verify(const std::string& path, const VerifyOptions& options) {
  return VerifyDetected(ops::Detect(path), options);
}

CheckReport Scan(const std::string& path) { return ScanDetected(ops::Detect(path)); }

}  // namespace trove
