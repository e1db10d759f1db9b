// What a scan reports of .npy files and .npz archives: the pickle an object array carries, which
// numpy.load(allow_pickle=True) runs, scanned as a plain pickle (numpy unpickles it with
// pickle.load: no persistent ids). Plain arrays hold no code and add no finding.
#include <algorithm>

#include "formats/npy/npy_format.h"
#include "formats/npy/npy_header.h"
#include "pickle/pickle_scan.h"
#include "trove/error.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

// One file or member: `bytes` its bytes, `entry` its name in findings ("" for an .npy file).
void ScanArrayBytes(const SharedBytes& bytes, const std::string& entry, CheckReport& report) {
  report.entries_checked++;
  NpyHeader h;
  try {
    h = ReadNpyHeader(bytes);
  } catch (const Error& e) {
    // Not readable as an array: numpy.load refuses it too (it runs nothing of it).
    if (e.code() == ErrorCode::kUnsupported) return;  // a dtype trove does not read: still data
    report.AddError(Severity::kMedium, entry, e, "array header not readable: ");
    return;
  }
  report.bytes_checked += h.preamble.data_offset();
  if (h.kind != NpyKind::kObject) return;
  const uint64_t at = h.preamble.data_offset();
  report.Add(Severity::kHigh, entry, at,
             "an object array ('" + h.descr + "'): its data is a pickle, which numpy.load(allow_pickle=True) runs");
  SharedBytes pickle;
  try {
    pickle = bytes.Slice(at, bytes.size() - at);
    (void)pickle.data();  // a deflated member is inflated here, within the zip reader's caps
  } catch (const Error& e) {
    report.AddError(Severity::kMedium, entry, e, "pickle not readable: ");
    return;
  }
  report.bytes_checked += pickle.size();
  DataResolver resolver(PicklePolicy::kPermissive);
  ScanPickle(report, entry, pickle.data(), pickle.size(), resolver, at);
}

}  // namespace

void ScanNpy(const MappedFile& file, CheckReport& report) { ScanArrayBytes(file.bytes(), "", report); }

void ScanNpz(const ZipReader& zip, CheckReport& report) {
  for (const ZipEntry& e : zip.entries()) {
    SharedBytes bytes;
    try {
      bytes = zip.ReadDeferred(e);
    } catch (const Error& err) {
      report.AddError(Severity::kMedium, e.name, err);
      continue;
    }
    ScanArrayBytes(bytes, e.name, report);
  }
}

}  // namespace trove
