// trove::Save (trove/save.h): a Document made of the caller's buffers, written by ConvertDocument.
#include "trove/save.h"

#include <string_view>

#include "trove/convert.h"
#include "trove/document.h"
#include "trove/format.h"
#include "trove/tensor.h"

namespace trove {
namespace {

// The dict under `dict` at str key `name`, made when missing; Error when a tensor is there.
Value* ChildDict(ValueArena& arena, Value* dict, const std::string& name, const std::string& path) {
  for (auto& [key, value] : dict->entries) {
    if (key->kind == ValueKind::kStr && key->text == name) {
      if (value->kind != ValueKind::kDict) Fail(ErrorCode::kUsage, "'" + path + "' is a tensor and holds another tensor");
      return value;
    }
  }
  Value* child = arena.Dict();
  dict->entries.emplace_back(arena.Str(name), child);
  return child;
}

}  // namespace

void Save(const std::string& path, const std::vector<TensorToSave>& tensors,
          const std::vector<std::pair<std::string, std::string>>& metadata) {
  Document doc;
  doc.format = "c++";
  doc.path = "<C++ buffers>";
  ValueArena& arena = *doc.arena;
  doc.root = arena.Dict();
  for (const TensorToSave& t : tensors) {
    if (t.name.empty()) Fail(ErrorCode::kUsage, "a tensor without a name");
    TensorView view;
    view.dtype = t.dtype;
    view.shape = t.shape;
    view.strides.assign(t.shape.size(), 1);
    // The bytes the shape needs, every product checked, before the view is made of them.
    uint64_t need = ElementSize(t.dtype);
    for (const int64_t d : t.shape) {
      if (d < 0) Fail(ErrorCode::kUsage, "tensor '" + t.name + "': a negative dimension in " + ShapeString(t.shape));
      if (d != 0 && need > (uint64_t{1} << 62) / static_cast<uint64_t>(d)) {
        Fail(ErrorCode::kUsage, "tensor '" + t.name + "': " + ShapeString(t.shape) + " is more bytes than any file holds");
      }
      need *= static_cast<uint64_t>(d);
    }
    if (need != t.size) {
      Fail(ErrorCode::kUsage, "tensor '" + t.name + "': " + ShapeString(t.shape) + " " + std::string(Name(t.dtype)) +
                                  " needs " + std::to_string(need) + " bytes, " + std::to_string(t.size) + " given");
    }
    if (t.data == nullptr && need != 0) Fail(ErrorCode::kUsage, "tensor '" + t.name + "': no data");
    view.storage = SharedBytes(nullptr, static_cast<const uint8_t*>(t.data), t.size);
    WithContext("tensor '" + t.name + "'", [&] {
      view.strides = ContiguousStrides(t.shape);
      view.Validate();
    });
    // '/' separates dicts; the last component names the tensor.
    Value* dict = doc.root;
    size_t start = 0;
    for (size_t slash; (slash = t.name.find('/', start)) != std::string::npos; start = slash + 1) {
      dict = ChildDict(arena, dict, t.name.substr(start, slash - start), t.name.substr(0, slash));
    }
    const std::string leaf = t.name.substr(start);
    for (const auto& [key, value] : dict->entries) {
      if (key->kind == ValueKind::kStr && key->text == leaf) Fail(ErrorCode::kUsage, "tensor '" + t.name + "' given twice");
    }
    dict->entries.emplace_back(arena.Str(leaf), arena.Tensor(std::move(view)));
  }
  doc.tensors = CollectTensors(doc.root);
  const Format target = TargetFormat(path, "");
  if (!metadata.empty() && target != Format::kSafetensors && target != Format{"gguf"}) {
    Fail(ErrorCode::kUsage, "string metadata is written to .safetensors and .gguf files, not " +
                                std::string(FormatName(target)));
  }
  ConvertOptions options;
  options.metadata = metadata;
  ConvertDocument(doc, path, target, options);
}

}  // namespace trove
