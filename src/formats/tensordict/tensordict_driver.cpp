// tensordict's two forms as trove's format drivers (formats/format_registry.h): the memmap
// directory and the .tdz archive.
#include <filesystem>

#include "formats/format_registry.h"
#include "formats/tensordict/td_names.h"
#include "formats/tensordict/tensordict_reader.h"
#include "formats/tensordict/tree_checks.h"
#include "trove/tensordict.h"

namespace trove {
namespace {

TensordictWriteOptions TensordictPart(const ConvertOptions& options) {
  auto td = WriterPartOf<TensordictWriteOptions>(options);
  td.compression = options.compression;
  return td;
}

DetectConfidence DetectTdz(const Detection& d) { return d.zip && IsTdzArchive(*d.zip) ? kCertain : kNotThisFormat; }

Document ReadTdzDetected(const Detection& d, const ReadOptions& options) { return ReadTdz(d.zip, options); }

void WriteTdzFromConvert(const Document& doc, const std::string& destination, const ConvertOptions& options) {
  WriteTdz(doc, destination, TensordictPart(options));
}

DetectConfidence DetectTensordictDir(const Detection& d) {
  std::error_code ec;
  return d.directory && std::filesystem::exists(std::filesystem::path(d.path) / "meta.json", ec) ? kCertain
                                                                                                  : kNotThisFormat;
}

Document ReadTensordictDetected(const Detection& d, const ReadOptions& options) {
  return ReadTensordictDir(d.path, options);
}

void WriteTensordictFromConvert(const Document& doc, const std::string& destination, const ConvertOptions& options) {
  WriteTensordictDir(doc, destination, TensordictPart(options));
}

// Sidecar pickles and links of the tree; reading it (ops) finds the rest.
void ScanTensordictTree(const Detection& d, CheckReport& report) { ScanTensordictDir(report, d.path); }

}  // namespace

const FormatDriver& TdzFormat() {
  static const FormatDriver driver{
      .format = Format::kTdz,
      .summary = "tensordict .tdz archive (a zip of a memmap directory)",
      .extensions = {".tdz"},
      .detect = DetectTdz,
      .read = ReadTdzDetected,
      .write = WriteTdzFromConvert,
      .zip_container = true,
  };
  return driver;
}

const FormatDriver& TensordictFormat() {
  static const FormatDriver driver{
      .format = Format::kTensordictDir,
      .summary = "tensordict memmap directory (meta.json and .memmap leaves)",
      .detect = DetectTensordictDir,
      .read = ReadTensordictDetected,
      .write = WriteTensordictFromConvert,
      .writes_directory = true,
      .owns_file = tensordict::IsTensordictFileName,
      .scan = ScanTensordictTree,
      .directory_sign = "meta.json (tensordict memmap)",
  };
  return driver;
}

}  // namespace trove
