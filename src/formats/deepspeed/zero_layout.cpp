// DeepSpeed ZeRO partition arithmetic (formats/deepspeed/zero_layout.h).
#include "formats/deepspeed/zero_layout.h"

#include <algorithm>

#include "trove/error.h"

namespace trove {
namespace {

// Sums saturate here: a declared shape of 2^40 elements against small partitions is a mismatch,
// never an overflow that wraps into agreement.
constexpr uint64_t kSaturated = uint64_t{1} << 62;

uint64_t Saturate(uint64_t x) { return std::min(x, kSaturated); }

uint64_t AddSaturating(uint64_t a, uint64_t b) {
  a = Saturate(a);
  b = Saturate(b);
  return a >= kSaturated - b ? kSaturated : a + b;
}

uint64_t AlignUp(uint64_t x, uint64_t to) { return x >= kSaturated ? kSaturated : (x + to - 1) / to * to; }

// Appends the pieces of `count` elements at `offset` of rank `rank`'s flat buffer made of
// `tensors` (their sizes, concatenated), split where one tensor ends.
void AppendRankRange(std::vector<ZeroPiece>& out, size_t rank, const std::vector<uint64_t>& tensors, uint64_t offset,
                     uint64_t count) {
  size_t g = 0;
  while (count > 0) {
    while (g < tensors.size() && offset >= tensors[g]) offset -= tensors[g++];
    if (g == tensors.size()) Fail(ErrorCode::kCorrupt, "rank " + std::to_string(rank) + "'s partition is too short");
    const uint64_t n = std::min(count, tensors[g] - offset);
    out.push_back({rank, g, offset, n});
    offset += n;
    count -= n;
  }
}

}  // namespace

std::vector<std::vector<ZeroPiece>> ZeroStage12Pieces(const std::vector<std::vector<ZeroParam>>& groups,
                                                      const std::vector<std::vector<uint64_t>>& partitions) {
  const size_t world = partitions.size();
  if (world == 0) Fail(ErrorCode::kCorrupt, "no rank partitions");
  for (size_t r = 0; r < world; ++r) {
    if (partitions[r].size() != groups.size()) {
      Fail(ErrorCode::kCorrupt, "rank " + std::to_string(r) + " holds " + std::to_string(partitions[r].size()) +
                                    " fp32 partitions, param_shapes lists " + std::to_string(groups.size()) +
                                    " param groups");
    }
  }
  std::vector<std::vector<ZeroPiece>> out;
  for (size_t g = 0; g < groups.size(); ++g) {
    // DeepSpeed saves each partition without its alignment padding, which lies at the flat
    // buffer's end: every rank's partition holds per_rank elements but the last rank's, which may
    // hold fewer (the bf16 optimizer and older files keep the padding: all equal).
    const uint64_t per_rank = partitions[0][g];
    for (size_t r = 1; r < world; ++r) {
      if (partitions[r][g] != per_rank && !(r + 1 == world && partitions[r][g] < per_rank)) {
        Fail(ErrorCode::kCorrupt, "param group " + std::to_string(g) + ": rank " + std::to_string(r) +
                                      "'s partition holds " + std::to_string(partitions[r][g]) +
                                      " elements, rank 0's " + std::to_string(per_rank));
      }
    }
    uint64_t declared = 0;
    for (const ZeroParam& p : groups[g]) declared = AddSaturating(declared, p.numel);
    // Each size is a tensor's numel, bounded by its file: the sum cannot overflow.
    const uint64_t flat = per_rank * (world - 1) + partitions[world - 1][g];
    // zero_to_fp32's check: the flat buffer is the params padded to a multiple of 2 * world
    // (older DeepSpeed: of world; the aligned comparison accepts both).
    const uint64_t align = 2 * world;
    if (declared > flat || AlignUp(declared, align) != AlignUp(flat, align)) {
      Fail(ErrorCode::kCorrupt, "param group " + std::to_string(g) + ": its params' shapes declare " +
                                    (declared >= kSaturated ? std::string("more than 2^62") : std::to_string(declared)) +
                                    " elements, its " + std::to_string(world) + " partitions (rank 0's of " +
                                    std::to_string(per_rank) + ") hold " + std::to_string(flat) +
                                    " (padding to a multiple of " + std::to_string(align) + " at most)");
    }
    uint64_t offset = 0;
    for (const ZeroParam& p : groups[g]) {
      std::vector<ZeroPiece> pieces;
      uint64_t at = offset, left = p.numel;
      while (left > 0) {
        const size_t r = static_cast<size_t>(at / per_rank);
        const uint64_t in = at % per_rank;
        const uint64_t n = std::min(left, per_rank - in);
        pieces.push_back({r, g, in, n});
        at += n;
        left -= n;
      }
      offset += p.numel;
      out.push_back(std::move(pieces));
    }
  }
  return out;
}

std::vector<std::vector<ZeroPiece>> ZeroStage3Pieces(const std::vector<ZeroParam>& params,
                                                     const std::vector<std::vector<uint64_t>>& partitions) {
  const uint64_t world = partitions.size();
  if (world == 0) Fail(ErrorCode::kCorrupt, "no rank partitions");
  uint64_t declared = 0;
  for (const ZeroParam& p : params) declared = AddSaturating(declared, (Saturate(p.numel) + world - 1) / world);
  for (size_t r = 0; r < world; ++r) {
    uint64_t held = 0;
    for (uint64_t n : partitions[r]) held = AddSaturating(held, n);
    if (held != declared) {
      Fail(ErrorCode::kCorrupt, "rank " + std::to_string(r) + "'s fp32 partitions hold " + std::to_string(held) +
                                    " elements, the params' shapes declare " +
                                    (declared >= kSaturated ? std::string("more than 2^62") : std::to_string(declared)) +
                                    " per rank (ceil(numel / " + std::to_string(world) + ") each)");
    }
  }
  std::vector<std::vector<ZeroPiece>> out;
  uint64_t offset = 0;
  for (const ZeroParam& p : params) {
    const uint64_t share = (Saturate(p.numel) + world - 1) / world;
    std::vector<ZeroPiece> pieces;
    for (size_t r = 0; r < world; ++r) {
      const uint64_t start = r * share;
      if (start >= p.numel) break;
      AppendRankRange(pieces, r, partitions[r], offset, std::min(share, p.numel - start));
    }
    offset += share;
    out.push_back(std::move(pieces));
  }
  return out;
}

}  // namespace trove
