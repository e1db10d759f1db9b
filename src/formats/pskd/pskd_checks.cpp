#include "formats/pskd/pskd_checks.h"

#include "trove/error.h"
#include "trove/pskd.h"

namespace trove {

void VerifyPskdFile(CheckReport& report, const std::shared_ptr<MappedFile>& mapped) {
  report.bytes_checked += mapped->size();
  try {
    pskd::PskdFile file = pskd::PskdFile::FromMapped(mapped);
    file.CheckData();
    report.entries_checked += file.count();
  } catch (const Error& e) {
    report.AddError(Severity::kMedium, "", e);
  }
}

}  // namespace trove
