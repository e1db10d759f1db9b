// libFuzzer target: shard manifests (trove/pskd_dataset.h), the JSON listing a dataset's .psk.d
// shards. Any trove::Error is a clean refusal; every path accepted must be relative and made of
// plain names (no "", ".", "..", backslash or NUL), whatever the bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "trove/pskd_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const std::string text(reinterpret_cast<const char*>(data), size);
    for (const std::string& name : trove::pskd::ParseShardManifest(text)) {
      if (name.empty() || name.front() == '/' || name.find('\\') != std::string::npos ||
          name.find('\0') != std::string::npos || name.find("//") != std::string::npos || name.back() == '/' ||
          name == "." || name == ".." || name.starts_with("./") || name.starts_with("../") ||
          name.find("/./") != std::string::npos || name.find("/../") != std::string::npos ||
          name.ends_with("/.") || name.ends_with("/..")) {
        std::abort();  // a path the manifest rules refuse was accepted
      }
    }
  } catch (const trove::Error&) {
  }
  return 0;
}
