// Reads one tensor as floats (zero-copy where the file stores float32 in place, else converted),
// prints its sum, then writes it scaled by two, with a count beside it, to a new file in any
// format trove writes (the name says which: .safetensors, .pt, .tdz, .npz, .gguf...).
//   typed_io IN KEY OUT
#include <trove/error.h>
#include <trove/open.h>
#include <trove/save.h>

#include <cstdio>
#include <span>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: typed_io IN KEY OUT\n");
    return 2;
  }
  try {
    const trove::Document doc = trove::Open(argv[1]);
    const trove::NamedTensor* found = doc.FindTensor(argv[2]);
    if (found == nullptr) {
      std::fprintf(stderr, "typed_io: %s: no tensor '%s'\n", argv[1], argv[2]);
      return 2;
    }
    const trove::TensorView* view = found->view;
    std::vector<float> values;
    bool in_place = true;
    try {
      const std::span<const float> span = view->Span<float>();  // the mapped file's bytes
      values.assign(span.begin(), span.end());
    } catch (const trove::Error& e) {
      std::printf("not in place: %s\n", e.what());  // bfloat16, strided, big-endian...: converted
      in_place = false;
      values = view->ToVector<float>();
    }
    double sum = 0;
    for (float& v : values) {
      sum += v;
      v *= 2;
    }
    std::printf("%s: %zu values, sum %.9g, %s\n", argv[2], values.size(), sum, in_place ? "zero-copy" : "copied");
    const std::vector<int64_t> count = {static_cast<int64_t>(values.size())};
    trove::Save(argv[3], {trove::TensorToSave::Of<float>("doubled", values, view->shape),
                          trove::TensorToSave::Of<int64_t>("meta/count", count, {1})});
    std::printf("wrote %s\n", argv[3]);
  } catch (const trove::Error& e) {
    std::fprintf(stderr, "typed_io: %s\n", e.what());
    return 2;
  }
  return 0;
}
