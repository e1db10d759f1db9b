// libFuzzer target: `presk data pack`'s text parser. The first line is the sample type, every
// further line a sample. Any trove::Error is a clean refusal; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "formats/pskd/pskd_text.h"
#include "trove/pskd.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trove::pskd;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t nl = input.find('\n');
  if (nl == std::string_view::npos) return 0;
  try {
    SampleType type = ParseSampleType(input.substr(0, nl));
    // Keep each run fast: a sample buffer of a few pages is as good as a large one here.
    if (type.is_params || type.sample_bytes > (1u << 16)) return 0;
    SampleEncoder encoder(type);
    uint64_t line_number = 1;
    size_t pos = nl + 1;
    while (pos <= input.size()) {
      size_t end = input.find('\n', pos);
      if (end == std::string_view::npos) end = input.size();
      ++line_number;
      try {
        if (PackLine(input.substr(pos, end - pos), line_number, encoder) && encoder.bytes().size() != type.sample_bytes) {
          __builtin_trap();
        }
      } catch (const trove::Error&) {
      }
      pos = end + 1;
    }
  } catch (const trove::Error&) {
  }
  return 0;
}
