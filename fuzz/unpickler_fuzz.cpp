// libFuzzer target for the data-only unpickler: every input must load or end in a trove::Error,
// under the strict and the permissive DataResolver, and the resulting tree (shared, cyclic or
// deep) must be walkable by CollectTensors. Anything else escaping is a finding.
#include <cstddef>
#include <cstdint>

#include "trove/document.h"
#include "trove/error.h"
#include "trove/unpickler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (bool permissive : {false, true}) {
    trove::ValueArena arena;
    trove::DataResolver resolver(permissive);
    trove::Unpickler unpickler(data, size, arena, resolver, 7);
    try {
      trove::Value* root = unpickler.Load();
      if (unpickler.consumed() > size) __builtin_trap();
      trove::CollectTensors(root);
    } catch (const trove::Error& e) {
      // Every unpickler error names its offset.
      if (e.message().rfind("@ ", 0) != 0 && e.code() != trove::ErrorCode::kLimit) __builtin_trap();
    }
  }
  return 0;
}
