// trove/pipeline.h: the training-data pipeline over a .psk.d dataset, identical on every machine.
//
// `stream |> shuffle(seed) |> batch(B) |> take(k)` is evaluated over sample indices: Pipeline
// yields each epoch's batches as index lists (the spec's Pipeline::batches), and BatchLoader
// gathers a batch's samples from the mapped shards into one buffer per leaf with a leading batch
// axis. The shuffle is the spec's exact algorithm (ChaCha20 per RFC 8439 keyed by seed and epoch,
// Fisher-Yates from the top with Lemire's bounded draws), so every implementation agrees. A
// Partition says which of the epoch's batches one process of a data-parallel run reads, and
// which of those one of its loader workers reads (docs/pskd.md, "Sharding").
// ChaCha20 and BatchLoader objects are single-threaded; a Pipeline is an immutable value and the
// PskdFile or Dataset a loader reads must outlive it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "trove/pskd.h"
#include "trove/pskd_dataset.h"
#include "trove/tensor.h"

namespace trove::pskd {

// The ChaCha20 keystream (RFC 8439, 20 rounds), read as little-endian 32-bit words.
class ChaCha20 {
 public:
  ChaCha20(const std::array<uint32_t, 8>& key, const std::array<uint32_t, 3>& nonce, uint32_t counter);
  // The block function: 16 output words for (key, counter, nonce).
  static std::array<uint32_t, 16> Block(const std::array<uint32_t, 8>& key, uint32_t counter,
                                        const std::array<uint32_t, 3>& nonce);
  uint32_t NextWord();
  uint64_t NextU64();  // two consecutive words, low word first

 private:
  std::array<uint32_t, 8> key_;
  std::array<uint32_t, 3> nonce_;
  uint32_t counter_;
  // Four consecutive blocks are computed together (their lanes vectorise): the keystream is the
  // same as one block at a time, at a fraction of the cost of a shuffle's millions of draws.
  static constexpr unsigned kBufferedWords = 64;
  std::array<uint32_t, kBufferedWords> words_{};
  unsigned used_ = kBufferedWords;
};

// The keystream generator for (seed, epoch): key (s mod 2^32, s div 2^32, e mod 2^32, e div 2^32,
// 0, 0, 0, 0), nonce zero, block counter from 0.
ChaCha20 ShuffleStream(uint64_t seed, uint64_t epoch);
// A uniform draw in [0, bound) by Lemire's method (bound >= 1).
uint64_t UniformBelow(ChaCha20& stream, uint64_t bound);
// The permutation of n samples for one epoch.
std::vector<uint64_t> ShufflePermutation(uint64_t n, uint64_t seed, uint64_t epoch);

struct PipelineSpec {
  std::optional<uint64_t> shuffle_seed;  // none: file order
  uint64_t batch = 1;                    // B >= 1
  std::optional<uint64_t> take;          // only the first k batches of each epoch
};

// One process's share of every epoch. The epoch's batches (after shuffle, batch and take) go to
// the ranks in turn, batch i to rank i mod world_size, and the last (batches mod world_size) to
// none, so that every rank takes the same number of steps: at step s the ranks together read the
// epoch's batches s*W .. s*W + W-1, what one process with batches W times larger would read, and a
// run stopped after s steps has read a prefix of the epoch. A rank's own batches go to its loader
// workers in turn, its j-th to worker j mod workers: a loader taking one batch from each worker
// in turn (torch's DataLoader) hands them out in the rank's order.
struct Partition {
  uint64_t rank = 0;
  uint64_t world_size = 1;
  uint64_t worker = 0;
  uint64_t workers = 1;
  // Usage error unless world_size >= 1, rank < world_size, workers >= 1 and worker < workers.
  void Validate() const;
};

class Pipeline {
 public:
  // Usage error when batch is 0.
  Pipeline(uint64_t sample_count, PipelineSpec spec);
  uint64_t batches_per_epoch() const;
  // Each rank's batches an epoch: batches_per_epoch() / world_size (a usage error for 0).
  uint64_t batches_per_rank(uint64_t world_size) const;
  // The positions in the epoch (0 .. batches_per_epoch()-1) of the partition's batches, in order.
  std::vector<uint64_t> BatchPositions(const Partition& part) const;
  // The epoch's batches (the partition's, by default all of them), each `batch` sample indices.
  std::vector<std::vector<uint64_t>> Batches(uint64_t epoch, const Partition& part = {}) const;
  // The same sample indices, flattened.
  std::vector<uint64_t> Order(uint64_t epoch, const Partition& part = {}) const;
  const PipelineSpec& spec() const { return spec_; }

 private:
  uint64_t count_;
  PipelineSpec spec_;
};

// A batch: for each leaf of the sample type, the leaf of every sample stacked under a new leading
// axis, in the leaf's on-disk element type (little-endian as on disk).
struct Batch {
  uint64_t size = 0;                        // samples in the batch
  std::vector<std::vector<uint8_t>> leaves;  // leaf k: size * leaf.bytes bytes
  std::vector<uint64_t> indices;
};

class BatchLoader {
 public:
  // `file` must outlive the loader. E9001 for a params file.
  explicit BatchLoader(const PskdFile& file, bool check_indices = true);
  // Over a dataset's global indices (its shards are mapped as the batches reach them).
  explicit BatchLoader(Dataset data, bool check_indices = true);
  // Gathers the samples into `batch` (its buffers are reused between calls, so a training loop
  // holds one batch of memory). E9003 for an index beyond the count, E9004 for an index value
  // at or above its bound when check_indices. `next`, when known, are the indices the caller will
  // load next: their first samples are fetched into the cache while this batch's last are copied.
  void Load(std::span<const uint64_t> indices, Batch& batch, std::span<const uint64_t> next = {}) const;
  // Leaf k of a loaded batch as a tensor [batch, dims...] viewing a copy of the batch's buffer.
  TensorView LeafTensor(const Batch& batch, size_t leaf) const;

 private:
  Dataset data_;
  bool check_indices_;
};

}  // namespace trove::pskd
