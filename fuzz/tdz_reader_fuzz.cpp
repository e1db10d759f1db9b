// libFuzzer target: the .tdz reader on arbitrary bytes (zip layer, then every level of the tree:
// meta.json, leaves, nested tensors, lazy stacks, sidecars), plus a walk over every tensor's
// bytes so that a view past its storage would be caught by ASan. Errors are expected outcomes.
#include <cstddef>
#include <cstdint>

#include "formats/tensordict/tensordict_reader.h"
#include "trove/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    trove::Document doc = trove::ReadTdzBytes(trove::SharedBytes::CopyOf(data, size), "fuzz.tdz", {});
    uint64_t sum = 0;
    for (const auto& t : doc.tensors)
      t.view->ForEachChunk([&](const uint8_t* p, size_t n) {
        for (size_t i = 0; i < n; i += 61) sum += p[i];
        if (n) sum += p[n - 1];
      });
    if (sum == 0xdeadbeef) return 1;  // keep the walk from being optimised out
  } catch (const trove::Error&) {
  }
  return 0;
}
