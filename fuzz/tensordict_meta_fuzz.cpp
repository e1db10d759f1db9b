// libFuzzer target: the meta.json loader (size/depth caps, duplicate keys, UTF-8), JSON -> Value
// conversion, and Value -> JSON back, on arbitrary bytes. Any trove::Error is an expected outcome;
// a crash, sanitizer report or timeout is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "formats/tensordict/meta_json.h"
#include "trove/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trove::tensordict;
  try {
    Json json = ParseMetaJson(std::string_view(reinterpret_cast<const char*>(data), size), "meta.json");
    trove::ValueArena arena;
    trove::Value* v = JsonToValue(json, arena);
    if (JsonCanHold(*v)) (void)DumpCompact(ValueToJson(*v, "root"));
  } catch (const trove::Error&) {
  }
  return 0;
}
