// The tiling check (no hole, no overlap, nothing outside) and the copy of a chunk into place.
#include "formats/dcp/dcp_layout.h"

#include <algorithm>
#include <cstring>

#include "trove/error.h"

namespace trove {

std::string DcpTupleText(const std::vector<int64_t>& values) {
  std::string s = "(";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(values[i]);
  }
  return s + (values.size() == 1 ? ",)" : ")");
}

namespace {

std::string ChunkText(size_t index, const DcpBox& box) {
  return "chunk " + std::to_string(index) + " (offsets " + DcpTupleText(box.offsets) + ", sizes " +
         DcpTupleText(box.sizes) + ")";
}

[[noreturn]] void Bad(std::string_view fqn, const std::string& why) {
  throw Error(ErrorCode::kCorrupt, "tensor '" + std::string(fqn) + "': " + why);
}

}  // namespace

void CheckDcpTiling(std::string_view fqn, const std::vector<int64_t>& shape, const std::vector<DcpBox>& boxes) {
  const size_t rank = shape.size();
  bool empty_tensor = false;
  for (int64_t s : shape) empty_tensor |= s == 0;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const DcpBox& b = boxes[i];
    if (b.offsets.size() != rank || b.sizes.size() != rank) {
      Bad(fqn, ChunkText(i, b) + " has another rank than the tensor's shape " + DcpTupleText(shape));
    }
    for (size_t d = 0; d < rank; ++d) {
      if (b.offsets[d] < 0 || b.sizes[d] < 0 || b.offsets[d] > shape[d] || b.sizes[d] > shape[d] - b.offsets[d]) {
        Bad(fqn, ChunkText(i, b) + " lies outside the tensor's shape " + DcpTupleText(shape));
      }
    }
  }
  if (empty_tensor) return;  // nothing to cover; every chunk is empty and inside
  // The cuts of each dimension: every chunk's start and end, and the tensor's ends.
  std::vector<std::vector<int64_t>> cuts(rank);
  uint64_t cells = 1;
  for (size_t d = 0; d < rank; ++d) {
    cuts[d].reserve(2 * boxes.size() + 2);
    cuts[d].push_back(0);
    cuts[d].push_back(shape[d]);
    for (const DcpBox& b : boxes) {
      cuts[d].push_back(b.offsets[d]);
      cuts[d].push_back(b.offsets[d] + b.sizes[d]);
    }
    std::sort(cuts[d].begin(), cuts[d].end());
    cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
    const uint64_t n = cuts[d].size() - 1;
    if (cells > kMaxDcpTilingCells / std::max<uint64_t>(n, 1)) {
      throw Error(ErrorCode::kLimit, "tensor '" + std::string(fqn) + "': its " + std::to_string(boxes.size()) +
                                         " chunks cut it into more than " + std::to_string(kMaxDcpTilingCells) +
                                         " cells (kMaxDcpTilingCells): too irregular to check");
    }
    cells *= n;
  }
  std::vector<bool> covered(static_cast<size_t>(cells), false);
  std::vector<size_t> lo(rank), hi(rank), at(rank);
  for (size_t i = 0; i < boxes.size(); ++i) {
    const DcpBox& b = boxes[i];
    bool empty = false;
    for (size_t d = 0; d < rank; ++d) {
      lo[d] = static_cast<size_t>(std::lower_bound(cuts[d].begin(), cuts[d].end(), b.offsets[d]) - cuts[d].begin());
      hi[d] = static_cast<size_t>(std::lower_bound(cuts[d].begin(), cuts[d].end(), b.offsets[d] + b.sizes[d]) -
                                  cuts[d].begin());
      empty |= lo[d] == hi[d];
    }
    if (empty) continue;
    at = lo;
    for (;;) {
      uint64_t cell = 0;
      for (size_t d = 0; d < rank; ++d) cell = cell * (cuts[d].size() - 1) + at[d];
      if (covered[cell]) {
        std::vector<int64_t> where(rank);
        for (size_t d = 0; d < rank; ++d) where[d] = cuts[d][at[d]];
        Bad(fqn, ChunkText(i, b) + " overlaps an earlier chunk at " + DcpTupleText(where));
      }
      covered[cell] = true;
      size_t d = rank;
      while (d > 0) {
        --d;
        if (++at[d] < hi[d]) break;
        at[d] = lo[d];
        if (d == 0) goto next_box;
      }
      if (rank == 0) break;
    }
  next_box:;
  }
  for (uint64_t cell = 0; cell < cells; ++cell) {
    if (covered[cell]) continue;
    std::vector<int64_t> where(rank);
    uint64_t rest = cell;
    for (size_t d = rank; d > 0; --d) {
      const uint64_t n = cuts[d - 1].size() - 1;
      where[d - 1] = cuts[d - 1][rest % n];
      rest /= n;
    }
    Bad(fqn, "no chunk holds the elements at " + DcpTupleText(where) + " (the chunks leave a hole)");
  }
}

void CopyDcpBox(uint8_t* global, const std::vector<int64_t>& shape, size_t element_size, const DcpBox& box,
                const uint8_t* chunk) {
  const size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(global, chunk, element_size);
    return;
  }
  for (int64_t s : box.sizes)
    if (s == 0) return;
  // Row by row: a row is the chunk's extent along the last dimension.
  const uint64_t row = static_cast<uint64_t>(box.sizes[rank - 1]) * element_size;
  std::vector<int64_t> at(rank, 0);  // index inside the box, last dimension left at 0
  for (;;) {
    uint64_t element = 0;
    for (size_t d = 0; d < rank; ++d) element = element * static_cast<uint64_t>(shape[d]) + static_cast<uint64_t>(box.offsets[d] + at[d]);
    std::memcpy(global + element * element_size, chunk, row);
    chunk += row;
    size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++at[d] < box.sizes[d]) break;
      at[d] = 0;
    }
  }
}

std::optional<uint64_t> DcpBoxRun(const std::vector<int64_t>& shape, const DcpBox& box) {
  const size_t rank = shape.size();
  size_t cut = 0;  // the first dimension the box does not span with one index
  while (cut < rank && box.sizes[cut] == 1) ++cut;
  for (size_t d = cut + 1; d < rank; ++d) {
    if (box.offsets[d] != 0 || box.sizes[d] != shape[d]) return std::nullopt;
  }
  uint64_t start = 0;
  for (size_t d = 0; d < rank; ++d) start = start * static_cast<uint64_t>(shape[d]) + static_cast<uint64_t>(box.offsets[d]);
  return start;
}

}  // namespace trove
