// libFuzzer target: a DCP checkpoint's .metadata reader (formats/dcp/dcp_metadata.h): the
// allowlisting resolver, the enum-member form of getattr, and the walk from DCP's dataclasses to
// items, chunks and storages; then the tiling check of every tensor it accepts. Seeds: the
// .metadata files tests/python/test_dcp.py makes with torch (it writes them to
// $TROVE_DCP_FUZZ_SEEDS when that is set). Any trove::Error is an expected outcome; a crash,
// hang, sanitizer report or unbounded allocation is a bug.
#include <cstdint>
#include <vector>

#include "formats/dcp/dcp_layout.h"
#include "formats/dcp/dcp_metadata.h"
#include "trove/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const trove::DcpMetadata meta = trove::ParseDcpMetadata(data, size);
    for (const trove::DcpItem& item : meta.items) {
      if (!item.tensor) continue;
      std::vector<trove::DcpBox> boxes;
      for (const trove::DcpChunk& c : item.chunks) boxes.push_back(c.box);
      trove::CheckDcpTiling(item.fqn, item.shape, boxes);
    }
  } catch (const trove::Error&) {
  }
  return 0;
}
