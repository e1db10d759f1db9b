// The pipeline over sample indices, and the batch loader that gathers samples from the mapping.
#include <algorithm>
#include <cstring>

#include "trove/pipeline.h"

namespace trove::pskd {

void Partition::Validate() const {
  if (world_size == 0) Fail(ErrorCode::kUsage, "a world of 0 ranks");
  if (rank >= world_size) {
    Fail(ErrorCode::kUsage, "rank " + std::to_string(rank) + " of a world of " + std::to_string(world_size) +
                                " (ranks are 0 to " + std::to_string(world_size - 1) + ")");
  }
  if (workers == 0) Fail(ErrorCode::kUsage, "0 loader workers");
  if (worker >= workers) {
    Fail(ErrorCode::kUsage, "worker " + std::to_string(worker) + " of " + std::to_string(workers) +
                                " (workers are 0 to " + std::to_string(workers - 1) + ")");
  }
}

Pipeline::Pipeline(uint64_t sample_count, PipelineSpec spec) : count_(sample_count), spec_(spec) {
  if (spec_.batch == 0) Fail(ErrorCode::kUsage, "batch(B = 0): a batch holds at least one sample");
}

uint64_t Pipeline::batches_per_epoch() const {
  uint64_t full = count_ / spec_.batch;
  return spec_.take ? std::min(full, *spec_.take) : full;
}

uint64_t Pipeline::batches_per_rank(uint64_t world_size) const {
  if (world_size == 0) Fail(ErrorCode::kUsage, "a world of 0 ranks");
  return batches_per_epoch() / world_size;
}

std::vector<uint64_t> Pipeline::BatchPositions(const Partition& part) const {
  part.Validate();
  const uint64_t per_rank = batches_per_rank(part.world_size);
  std::vector<uint64_t> positions;
  positions.reserve(per_rank / part.workers + 1);
  // Rank r's j-th batch is the epoch's batch j*W + r; j*W + r < per_rank*W, which is at most the
  // epoch's batches: no overflow.
  for (uint64_t j = part.worker; j < per_rank; j += part.workers) positions.push_back(j * part.world_size + part.rank);
  return positions;
}

std::vector<uint64_t> Pipeline::Order(uint64_t epoch, const Partition& part) const {
  const std::vector<uint64_t> positions = BatchPositions(part);
  std::vector<uint64_t> order;
  if (spec_.shuffle_seed) {
    order = ShufflePermutation(count_, *spec_.shuffle_seed, epoch);
  } else {
    order.resize(count_);
    for (uint64_t i = 0; i < count_; ++i) order[i] = i;
  }
  const uint64_t b = spec_.batch;
  if (positions.size() == batches_per_epoch()) {  // the whole epoch: its batches in place
    order.resize(positions.size() * b);
    return order;
  }
  std::vector<uint64_t> share;
  share.reserve(positions.size() * b);
  for (uint64_t p : positions) share.insert(share.end(), order.begin() + static_cast<ptrdiff_t>(p * b),
                                            order.begin() + static_cast<ptrdiff_t>((p + 1) * b));
  return share;
}

std::vector<std::vector<uint64_t>> Pipeline::Batches(uint64_t epoch, const Partition& part) const {
  std::vector<uint64_t> order = Order(epoch, part);
  std::vector<std::vector<uint64_t>> batches;
  batches.reserve(order.size() / spec_.batch);
  for (uint64_t start = 0; start < order.size(); start += spec_.batch) {
    batches.emplace_back(order.begin() + static_cast<ptrdiff_t>(start),
                         order.begin() + static_cast<ptrdiff_t>(start + spec_.batch));
  }
  return batches;
}

BatchLoader::BatchLoader(const PskdFile& file, bool check_indices)
    : data_(Dataset::Of(file)), check_indices_(check_indices) {}

BatchLoader::BatchLoader(Dataset data, bool check_indices) : data_(std::move(data)), check_indices_(check_indices) {}

void BatchLoader::Load(std::span<const uint64_t> indices, Batch& batch, std::span<const uint64_t> next) const {
  const SampleType& type = data_.type();
  const uint64_t n = indices.size();
  for (const Leaf& leaf : type.leaves) {
    // A batch is held in memory: its size is bounded by the address space, not by a file claim.
    if (leaf.bytes != 0 && n > (uint64_t{1} << 62) / leaf.bytes) {
      Fail(ErrorCode::kLimit, "a batch of " + std::to_string(n) + " samples does not fit in memory");
    }
  }
  batch.size = n;
  batch.indices.assign(indices.begin(), indices.end());
  batch.leaves.resize(type.leaves.size());
  for (size_t k = 0; k < type.leaves.size(); ++k) batch.leaves[k].resize(n * type.leaves[k].bytes);
  // Shuffled samples are scattered over the file: ask for samples a few positions ahead while
  // copying one, so that memory latency overlaps the copies. Past the end of this batch the
  // positions ahead are the next batch's first samples, when the caller says which they are.
  constexpr uint64_t kPrefetchAhead = 16;
  constexpr uint64_t kCacheLine = 64;
  constexpr uint64_t kPrefetchLines = 16;  // a sample's first 1 KiB: samples are usually smaller
  const uint64_t sample_bytes = type.sample_bytes;
  const uint64_t prefetch_bytes = std::min(sample_bytes, kPrefetchLines * kCacheLine);
  auto prefetch = [&](uint64_t position) {
    const uint64_t index = position < n ? indices[position] : next[position - n];
    if (index >= data_.count()) return;  // reported when it is loaded
    const uint8_t* p = data_.Sample(index).data();
    for (uint64_t at = 0; at < prefetch_bytes; at += kCacheLine) __builtin_prefetch(p + at);
  };
  const uint64_t prefetchable = n + std::min<uint64_t>(next.size(), kPrefetchAhead);
  for (uint64_t b = 0; b < std::min(n, kPrefetchAhead); ++b) prefetch(b);
  for (uint64_t b = 0; b < n; ++b) {
    if (b + kPrefetchAhead < prefetchable) prefetch(b + kPrefetchAhead);
    const uint8_t* sample = data_.Sample(indices[b]).data();
    for (size_t k = 0; k < type.leaves.size(); ++k) {
      const Leaf& leaf = type.leaves[k];
      if (leaf.bytes != 0) std::memcpy(batch.leaves[k].data() + b * leaf.bytes, sample + leaf.offset, leaf.bytes);
    }
  }
  if (!check_indices_) return;
  // Check the gathered (contiguous, cache-hot) leaves; only on a failure look for the sample at fault.
  for (size_t k = 0; k < type.leaves.size(); ++k) {
    const Leaf& leaf = type.leaves[k];
    if (leaf.kind != LeafKind::kIndex || MaxIndex(leaf, batch.leaves[k].data(), n * leaf.elements) < leaf.bound) continue;
    for (uint64_t b = 0; b < n; ++b) data_.CheckIndices(indices[b]);
  }
}

TensorView BatchLoader::LeafTensor(const Batch& batch, size_t leaf_index) const {
  const Leaf& leaf = data_.type().leaves.at(leaf_index);
  TensorView view;
  view.dtype = leaf.dtype();
  view.shape.push_back(static_cast<int64_t>(batch.size));
  for (int64_t d : leaf.shape()) view.shape.push_back(d);
  view.strides = ContiguousStrides(view.shape);
  const std::vector<uint8_t>& bytes = batch.leaves.at(leaf_index);
  view.storage = SharedBytes::CopyOf(bytes.data(), bytes.size());
  view.storage_index = static_cast<int64_t>(leaf_index);
  view.storage_key = "batch/" + std::to_string(leaf_index);
  return view;
}

}  // namespace trove::pskd
