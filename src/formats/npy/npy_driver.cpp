// numpy's .npy and .npz as trove's format drivers (formats/format_registry.h): the only place
// outside this folder that names them is their line in format_registry.cpp.
#include "formats/format_registry.h"
#include "formats/npy/npy_format.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

constexpr Format kNpy{"npy"};
constexpr Format kNpz{"npz"};

DetectConfidence DetectNpy(const Detection& d) {
  return !d.directory && !d.zip_magic && LooksLikeNpy(d.head()) ? kCertain : kNotThisFormat;
}

Document ReadNpyDetected(const Detection& d, const ReadOptions& options) { return ReadNpy(d.file, options); }

void WriteNpyFromConvert(const Document& doc, const std::string& destination, const ConvertOptions& options) {
  WriteNpy(doc, destination, WriterPartOf<WriteOptions>(options));
}

// What numpy.load(allow_pickle=True) runs: an object array's pickle. The rest of the file is the
// header and the array's bytes, which reading it (ops) checks.
void ScanNpyDetected(const Detection& d, CheckReport& report) {
  ScanNpy(*d.file, report);
  report.entries_checked++;
  report.bytes_checked += d.file->size();
}

// Every member an .npy: certain. A zip that is no torch or tensordict archive (those readers are
// certain of theirs) but holds an .npy member or is named .npz is one whose other members or
// names the npz reader can say what is wrong with, by member, rather than the torch reader's
// "not a checkpoint".
DetectConfidence DetectNpz(const Detection& d) {
  if (d.zip && IsNpzArchive(*d.zip)) return kCertain;
  if (!d.zip_magic) return kNotThisFormat;
  if (d.path.ends_with(".npz")) return kLikely;
  if (d.zip && HoldsNpyMember(*d.zip)) return kLikely;
  return kNotThisFormat;
}

Document ReadNpzDetected(const Detection& d, const ReadOptions& options) {
  if (!d.zip) return ReadNpz(std::make_shared<const ZipReader>(d.file, ZipDisagreement::kReport), options);
  return ReadNpz(d.zip, options);
}

void WriteNpzFromConvert(const Document& doc, const std::string& destination, const ConvertOptions& options) {
  WriteNpz(doc, destination, WriterPartOf<WriteOptions>(options));
}

// The container (CRCs, readers that disagree) is checked by ops for every zip format; the
// members' headers and object arrays here.
void ScanNpzDetected(const Detection& d, CheckReport& report) { ScanNpz(*d.zip, report); }

}  // namespace

const FormatDriver& NpyFormat() {
  static const FormatDriver driver{
      .format = kNpy,
      .summary = "numpy .npy array",
      .extensions = {".npy"},
      .detect = DetectNpy,
      .read = ReadNpyDetected,
      .write = WriteNpyFromConvert,
      .scan = ScanNpyDetected,
  };
  return driver;
}

const FormatDriver& NpzFormat() {
  static const FormatDriver driver{
      .format = kNpz,
      .summary = "numpy .npz archive (numpy.savez, savez_compressed)",
      .extensions = {".npz"},
      .detect = DetectNpz,
      .read = ReadNpzDetected,
      .write = WriteNpzFromConvert,
      .zip_container = true,
      .scan = ScanNpzDetected,
  };
  return driver;
}

}  // namespace trove
