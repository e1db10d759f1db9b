// Lists a checkpoint's tensors with the sum of each floating one, read straight from the mapped
// file, and prints a value found by its key path (e.g. `epoch`, `optimizer/param_groups/0/lr`).
//   list_tensors FILE [KEY_PATH...]
#include <trove/element_codec.h>
#include <trove/error.h>
#include <trove/open.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: list_tensors FILE [KEY_PATH...]\n");
    return 2;
  }
  try {
    trove::Document doc = trove::Open(argv[1]);
    std::printf("%s: %s, %zu tensors\n", argv[1], doc.format.c_str(), doc.tensors.size());
    for (const trove::NamedTensor& t : doc.tensors) {
      const trove::TensorView& v = *t.view;
      double sum = 0;
      const auto& info = trove::Info(v.dtype);
      if (info.kind == trove::DTypeKind::kFloat && v.has_data && info.bits >= 8) {
        // ForEachChunk hands over the tensor's elements in C order as little-endian bytes whatever
        // the view is (strided, broadcast, big-endian): zero-copy when it is stored that way.
        const size_t size = info.element_size;
        v.ForEachChunk([&](const uint8_t* p, size_t n) {
          for (size_t i = 0; i + size <= n; i += size) sum += trove::DecodeElement(v.dtype, p + i).re;
        });
      }
      std::printf("%s %s %s sum=%.9g", t.key.c_str(), std::string(trove::Name(v.dtype)).c_str(),
                  trove::ShapeString(v.shape).c_str(), sum);
      if (v.shape.size() == 2 && v.shape[0] > 0 && v.shape[1] > 0 && info.kind == trove::DTypeKind::kFloat) {
        std::printf(" [0,0]=%.9g", v.At<double>(0, 0));  // one element, any layout
      }
      std::printf("\n");
    }
    for (int i = 2; i < argc; ++i) {
      const trove::Value* value = doc.FindValue(argv[i]);
      if (value == nullptr) {
        std::printf("%s: absent\n", argv[i]);
      } else if (value->kind == trove::ValueKind::kInt && !value->is_big_int()) {
        std::printf("%s = %lld\n", argv[i], static_cast<long long>(value->integer));
      } else if (value->kind == trove::ValueKind::kFloat) {
        std::printf("%s = %.17g\n", argv[i], value->real);
      } else if (value->kind == trove::ValueKind::kStr) {
        std::printf("%s = '%s'\n", argv[i], value->text.c_str());
      } else {
        std::printf("%s: a %s\n", argv[i], std::string(trove::KindName(value->kind)).c_str());
      }
    }
  } catch (const trove::Error& e) {
    std::fprintf(stderr, "list_tensors: %s\n", e.what());
    return 2;
  }
  return 0;
}
