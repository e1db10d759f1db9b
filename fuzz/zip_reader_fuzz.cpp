// libFuzzer target: any bytes opened as a zip archive, every entry read and CRC-checked.
// trove::Error is the only acceptable outcome besides success; anything else (a crash, a
// sanitizer report, an uncaught exception, a huge allocation) is a finding.
#include <cstddef>
#include <cstdint>

#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    trove::ZipReader reader(trove::SharedBytes::CopyOf(data, size));
    for (const trove::ZipEntry& entry : reader.entries()) {
      try {
        (void)reader.CheckCrc(entry);
        (void)reader.Find(entry.name);
      } catch (const trove::Error&) {
      }
    }
    (void)reader.anomalies().size();
  } catch (const trove::Error&) {
  }
  return 0;
}
