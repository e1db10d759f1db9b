// Lists a checkpoint's tensors and sums each float32 one straight from the mapped file.
#include <trove/error.h>
#include <trove/open.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: list_tensors FILE\n");
    return 2;
  }
  try {
    trove::Document doc = trove::Open(argv[1]);
    std::printf("%s: %s, %zu tensors\n", argv[1], doc.format.c_str(), doc.tensors.size());
    for (const auto& t : doc.tensors) {
      double sum = 0;
      if (t.view->dtype == trove::DType::kFloat32 && t.view->has_data) {
        t.view->ForEachChunk([&](const uint8_t* p, size_t n) {
          for (size_t i = 0; i + 4 <= n; i += 4) {
            float f;
            std::memcpy(&f, p + i, 4);
            sum += f;
          }
        });
      }
      std::printf("%s %s %s sum=%.6g\n", t.key.c_str(), std::string(trove::Name(t.view->dtype)).c_str(),
                  trove::ShapeString(t.view->shape).c_str(), sum);
    }
  } catch (const trove::Error& e) {
    std::fprintf(stderr, "list_tensors: %s\n", e.what());
    return 2;
  }
  return 0;
}
