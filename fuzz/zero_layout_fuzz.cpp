// libFuzzer target: the DeepSpeed ZeRO partition arithmetic (formats/deepspeed/zero_layout.h).
// The input spells a stage, a world size, param groups of params (numels, some shifted far past
// any file) and every rank's partition sizes; whatever the layout functions accept must place
// each param's elements exactly (pieces summing to its numel) inside the partitions they name.
// A trove::Error is an expected outcome; a violated placement, crash or hang is a bug.
// Seeds: fuzz/corpus/zero_layout_fuzz/ (a stage-2 and a stage-3 layout that agree).
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "formats/deepspeed/zero_layout.h"
#include "trove/error.h"

namespace {

struct Input {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  uint8_t Byte() { return at < size ? data[at++] : 0; }
  uint64_t Number() {
    const uint64_t low = Byte() | (uint64_t{Byte()} << 8);
    const uint8_t shift = Byte();
    return shift >= 0xF0 ? low << (shift & 0x3F) : low;  // now and then far past any file
  }
};

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  const bool stage3 = in.Byte() & 1;
  const size_t world = 1 + in.Byte() % 8;
  const size_t group_count = 1 + in.Byte() % 3;
  std::vector<std::vector<trove::ZeroParam>> groups(group_count);
  for (auto& g : groups) {
    const size_t n = in.Byte() % 6;
    for (size_t i = 0; i < n; ++i) g.push_back({"p", in.Number()});
  }
  std::vector<std::vector<uint64_t>> partitions(world, std::vector<uint64_t>(group_count));
  for (auto& rank : partitions) {
    for (auto& n : rank) n = in.Byte() | (uint64_t{in.Byte()} << 8);
  }
  try {
    std::vector<trove::ZeroParam> params;
    for (const auto& g : groups) params.insert(params.end(), g.begin(), g.end());
    const auto pieces = stage3 ? trove::ZeroStage3Pieces(params, partitions) : trove::ZeroStage12Pieces(groups, partitions);
    Check(pieces.size() == params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      uint64_t total = 0;
      for (const trove::ZeroPiece& p : pieces[i]) {
        Check(p.rank < world && p.group < group_count && p.count > 0);
        Check(p.offset <= partitions[p.rank][p.group] && p.count <= partitions[p.rank][p.group] - p.offset);
        total += p.count;
      }
      Check(total == params[i].numel);
    }
  } catch (const trove::Error&) {
  }
  return 0;
}
