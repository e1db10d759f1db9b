// libFuzzer target: any bytes opened as a zip archive, strictly and as a scanner reads it (every
// disagreement between zip readers listed), every entry read, CRC-checked and looked up both ways.
// trove::Error is the only acceptable outcome besides success; anything else (a crash, a
// sanitizer report, an uncaught exception, a huge allocation) is a finding.
#include <cstddef>
#include <cstdint>

#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (trove::ZipDisagreement mode : {trove::ZipDisagreement::kRefuse, trove::ZipDisagreement::kReport}) {
    try {
      trove::ZipReader reader(trove::SharedBytes::CopyOf(data, size), mode);
      for (const trove::ZipEntry& entry : reader.entries()) {
        try {
          (void)reader.CheckCrc(entry);
          (void)reader.Find(entry.name);
          (void)reader.FindIgnoringCase(entry.name);
        } catch (const trove::Error&) {
        }
      }
      (void)reader.anomalies().size();
      (void)reader.disagreements().size();
      (void)reader.case_collisions().size();
    } catch (const trove::Error&) {
    }
  }
  return 0;
}
