// trove/save.h: writing tensors from C++ memory to any format trove writes, in one call.
//
// The short way to produce a file (as safetensors-rs's serialize_to_file or torch.save): name
// each tensor, point at its bytes, and Save picks the format from the file's name
// (.safetensors, .pt, .tdz, .gguf, .npz, a directory for tensordict...; trove/convert.h's
// TargetFormat) and writes it atomically (a temporary renamed at the end). The tensor bytes are
// the caller's, C-contiguous and little-endian, borrowed until Save returns (never copied whole:
// writers stream them). Thread-compatible: concurrent Saves to different paths are fine.
//
//   std::vector<float> w(4096 * 4096);
//   trove::Save("model.safetensors", {trove::TensorToSave::Of<float>("w", w, {4096, 4096})},
//               {{"format", "pt"}});
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "trove/dtype.h"
#include "trove/error.h"

namespace trove {

struct TensorToSave {
  std::string name;             // a key path: '/' separates dicts ("encoder/w"), as trove's keys do
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  const void* data = nullptr;   // product(shape) * ElementSize(dtype) bytes
  uint64_t size = 0;            // the bytes at data (checked against the shape)

  template <class T>
  static TensorToSave Of(std::string name, std::span<const T> values, std::vector<int64_t> shape) {
    return {std::move(name), DTypeOf<T>(), std::move(shape), values.data(), values.size_bytes()};
  }
  template <class T>
  static TensorToSave Of(std::string name, const std::vector<T>& values, std::vector<int64_t> shape) {
    return Of<T>(std::move(name), std::span<const T>(values), std::move(shape));
  }
};

// Writes `tensors` (in this order) to `path`. `metadata`: string entries for formats that hold
// them (.safetensors' __metadata__); elsewhere Error(kUsage). Throws Error(kUsage) for a shape
// that does not match the bytes given or a name given twice, and what the writer throws.
void Save(const std::string& path, const std::vector<TensorToSave>& tensors,
          const std::vector<std::pair<std::string, std::string>>& metadata = {});

}  // namespace trove
