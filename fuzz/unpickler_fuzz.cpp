// libFuzzer target for the data-only unpickler: every input must load or end in a trove::Error,
// under the strict, default and permissive DataResolver, and the resulting tree (shared, cyclic or
// deep) must be walkable by CollectTensors. What the default and permissive readers accept, the
// pickler must write and the reader load again. Anything else escaping is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "trove/document.h"
#include "trove/error.h"
#include "trove/pickler.h"
#include "trove/unpickler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (trove::PicklePolicy policy :
       {trove::PicklePolicy::kStrict, trove::PicklePolicy::kDefault, trove::PicklePolicy::kPermissive}) {
    trove::ValueArena arena;
    trove::DataResolver resolver(policy);
    trove::Unpickler unpickler(data, size, arena, resolver, 7);
    trove::Value* root = nullptr;
    try {
      root = unpickler.Load();
      if (unpickler.consumed() > size) __builtin_trap();
      trove::CollectTensors(root);
    } catch (const trove::Error& e) {
      // Every unpickler error names its offset.
      if (e.message().rfind("@ ", 0) != 0 && e.code() != trove::ErrorCode::kLimit) __builtin_trap();
      continue;
    }
    if (policy == trove::PicklePolicy::kStrict) continue;
    std::string again;
    try {
      again = trove::PickleValue(root);
    } catch (const trove::Error& e) {
      // Names that are not module.name (STACK_GLOBAL of odd strings) cannot be written, nor
      // tensors (numpy arrays read as tensors) without a format's hook.
      if (e.code() != trove::ErrorCode::kUsage && e.code() != trove::ErrorCode::kUnsupported) __builtin_trap();
      continue;
    }
    trove::ValueArena arena2;
    trove::DataResolver resolver2(trove::PicklePolicy::kPermissive);
    trove::Unpickler reload(reinterpret_cast<const uint8_t*>(again.data()), again.size(), arena2, resolver2);
    try {
      reload.Load();
    } catch (const trove::Error& e) {
      if (e.code() != trove::ErrorCode::kLimit) __builtin_trap();
    }
  }
  return 0;
}
