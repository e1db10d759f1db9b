// formats/dcp/dcp_metadata.h: a torch.distributed.checkpoint (DCP) `.metadata` file read as data.
//
// `.metadata` is a plain pickle.dump of DCP's Metadata dataclass: every item of the state dict by
// its fully qualified name (a tensor's dtype, global shape and chunks; or a torch.save'd object),
// and where each chunk's bytes are (file, offset, length). It is read by trove's unpickler with an
// allowlist of exactly the DCP classes and torch names it holds (docs/dcp.md, docs/security.md);
// every other global is refused by name. Nothing is imported or called.
// ParseDcpMetadata is a pure function of its bytes; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/dcp/dcp_layout.h"
#include "trove/dtype.h"
#include "trove/findings.h"

namespace trove {

// The largest .metadata read: it holds a few hundred bytes per chunk, so 1 GiB is millions of
// chunks; the cap bounds the one read of it.
inline constexpr uint64_t kMaxDcpMetadataBytes = uint64_t{1} << 30;
// Items (state-dict entries) and chunks one checkpoint may declare, checked as they are read
// (the unpickler's own caps bound the tree before): a 400B-parameter model's model and optimizer
// state over thousands of ranks stays below. Each costs about 200 bytes here.
inline constexpr uint64_t kMaxDcpItems = uint64_t{1} << 20;
inline constexpr uint64_t kMaxDcpChunks = uint64_t{1} << 22;
// Coordinates (one offset and one size per dimension of each chunk) one checkpoint may declare:
// a chunk's torch.Size can be shared through the pickle's memo, so its copies here would
// otherwise cost up to kMaxDcpChunks x kMaxTensorRank x 16 bytes; this bounds them to 256 MiB.
inline constexpr uint64_t kMaxDcpChunkCoordinates = uint64_t{1} << 24;

// Where an item's bytes are: a byte range of a file of the checkpoint's directory.
struct DcpStorage {
  std::string file;  // relative to the directory, as the metadata says (checked when opened)
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct DcpChunk {
  DcpBox box;
  DcpStorage storage;
};

struct DcpItem {
  std::string fqn;
  bool tensor = false;  // a tensor (chunks) or a torch.save'd object (object)
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  bool requires_grad = false;
  std::vector<DcpChunk> chunks;
  DcpStorage object;
};

struct DcpMetadata {
  // "torch.distributed.checkpoint" (torch >= 2.0) or "torch.distributed._shard.checkpoint" (1.13).
  std::string module;
  std::string version;  // Metadata.version when the writer set one
  std::vector<DcpItem> items;  // in the metadata's order
  uint64_t chunks = 0;
};

// Parses `.metadata` bytes. Throws Error(kRefused) naming any global outside the allowlist,
// Error(kCorrupt) for a structure DCP does not write (naming the item), Error(kUnsupported) for
// what trove does not read (a layout other than strided, stream transforms such as zstd),
// Error(kLimit) past the caps above.
DcpMetadata ParseDcpMetadata(const uint8_t* data, uint64_t size);

// What torch's FileSystemReader would run of a `.metadata` (it unpickles it without restriction):
// every global graded by the same allowlist (pickle/pickle_scan.h), as findings under `entry`.
void ScanDcpMetadata(CheckReport& report, const std::string& entry, const uint8_t* data, uint64_t size);

}  // namespace trove
