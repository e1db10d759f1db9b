// FSDP / verl per-rank checkpoint directories as a format driver (formats/format_registry.h).
#include "formats/format_registry.h"
#include "formats/fsdp/fsdp_reader.h"

namespace trove {
namespace {

constexpr Format kFsdp{"fsdp"};

// Structure without a magic number (files named by rank): kLikely, so DCP and DeepSpeed
// directories, which are certain of theirs, win over rank-named files beside them.
DetectConfidence DetectFsdp(const Detection& d) {
  return d.directory && IsFsdpDirectory(d.path) ? kLikely : kNotThisFormat;
}

Document ReadFsdpDetected(const Detection& d, const ReadOptions& options) { return ReadFsdpCheckpoint(d.path, options); }

void VerifyFsdpDetected(const Detection& d, CheckReport& report, const ProgressReporter::Callback& progress) {
  VerifyFsdpCheckpoint(d.path, report, progress);
}

void ScanFsdpDetected(const Detection& d, CheckReport& report) { ScanFsdpCheckpoint(d.path, report); }

}  // namespace

const FormatDriver& FsdpFormat() {
  static const FormatDriver driver{
      .format = kFsdp,
      .summary = "FSDP / verl per-rank torch.save files (ShardedTensor, DTensor), read as one checkpoint",
      .extensions = {},
      .detect = DetectFsdp,
      .read = ReadFsdpDetected,
      .verify = VerifyFsdpDetected,
      .scan = ScanFsdpDetected,
      .directory_sign = "<name>rank<R>.pt files, one per rank (FSDP, verl)",
  };
  return driver;
}

}  // namespace trove
