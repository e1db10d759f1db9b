// libFuzzer target: .psk.d header and sample-type parsing, then sample reads and printing, on
// arbitrary bytes. Any trove::Error is a clean refusal; anything else (crash, sanitizer report,
// uncaught exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/pskd/pskd_text.h"
#include "trove/pipeline.h"
#include "trove/pskd.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trove::pskd;
  try {
    PskdFile file = PskdFile::FromBytes(trove::SharedBytes::CopyOf(data, size), "fuzz.psk.d");
    if (file.type().is_params || file.count() == 0) return 0;
    // Printing a sample walks every element: cap the leaves printed in full, as info does.
    constexpr uint64_t kPrintedElements = 4096;
    const uint64_t picks[] = {0, file.count() / 2, file.count() - 1, file.count()};
    for (uint64_t i : picks) {
      try {
        file.CheckIndices(i);
        std::string text;
        AppendSampleText(file.type(), file.Sample(i), false, kPrintedElements, text);
        AppendSampleText(file.type(), file.Sample(i), true, kPrintedElements, text);
      } catch (const trove::Error&) {
      }
    }
    if (file.type().sample_bytes <= (1u << 16)) {
      BatchLoader loader(file);
      Pipeline pipeline(file.count() < 64 ? file.count() : 64, {data[0], 2, 2});
      Batch batch;
      for (const auto& indices : pipeline.Batches(1)) loader.Load(indices, batch);
    }
  } catch (const trove::Error&) {
  }
  return 0;
}
