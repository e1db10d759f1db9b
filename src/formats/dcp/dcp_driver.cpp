// torch.distributed.checkpoint (DCP) directories as a format driver (formats/format_registry.h):
// a directory holding `.metadata` and `.distcp` files, or the `.metadata` file itself.
#include <filesystem>

#include "core/confined_directory.h"
#include "formats/dcp/dcp_metadata.h"
#include "formats/dcp/dcp_reader.h"
#include "formats/format_registry.h"
#include "pickle/pickle_scan.h"

namespace trove {
namespace {

constexpr Format kDcp{"dcp"};

bool IsMetadataFile(const Detection& d) {
  return !d.directory && d.file && !d.zip_magic && std::filesystem::path(d.path).filename() == kDcpMetadataName &&
         LooksLikePickle(d.file->data(), d.file->size());
}

// A directory by its defining files; the metadata file by its name and a pickle's first bytes.
DetectConfidence DetectDcp(const Detection& d) {
  if (d.directory) return IsDcpDirectory(d.path) ? kCertain : kNotThisFormat;
  return IsMetadataFile(d) ? kCertain : kNotThisFormat;
}

Document ReadDcpDetected(const Detection& d, const ReadOptions& options) {
  return ReadDcpCheckpoint(d.path, d.directory, options);
}

// What torch would run: the .metadata pickle (FileSystemReader unpickles it without restriction),
// then every item's archive's pickle (an object item's is torch.load'ed with weights_only=False).
void ScanDcpDetected(const Detection& d, CheckReport& report) {
  std::shared_ptr<MappedFile> file = d.file;
  if (d.directory) {
    // The directory's file, by the rule for files a directory holds (no link out of it).
    ConfinedFile metadata = ConfinedDirectory::Open(d.path)->RequireFile(kDcpMetadataName);
    file = MappedFile::FromDescriptor(metadata.fd.release(), metadata.path, metadata.size, /*keep_descriptor=*/false);
  }
  if (file->size() > kMaxDcpMetadataBytes) {
    report.Add(Severity::kMedium, std::string(kDcpMetadataName), 0, "larger than kMaxDcpMetadataBytes: not scanned");
    return;
  }
  ScanDcpMetadata(report, std::string(kDcpMetadataName), file->data(), file->size());
  report.entries_checked++;
  report.bytes_checked += file->size();
  ScanDcpItems(d.path, d.directory, report);
}

void VerifyDcpDetected(const Detection& d, CheckReport& report, const ProgressReporter::Callback& progress) {
  VerifyDcpCheckpoint(d.path, d.directory, report, progress);
}

}  // namespace

const FormatDriver& DcpFormat() {
  static const FormatDriver driver{
      .format = kDcp,
      .summary = "torch.distributed.checkpoint directory (.metadata and .distcp files), read as one checkpoint",
      .extensions = {},
      .detect = DetectDcp,
      .read = ReadDcpDetected,
      .verify = VerifyDcpDetected,
      .scan = ScanDcpDetected,
      .directory_sign = ".metadata (torch.distributed.checkpoint)",
  };
  return driver;
}

}  // namespace trove
