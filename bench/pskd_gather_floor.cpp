// The anchor for shuffled batch reading: the same shuffled order over the same mapped .psk.d
// file, each sample copied into a batch buffer with one memcpy and nothing else (no index
// checks, no per-leaf layout, no prefetching). What is left is what the memory system charges
// for touching samples at random addresses; `make bench` times `presk data batches --read`
// next to it. Usage: pskd_gather_floor FILE.psk.d BATCH SEED
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "trove/error.h"
#include "trove/pipeline.h"
#include "trove/pskd.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: pskd_gather_floor FILE.psk.d BATCH SEED\n");
    return 2;
  }
  try {
    trove::pskd::PskdFile file = trove::pskd::PskdFile::Open(argv[1]);
    const uint64_t batch = std::strtoull(argv[2], nullptr, 10);
    const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
    const uint64_t count = file.count();
    const uint64_t sample_bytes = file.type().sample_bytes;
    const uint8_t* first = file.Sample(0).data();
    std::vector<uint64_t> order = trove::pskd::ShufflePermutation(count, seed, 0);
    std::vector<uint8_t> buffer(batch * sample_bytes);
    uint64_t checksum = 0;
    for (uint64_t start = 0; start + batch <= count; start += batch) {
      for (uint64_t b = 0; b < batch; ++b) {
        std::memcpy(buffer.data() + b * sample_bytes, first + order[start + b] * sample_bytes, sample_bytes);
      }
      checksum += buffer.front() + buffer.back();
    }
    std::printf("checksum %llu\n", static_cast<unsigned long long>(checksum));
  } catch (const trove::Error& e) {
    std::fprintf(stderr, "pskd_gather_floor: %s\n", e.what());
    return 2;
  }
  return 0;
}
