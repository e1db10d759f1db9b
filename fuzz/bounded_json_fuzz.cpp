// libFuzzer target: the JSON files formats read beside their tensors (formats/bounded_json.h: a
// Megatron checkpoint's metadata.json, a model's config.json, a character vocabulary). Any
// trove::Error is a clean refusal; a value accepted is never nested deeper than the bound asked
// for, so walking and printing it (dump recurses per level) stays shallow.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "formats/bounded_json.h"
#include "trove/error.h"

namespace {

int Depth(const nlohmann::json& j, int limit) {
  if (!j.is_structured() || limit < 0) return 0;
  int deepest = 0;
  for (const auto& child : j) deepest = std::max(deepest, Depth(child, limit - 1));
  return deepest + 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int max_depth = 1 + data[0] % 16;  // the first byte picks the bound
  try {
    const nlohmann::json j = trove::ParseBoundedJson(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), max_depth);
    if (Depth(j, max_depth + 1) > max_depth) std::abort();  // nested deeper than the bound
    (void)j.dump();
  } catch (const trove::Error&) {
  }
  return 0;
}
