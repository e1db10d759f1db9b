// gguf_probe: what trove's GGUF reader makes of a file, as JSON on stdout, for
// tests/python/test_gguf.py to compare with the test's own reader:
//   gguf_probe FILE   {"properties": {name: text}, "tensors": [{key, dtype, shape, nbytes, crc32}],
//                      "records": [{name, offset, size, method}]}
// crc32 is of the tensor's bytes as trove streams them (C-contiguous, little-endian; a block
// type's raw blocks as stored).
//   gguf_probe dequantize FILE   {"tensors": [{key, values, crc32, first: [up to 8 floats]}]} for
//                                every tensor CastView dequantizes (core/ggml_blocks.h; crc32 of
//                                the float32 values' little-endian bytes)
// An error is {"error": {"code", "message"}} with exit status 1.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf/gguf_format.h"
#include "trove/error.h"
#include "trove/tensor.h"
#include "trove/zip_reader.h"

int main(int argc, char** argv) {
  const bool dequantize = argc == 3 && std::string(argv[1]) == "dequantize";
  if (argc != 2 && !dequantize) {
    std::cerr << "usage: gguf_probe [dequantize] FILE\n";
    return 2;
  }
  nlohmann::ordered_json out;
  try {
    const trove::Document doc = trove::ReadGguf(trove::MappedFile::Open(argv[argc - 1]), {});
    if (dequantize) {
      out["tensors"] = nlohmann::ordered_json::array();
      for (const auto& t : doc.tensors) {
        if (!trove::IsBlockDType(t.view->dtype) || !trove::Dequantizable(*t.view)) continue;
        uint32_t crc = 0;
        uint64_t values = 0;
        std::vector<float> first;
        trove::CastView(*t.view, trove::DType::kFloat32).ForEachChunk([&](const uint8_t* p, size_t n) {
          crc = trove::Crc32(p, n, crc);
          for (size_t i = 0; i + 4 <= n && first.size() < 8; i += 4) {
            float v;
            std::memcpy(&v, p + i, 4);
            first.push_back(v);
          }
          values += n / 4;
        }, 1000);  // small chunks: a tensor spans several
        out["tensors"].push_back({{"key", t.key}, {"values", values}, {"crc32", crc}, {"first", first}});
      }
      std::cout << out.dump() << '\n';
      return 0;
    }
    out["properties"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : doc.properties) out["properties"][k] = v.text;
    out["tensors"] = nlohmann::ordered_json::array();
    for (const auto& t : doc.tensors) {
      uint32_t crc = 0;
      t.view->ForEachChunk([&](const uint8_t* p, size_t n) { crc = trove::Crc32(p, n, crc); });
      out["tensors"].push_back({{"key", t.key}, {"dtype", trove::Name(t.view->dtype)}, {"shape", t.view->shape},
                                {"nbytes", t.view->nbytes()}, {"crc32", crc}});
    }
    out["records"] = nlohmann::ordered_json::array();
    for (const auto& r : doc.records) out["records"].push_back({{"name", r.name}, {"offset", r.offset}, {"size", r.size}, {"method", r.method}});
  } catch (const trove::Error& e) {
    out = {{"error", {{"code", std::string(trove::ErrorCodeName(e.code()))}, {"message", e.message()}}}};
    std::cout << out.dump() << '\n';
    return 1;
  }
  // Text that is not UTF-8 (a property may hold any bytes) as U+FFFD, as the test's reader decodes it.
  std::cout << out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
  return 0;
}
