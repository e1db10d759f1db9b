// Anchor for `make bench`: reads a torch.save checkpoint the C++ way available today,
// torch::pickle_load (Debian's libtorch-dev), and counts the tensors it holds.
#include <torch/serialize.h>
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

static size_t CountTensors(const c10::IValue& v) {
  if (v.isTensor()) return 1;
  size_t n = 0;
  if (v.isGenericDict()) {
    for (const auto& e : v.toGenericDict()) n += CountTensors(e.value());
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) n += CountTensors(e);
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) n += CountTensors(e);
  }
  return n;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: pt_load_libtorch FILE\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue v = torch::pickle_load(bytes);
  std::cout << CountTensors(v) << " tensors\n";
  return 0;
}
