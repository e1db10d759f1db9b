// .psk.d sample files as a trove format driver (formats/format_registry.h).
#include "formats/format_registry.h"
#include "formats/pskd/pskd_checks.h"
#include "formats/pskd/pskd_reader.h"
#include "trove/pskd.h"

namespace trove {
namespace {

DetectConfidence DetectPskd(const Detection& d) { return d.head().starts_with("PSKD") ? kCertain : kNotThisFormat; }

Document ReadPskdDetected(const Detection& d, const ReadOptions& options) { return ReadPskd(d.file, options); }

void WritePskdFromConvert(const Document& doc, const std::string& destination, const ConvertOptions& options) {
  auto p = WriterPartOf<PskdWriteOptions>(options);
  p.vocab = options.vocab;
  p.max_shard_bytes = options.max_shard_bytes.value_or(0);
  WritePskd(doc, destination, p);
}

// presk's own checks; a .psk.d has no checksum, so none of its bytes are covered by one.
// ops shows the check on the progress line as one step over the file.
void VerifyPskd(const Detection& d, CheckReport& report, const ProgressReporter::Callback&) {
  VerifyPskdFile(report, d.file);
  report.bytes_without_checksum = report.bytes_checked;
}

}  // namespace

const FormatDriver& PskdFormat() {
  static const FormatDriver driver{
      .format = Format::kPskd,
      .summary = ".psk.d sample file (presk data)",
      .extensions = {".psk.d"},
      .detect = DetectPskd,
      .read = ReadPskdDetected,
      .write = WritePskdFromConvert,
      // --max-shard-size: shards NAME-00000.psk.d... and a manifest NAME.json (formats/pskd/sharded_writer.h).
      .writes_own_parts = true,
      .verify = VerifyPskd,
  };
  return driver;
}

}  // namespace trove
