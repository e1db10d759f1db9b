// ChaCha20 (RFC 8439) and the spec's shuffle: Fisher-Yates with Lemire's bounded draws.
#include "trove/pipeline.h"

#include <algorithm>

namespace trove::pskd {
namespace {

// The 128-bit product Lemire's method needs (GCC and Clang; __extension__ keeps -Wpedantic quiet).
__extension__ typedef unsigned __int128 Product128;

// Four independent blocks side by side: word w of the four blocks in one vector (GCC and Clang
// vector extensions, SSE2 or NEON), so every step of a round is one vector operation.
constexpr int kLanes = 4;
typedef uint32_t Lanes __attribute__((vector_size(16)));

inline Lanes Rotl(Lanes v, int n) { return (v << n) | (v >> (32 - n)); }

inline void QuarterRound4(Lanes& a, Lanes& b, Lanes& c, Lanes& d) {
  a += b; d ^= a; d = Rotl(d, 16);
  c += d; b ^= c; b = Rotl(b, 12);
  a += b; d ^= a; d = Rotl(d, 8);
  c += d; b ^= c; b = Rotl(b, 7);
}

// Blocks counter .. counter+3 (the counter wraps as one block at a time would), block after block.
void Blocks4(const std::array<uint32_t, 8>& key, uint32_t counter, const std::array<uint32_t, 3>& nonce,
             uint32_t* out) {
  // "expand 32-byte k" as little-endian words, the key, the counter (per lane), the nonce.
  const uint32_t fixed[16] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u, key[0], key[1], key[2], key[3],
                              key[4],      key[5],      key[6],      key[7],      0,      nonce[0], nonce[1], nonce[2]};
  Lanes init[16];
  for (int w = 0; w < 16; ++w) init[w] = Lanes{fixed[w], fixed[w], fixed[w], fixed[w]};
  init[12] = Lanes{counter, counter + 1, counter + 2, counter + 3};
  Lanes x[16];
  for (int w = 0; w < 16; ++w) x[w] = init[w];
  for (int round = 0; round < 10; ++round) {
    QuarterRound4(x[0], x[4], x[8], x[12]);
    QuarterRound4(x[1], x[5], x[9], x[13]);
    QuarterRound4(x[2], x[6], x[10], x[14]);
    QuarterRound4(x[3], x[7], x[11], x[15]);
    QuarterRound4(x[0], x[5], x[10], x[15]);
    QuarterRound4(x[1], x[6], x[11], x[12]);
    QuarterRound4(x[2], x[7], x[8], x[13]);
    QuarterRound4(x[3], x[4], x[9], x[14]);
  }
  for (int w = 0; w < 16; ++w) x[w] += init[w];
  for (int l = 0; l < kLanes; ++l) {
    for (int w = 0; w < 16; ++w) out[l * 16 + w] = x[w][l];
  }
}

}  // namespace

ChaCha20::ChaCha20(const std::array<uint32_t, 8>& key, const std::array<uint32_t, 3>& nonce, uint32_t counter)
    : key_(key), nonce_(nonce), counter_(counter) {}

std::array<uint32_t, 16> ChaCha20::Block(const std::array<uint32_t, 8>& key, uint32_t counter,
                                         const std::array<uint32_t, 3>& nonce) {
  // One implementation of the block function: the first of four.
  uint32_t four[16 * kLanes];
  Blocks4(key, counter, nonce, four);
  std::array<uint32_t, 16> block;
  std::copy(four, four + 16, block.begin());
  return block;
}

uint32_t ChaCha20::NextWord() {
  static_assert(kBufferedWords == 16 * kLanes);
  if (used_ == kBufferedWords) {
    // 2^32 blocks are 256 GiB of keystream: a shuffle of 2^34 samples; the counter then wraps,
    // which RFC 8439 leaves to the application. Every implementation of the spec wraps the same.
    Blocks4(key_, counter_, nonce_, words_.data());
    counter_ += kLanes;
    used_ = 0;
  }
  return words_[used_++];
}

uint64_t ChaCha20::NextU64() {
  uint64_t low = NextWord();
  uint64_t high = NextWord();
  return low | (high << 32);
}

ChaCha20 ShuffleStream(uint64_t seed, uint64_t epoch) {
  std::array<uint32_t, 8> key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                                 static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32), 0, 0, 0, 0};
  return ChaCha20(key, {0, 0, 0}, 0);
}

uint64_t UniformBelow(ChaCha20& stream, uint64_t bound) {
  Product128 m = static_cast<Product128>(stream.NextU64()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;  // (2^64 - bound) mod bound
    while (low < threshold) {
      m = static_cast<Product128>(stream.NextU64()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<uint64_t> ShufflePermutation(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  ChaCha20 stream = ShuffleStream(seed, epoch);
  for (uint64_t i = n; i-- > 1;) {
    uint64_t j = UniformBelow(stream, i + 1);
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace trove::pskd
