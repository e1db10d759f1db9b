// The pipeline: ChaCha20 against RFC 8439, the shuffle against hand-computed permutations, and
// batch/take over sample indices.
#include <algorithm>

#include "pskd_test_support.h"
#include "trove/pipeline.h"

namespace trove::pskd {
namespace {

// RFC 8439 section 2.3.2: key 00..1f, nonce 00 00 00 09 00 00 00 4a 00 00 00 00, counter 1.
TEST(ChaCha20Test, Rfc8439BlockFunctionVector) {
  std::array<uint32_t, 8> key{};
  for (uint32_t i = 0; i < 8; ++i) {
    key[i] = (4 * i) | ((4 * i + 1) << 8) | ((4 * i + 2) << 16) | ((4 * i + 3) << 24);
  }
  std::array<uint32_t, 3> nonce = {0x09000000, 0x4a000000, 0x00000000};
  std::array<uint32_t, 16> expected = {0xe4e7f110, 0x15593bd1, 0x1fdd0f50, 0xc47120a3, 0xc7f4d1c7, 0x0368c033,
                                       0x9aaa2204, 0x4e6cd4c3, 0x466482d2, 0x09aa9f07, 0x05d7c214, 0xa2028bd9,
                                       0xd19c12b5, 0xb94e16de, 0xe883d0cb, 0x4e3c50a2};
  EXPECT_EQ(ChaCha20::Block(key, 1, nonce), expected);
  // The stream reads the same words in order.
  ChaCha20 stream(key, nonce, 1);
  for (uint32_t w : expected) EXPECT_EQ(stream.NextWord(), w);
}

// RFC 8439 appendix A.1, test vector #1: the all-zero key, nonce and counter 0 — which is the
// shuffle key of seed 0, epoch 0. Keystream bytes 76 b8 e0 ad a0 f1 3d 90 40 5d 6a e5 53 86 bd 28.
TEST(ChaCha20Test, SeedZeroEpochZeroIsRfcVectorA1) {
  ChaCha20 s = ShuffleStream(0, 0);
  EXPECT_EQ(s.NextU64(), 0x903df1a0ade0b876u);  // low word first
  EXPECT_EQ(s.NextU64(), 0x28bd8653e56a5d40u);
  // The block counter advances: words 16.. are block 1, A.1 test vector #2
  // (keystream 9f 07 e7 be 55 51 38 7a ... 4b 79 4d 6f), computed in the stream's second lane.
  ChaCha20 t = ShuffleStream(0, 0);
  for (int i = 0; i < 16; ++i) t.NextWord();
  EXPECT_EQ(t.NextWord(), 0xbee7079fu);
  EXPECT_EQ(t.NextWord(), 0x7a385155u);
  for (int i = 18; i < 31; ++i) t.NextWord();
  EXPECT_EQ(t.NextWord(), 0x6f4d794bu);
  EXPECT_EQ(ChaCha20::Block({}, 1, {0, 0, 0})[15], 0x6f4d794bu);
}

// The stream computes several blocks at once; its words must still be block 0, 1, 2, ... in
// order, and the 32-bit counter must wrap exactly as one block at a time would.
TEST(ChaCha20Test, StreamIsConsecutiveBlocksAcrossBuffersAndCounterWrap) {
  const std::array<uint32_t, 8> key = {1, 2, 3, 4, 5, 6, 0xdeadbeefu, 0xffffffffu};
  const std::array<uint32_t, 3> nonce = {7, 8, 9};
  for (uint32_t start : {0u, 3u, 0xfffffffdu}) {
    ChaCha20 stream(key, nonce, start);
    for (uint32_t b = 0; b < 11; ++b) {
      const auto block = ChaCha20::Block(key, start + b, nonce);  // unsigned: wraps past 2^32 - 1
      for (int w = 0; w < 16; ++w) ASSERT_EQ(stream.NextWord(), block[w]) << "start " << start << " block " << b;
    }
  }
}

// By hand, from the A.1 keystream: n = 3, seed 0, epoch 0.
//   i = 2: x = 0x903df1a0ade0b876, x*3 = 1*2^64 + low (low >= 3): j = 1, swap 2,1 -> [0, 2, 1]
//   i = 1: x = 0x28bd8653e56a5d40 < 2^63, x*2 < 2^64: j = 0, swap 1,0 -> [2, 0, 1]
TEST(ShuffleTest, HandComputedPermutations) {
  EXPECT_EQ(ShufflePermutation(3, 0, 0), (std::vector<uint64_t>{2, 0, 1}));
  // n = 2: x*2 of the first draw has high word 1 (top bit set): j = 1, no swap.
  EXPECT_EQ(ShufflePermutation(2, 0, 0), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(ShufflePermutation(1, 5, 0), (std::vector<uint64_t>{0}));
  EXPECT_TRUE(ShufflePermutation(0, 5, 0).empty());
}

// Computed independently (Python, the `cryptography` package's ChaCha20 and the spec's steps).
TEST(ShuffleTest, IndependentReferencePermutations) {
  EXPECT_EQ(ShufflePermutation(4, 0, 0), (std::vector<uint64_t>{1, 3, 0, 2}));
  EXPECT_EQ(ShufflePermutation(10, 0, 0), (std::vector<uint64_t>{2, 6, 4, 7, 8, 3, 9, 0, 1, 5}));
  EXPECT_EQ(ShufflePermutation(10, 1, 0), (std::vector<uint64_t>{1, 0, 7, 6, 8, 3, 9, 2, 4, 5}));
  EXPECT_EQ(ShufflePermutation(10, 1, 1), (std::vector<uint64_t>{8, 1, 5, 2, 4, 3, 6, 0, 9, 7}));
  EXPECT_EQ(ShufflePermutation(24, 7, 0), (std::vector<uint64_t>{11, 12, 19, 9, 15, 22, 23, 8, 10, 20, 14, 17, 0, 2,
                                                                  13, 4, 16, 5, 7, 18, 21, 3, 1, 6}));
  // Seed and epoch above 2^32 use their high words.
  EXPECT_EQ(ShufflePermutation(5, (uint64_t{1} << 32) + 3, (uint64_t{1} << 33) + 5),
            (std::vector<uint64_t>{4, 2, 0, 3, 1}));
}

TEST(ShuffleTest, LemireIsUniformEnoughAndInRange) {
  ChaCha20 s = ShuffleStream(42, 0);
  std::vector<int> hist(7, 0);
  for (int i = 0; i < 70000; ++i) {
    uint64_t v = UniformBelow(s, 7);
    ASSERT_LT(v, 7u);
    ++hist[v];
  }
  for (int h : hist) EXPECT_NEAR(h, 10000, 500);
  EXPECT_EQ(UniformBelow(s, 1), 0u);
}

TEST(PipelineTest, BatchDropsTheIncompleteGroupAndTakeLimits) {
  Pipeline plain(10, {std::nullopt, 3, std::nullopt});
  EXPECT_EQ(plain.batches_per_epoch(), 3u);
  EXPECT_EQ(plain.Batches(0), (std::vector<std::vector<uint64_t>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}));
  EXPECT_EQ(plain.Batches(5), plain.Batches(0));  // no shuffle: file order every epoch
  Pipeline taken(10, {std::nullopt, 3, 2});
  EXPECT_EQ(taken.Batches(0).size(), 2u);
  Pipeline shuffled(10, {1, 4, std::nullopt});
  EXPECT_EQ(shuffled.Batches(0), (std::vector<std::vector<uint64_t>>{{1, 0, 7, 6}, {8, 3, 9, 2}}));
  EXPECT_EQ(shuffled.Batches(1), (std::vector<std::vector<uint64_t>>{{8, 1, 5, 2}, {4, 3, 6, 0}}));
  Pipeline big_take(10, {std::nullopt, 4, 100});
  EXPECT_EQ(big_take.batches_per_epoch(), 2u);
  Pipeline empty(2, {std::nullopt, 3, std::nullopt});
  EXPECT_TRUE(empty.Batches(0).empty());
  EXPECT_THROW(Pipeline(10, {std::nullopt, 0, std::nullopt}), Error);
}

// 10 batches of 3 over 4 ranks: rank r reads the epoch's batches r, r + 4; batches 8 and 9 go to
// no rank. The ranks' shares are disjoint, cover the epoch minus its last 10 mod 4 batches, and at
// step s the ranks read batches 4s .. 4s + 3 together.
TEST(PartitionTest, BatchIToRankIModWorldSizeRemainderDropped) {
  Pipeline p(31, {5, 3, std::nullopt});
  const auto all = p.Batches(2);
  ASSERT_EQ(all.size(), 10u);
  EXPECT_EQ(p.Batches(2, {0, 1, 0, 1}), all);  // W = 1: today's batches
  EXPECT_EQ(p.Order(2, {0, 1, 0, 1}), p.Order(2));
  EXPECT_EQ(p.batches_per_rank(4), 2u);
  std::vector<uint64_t> seen;
  for (uint64_t r = 0; r < 4; ++r) {
    const auto mine = p.Batches(2, {r, 4, 0, 1});
    ASSERT_EQ(mine.size(), 2u);
    EXPECT_EQ(mine[0], all[r]);
    EXPECT_EQ(mine[1], all[4 + r]);
    EXPECT_EQ(p.BatchPositions({r, 4, 0, 1}), (std::vector<uint64_t>{r, 4 + r}));
    for (const auto& b : mine) seen.insert(seen.end(), b.begin(), b.end());
  }
  std::vector<uint64_t> expected;
  for (size_t i = 0; i < 8; ++i) expected.insert(expected.end(), all[i].begin(), all[i].end());
  std::sort(seen.begin(), seen.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);
  EXPECT_TRUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
}

TEST(PartitionTest, TakeComesBeforeTheSplit) {
  Pipeline p(100, {std::nullopt, 2, 5});
  EXPECT_EQ(p.Batches(0, {0, 2, 0, 1}), (std::vector<std::vector<uint64_t>>{{0, 1}, {4, 5}}));
  EXPECT_EQ(p.Batches(0, {1, 2, 0, 1}), (std::vector<std::vector<uint64_t>>{{2, 3}, {6, 7}}));
  // Fewer batches than ranks: every rank takes no step (none takes one more than another).
  Pipeline few(100, {std::nullopt, 10, 3});
  for (uint64_t r = 0; r < 4; ++r) EXPECT_TRUE(few.Batches(0, {r, 4, 0, 1}).empty());
}

// A rank's batches go to its workers in turn; taking one batch from each worker in turn (what
// torch's DataLoader does) gives back the rank's order, whatever the worker count.
TEST(PartitionTest, WorkersSplitTheRankShareRoundRobin) {
  Pipeline p(1000, {9, 4, 23});
  for (uint64_t workers : {1u, 2u, 3u, 4u, 7u, 8u}) {
    const auto rank = p.Batches(1, {1, 3, 0, 1});
    ASSERT_EQ(rank.size(), 7u);
    std::vector<std::vector<std::vector<uint64_t>>> shares;
    for (uint64_t w = 0; w < workers; ++w) shares.push_back(p.Batches(1, {1, 3, w, workers}));
    std::vector<std::vector<uint64_t>> merged;
    for (size_t round = 0; merged.size() < rank.size(); ++round) {
      for (uint64_t w = 0; w < workers; ++w)
        if (round < shares[w].size()) merged.push_back(shares[w][round]);
    }
    EXPECT_EQ(merged, rank) << workers << " workers";
  }
}

TEST(PartitionTest, InvalidPartitionsAreUsageErrors) {
  Pipeline p(10, {std::nullopt, 1, std::nullopt});
  for (Partition bad : {Partition{0, 0, 0, 1}, Partition{2, 2, 0, 1}, Partition{0, 1, 0, 0}, Partition{0, 1, 3, 3}}) {
    try {
      p.Batches(0, bad);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUsage) << e.message();
    }
  }
}

TEST(BatchLoaderTest, GathersLeavesWithALeadingBatchAxis) {
  std::string bytes = testing::HeaderBytes(2, "(idx[300][2], ℝ[])", 3, {0, 1});
  // Sample i: indices (10i, 10i+1) as u16, real i + 0.5 as f32.
  for (int i = 0; i < 3; ++i) {
    uint16_t a = static_cast<uint16_t>(10 * i), b = static_cast<uint16_t>(10 * i + 1);
    float r = static_cast<float>(i) + 0.5f;
    bytes.append(reinterpret_cast<const char*>(&a), 2);
    bytes.append(reinterpret_cast<const char*>(&b), 2);
    bytes.append(reinterpret_cast<const char*>(&r), 4);
  }
  PskdFile file = PskdFile::FromBytes(SharedBytes::CopyOf(bytes.data(), bytes.size()), "mem");
  BatchLoader loader(file);
  Batch batch;
  std::vector<uint64_t> indices = {2, 0};
  loader.Load(indices, batch);
  ASSERT_EQ(batch.leaves.size(), 2u);
  ASSERT_EQ(batch.leaves[0].size(), 2u * 4u);
  const uint16_t* idx = reinterpret_cast<const uint16_t*>(batch.leaves[0].data());
  EXPECT_EQ(idx[0], 20);
  EXPECT_EQ(idx[1], 21);
  EXPECT_EQ(idx[2], 0);
  EXPECT_EQ(idx[3], 1);
  TensorView reals = loader.LeafTensor(batch, 1);
  EXPECT_EQ(reals.dtype, DType::kFloat32);
  EXPECT_EQ(reals.shape, (std::vector<int64_t>{2}));
  reals.Validate();
  EXPECT_EQ(LoadReal(reals.first_element(), Encoding::kF32), 2.5);
  TensorView ids = loader.LeafTensor(batch, 0);
  EXPECT_EQ(ids.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ids.strides, (std::vector<int64_t>{2, 1}));
  std::vector<uint64_t> beyond = {3};
  EXPECT_PSKD_ERROR(loader.Load(beyond, batch), PskdCode::kTruncated);
}

TEST(BatchLoaderTest, AnIndexAtItsBoundIsE9004NamingTheSample) {
  std::string bytes = testing::HeaderBytes(1, "idx[5][40]", 3) + std::string(40, '\1') + std::string(40, '\4');
  bytes.append(39, '\0');
  bytes += '\5';
  PskdFile file = PskdFile::FromBytes(SharedBytes::CopyOf(bytes.data(), bytes.size()), "mem");
  BatchLoader loader(file);
  Batch batch;
  std::vector<uint64_t> good = {1, 0};
  loader.Load(good, batch);
  EXPECT_EQ(batch.leaves[0][40], 1);
  std::vector<uint64_t> bad = {0, 2};
  try {
    loader.Load(bad, batch);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "mem: E9004: sample 2, leaf 0, element 39: 5 is not below 5");
    EXPECT_EQ(e.spec_code(), 9004);
    EXPECT_EQ(e.reason(), "sample 2, leaf 0, element 39: 5 is not below 5");
    EXPECT_EQ(e.file(), "mem");
  }
  BatchLoader unchecked(file, false);
  unchecked.Load(bad, batch);
  EXPECT_EQ(batch.leaves[0][79], 5);
}

}  // namespace
}  // namespace trove::pskd
