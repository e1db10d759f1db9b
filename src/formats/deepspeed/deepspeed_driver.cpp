// DeepSpeed ZeRO checkpoint directories as a format driver (formats/format_registry.h).
#include "formats/deepspeed/deepspeed_reader.h"
#include "formats/format_registry.h"

namespace trove {
namespace {

constexpr Format kDeepSpeed{"deepspeed"};

DetectConfidence DetectDeepSpeed(const Detection& d) {
  return d.directory && IsDeepSpeedDirectory(d.path) ? kCertain : kNotThisFormat;
}

Document ReadDeepSpeedDetected(const Detection& d, const ReadOptions& options) {
  return ReadDeepSpeedCheckpoint(d.path, options);
}

void VerifyDeepSpeedDetected(const Detection& d, CheckReport& report, const ProgressReporter::Callback& progress) {
  VerifyDeepSpeedCheckpoint(d.path, report, progress);
}

void ScanDeepSpeedDetected(const Detection& d, CheckReport& report) { ScanDeepSpeedCheckpoint(d.path, report); }

}  // namespace

const FormatDriver& DeepSpeedFormat() {
  static const FormatDriver driver{
      .format = kDeepSpeed,
      .summary = "DeepSpeed ZeRO 1/2/3 checkpoint directory, read as its fp32 master weights",
      .extensions = {},
      .detect = DetectDeepSpeed,
      .read = ReadDeepSpeedDetected,
      .verify = VerifyDeepSpeedDetected,
      .scan = ScanDeepSpeedDetected,
      .directory_sign = "latest or mp_rank_00_model_states.pt with zero_pp_rank_* optimizer files (DeepSpeed)",
  };
  return driver;
}

}  // namespace trove
