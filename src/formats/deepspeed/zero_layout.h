// formats/deepspeed/zero_layout.h: where each parameter's fp32 master elements lie in a DeepSpeed
// ZeRO checkpoint's rank partitions (the arithmetic of DeepSpeed's zero_to_fp32), and the checks
// that the partitions' sizes agree with the parameters' shapes before anything is read.
//
// Stage 1/2: the partitions of a param group, concatenated in rank order, form the group's flat
// buffer (padded at its end to a multiple of 2 * world size); its params lie in it back to back.
// Stage 3: every param is split across the ranks: rank r holds ceil(numel / world) elements of
// it (the last ranks' tails padding), params back to back in each rank's flat buffer.
//
// Pure functions over plain values; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trove {

struct ZeroParam {
  std::string name;
  uint64_t numel = 0;
};

// A run of a parameter's elements: `count` elements at element `offset` of rank `rank`'s
// partition tensor `group` (its `group`-th fp32 tensor).
struct ZeroPiece {
  size_t rank = 0;
  size_t group = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
  bool operator==(const ZeroPiece&) const = default;
};

// Stage 1/2. `groups[g]`: group g's params in param_shapes order; `partitions[r][g]`: the
// elements of rank r's partition of group g. Returns every param's pieces, in the params' order
// (group by group), their elements in order. The last rank's partition may be shorter (DeepSpeed
// strips the alignment padding before saving). Throws Error(kCorrupt) naming the group, rank or
// param when a rank's group count differs, ranks' partitions of a group differ in size, or the
// group's params do not fill its flat buffer up to its alignment padding.
std::vector<std::vector<ZeroPiece>> ZeroStage12Pieces(const std::vector<std::vector<ZeroParam>>& groups,
                                                      const std::vector<std::vector<uint64_t>>& partitions);

// Stage 3. `params`: every param in param_shapes order (groups concatenated); `partitions[r]`:
// the sizes of rank r's fp32 flat tensors (its groups, concatenated in that order). A piece never
// straddles two tensors (it is split). Throws Error(kCorrupt) when a rank's total differs from the
// sum over params of ceil(numel / world).
std::vector<std::vector<ZeroPiece>> ZeroStage3Pieces(const std::vector<ZeroParam>& params,
                                                     const std::vector<std::vector<uint64_t>>& partitions);

}  // namespace trove
