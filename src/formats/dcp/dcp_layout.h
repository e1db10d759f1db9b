// formats/dcp/dcp_layout.h: the geometry of a torch.distributed.checkpoint (DCP) tensor: the
// chunks (boxes of the global tensor, one per shard a rank saved) that must tile it exactly, and
// the copy of one chunk's elements into the assembled global tensor.
//
// Pure functions over plain values; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trove {

// One chunk's place in its global tensor, in elements: offsets and sizes per dimension.
struct DcpBox {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
};

// The tiling check marks the cells of the grid that every chunk boundary cuts the tensor into:
// a real sharding (dim 0 across ranks, dim 1 across tensor-parallel ranks, both) makes one cell
// per chunk. A grid beyond this many cells (chunks at irregular cuts in every dimension, only
// made by hand) is refused rather than checked slowly; the bitmap is at most 2 MiB.
inline constexpr uint64_t kMaxDcpTilingCells = uint64_t{1} << 24;

// "(0, 4, 2)": a box's offsets or a shape, for messages.
std::string DcpTupleText(const std::vector<int64_t>& values);

// Throws Error(kCorrupt) naming the tensor and the chunk unless the chunks tile `shape` exactly:
// each has the tensor's rank and lies inside it, no two overlap, and together they cover every
// element (a tensor without elements needs no chunk). Error(kLimit) past kMaxDcpTilingCells.
void CheckDcpTiling(std::string_view fqn, const std::vector<int64_t>& shape, const std::vector<DcpBox>& boxes);

// Copies a chunk's elements (C-contiguous, `element_size` bytes each) into the global tensor's
// C-contiguous bytes at the chunk's place. The box must lie inside `shape` (CheckDcpTiling) and
// `global` hold every element of it.
void CopyDcpBox(uint8_t* global, const std::vector<int64_t>& shape, size_t element_size, const DcpBox& box,
                const uint8_t* chunk);

// Where a box's elements start in the global tensor's C-contiguous elements when they are one
// contiguous run of them (a chunk cut along dim 0 only: every later dimension whole, every earlier
// one of size 1; a box without elements anywhere), so that the chunk's bytes are a range of the
// tensor's bytes as they are; nullopt when the box is cut along a later dimension. The box must
// lie inside `shape` (CheckDcpTiling).
std::optional<uint64_t> DcpBoxRun(const std::vector<int64_t>& shape, const DcpBox& box);

}  // namespace trove
