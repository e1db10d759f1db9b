// Reading a GGUF file into a Document: tensors as views of the mapping, metadata as properties.
#include <algorithm>
#include <map>

#include "formats/gguf/gguf_format.h"
#include "formats/gguf/gguf_layout.h"
#include "trove/error.h"
#include "trove/tensor.h"

namespace trove {
namespace {

using gguf::GgufLayout;
using gguf::Thousands;
using gguf::MetadataEntry;
using gguf::MetadataValue;
using gguf::TensorInfo;
using gguf::ValueType;

// PyTorch's order: ggml's ne reversed (ne[0], the fastest-varying, last).
std::vector<int64_t> TorchShape(const TensorInfo& ti) {
  std::vector<int64_t> shape;
  for (uint32_t d = ti.n_dims; d-- > 0;) shape.push_back(static_cast<int64_t>(ti.ne[d]));
  return shape;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

PropertyValue Property(const MetadataValue& v) {
  switch (v.type) {
    case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kU64:
      if (v.u <= static_cast<uint64_t>(INT64_MAX)) return PropertyValue::Integer(static_cast<int64_t>(v.u));
      return gguf::ValueText(v);
    case ValueType::kI8: case ValueType::kI16: case ValueType::kI32: case ValueType::kI64:
      return PropertyValue::Integer(v.i);
    case ValueType::kBool: return PropertyValue::Boolean(v.u != 0);
    default: return gguf::ValueText(v);
  }
}

// An integer metadata value, if the key holds one.
std::optional<uint64_t> IntegerOf(const GgufLayout& g, const std::string& key) {
  const MetadataEntry* e = g.Find(key);
  if (e == nullptr) return std::nullopt;
  switch (e->value.type) {
    case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kU64: return e->value.u;
    case ValueType::kI8: case ValueType::kI16: case ValueType::kI32: case ValueType::kI64:
      if (e->value.i >= 0) return static_cast<uint64_t>(e->value.i);
      return std::nullopt;
    default: return std::nullopt;
  }
}

// What a person asks of a model first: architecture, size, context, layers, heads, vocabulary,
// quantization mix, chat template.
void AddSummary(const GgufLayout& g, Document& doc) {
  std::string arch;
  if (const MetadataEntry* e = g.Find("general.architecture"); e && e->value.type == ValueType::kString) {
    arch = std::string(e->value.text);
    doc.properties.emplace_back("architecture", arch);
  }
  uint64_t parameters = 0;
  // Cannot wrap: tensors share no byte, and every one with values holds at least a byte per six of them.
  for (const TensorInfo& ti : g.tensors) parameters += ti.values;
  // `trove info` counts a tensor's elements, which for a block type are bytes of its blocks:
  // the values are said here, where they differ.
  const bool blocks = std::any_of(g.tensors.begin(), g.tensors.end(), [](const TensorInfo& t) { return t.type->quantized(); });
  if (blocks) doc.properties.emplace_back("parameter count", Thousands(parameters));
  auto add = [&](const std::string& label, std::optional<uint64_t> v) {
    if (v) doc.properties.emplace_back(label, Thousands(*v));
  };
  if (!arch.empty()) {
    add("context length", IntegerOf(g, arch + ".context_length"));
    add("layers", IntegerOf(g, arch + ".block_count"));
    add("attention heads", IntegerOf(g, arch + ".attention.head_count"));
    add("kv heads", IntegerOf(g, arch + ".attention.head_count_kv"));
    add("embedding length", IntegerOf(g, arch + ".embedding_length"));
  }
  const MetadataEntry* tokens = g.Find("tokenizer.ggml.tokens");
  if (std::optional<uint64_t> vocab = arch.empty() ? std::nullopt : IntegerOf(g, arch + ".vocab_size")) {
    add("vocabulary size", vocab);
  } else if (tokens != nullptr && tokens->value.type == ValueType::kArray) {
    add("vocabulary size", tokens->value.count);
  }
  if (!g.tensors.empty()) {
    std::map<std::string, std::pair<uint64_t, uint64_t>> mix;  // type -> tensors, bytes
    for (const TensorInfo& ti : g.tensors) {
      auto& m = mix[std::string(ti.type->name)];
      m.first++;
      m.second += ti.bytes;
    }
    std::string text;
    for (const auto& [type, c] : mix) {
      text += (text.empty() ? "" : ", ") + type + " " + Thousands(c.first) + (c.first == 1 ? " tensor (" : " tensors (") +
              Thousands(c.second) + " bytes)";
    }
    doc.properties.emplace_back("quantization mix", text);
  }
  if (const MetadataEntry* e = g.Find("tokenizer.chat_template"); e && e->value.type == ValueType::kString) {
    doc.properties.emplace_back("chat template", std::string(e->value.text));
  }
}

GgufValue Whole(const MetadataValue& v) {
  GgufValue out;
  out.type = std::string(gguf::ValueTypeName(v.type));
  switch (v.type) {
    case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kU64: out.unsigned_integer = v.u; break;
    case ValueType::kI8: case ValueType::kI16: case ValueType::kI32: case ValueType::kI64: out.integer = v.i; break;
    case ValueType::kF32: case ValueType::kF64: out.real = v.f; break;
    case ValueType::kBool: out.boolean = v.u != 0; break;
    case ValueType::kString: out.text = std::string(v.text); break;
    case ValueType::kArray: case ValueType::kObject:
      out.element_type = std::string(gguf::ValueTypeName(v.element_type));
      out.items.reserve(v.items.size());
      for (const MetadataValue& item : v.items) out.items.push_back(Whole(item));
      break;
  }
  return out;
}

}  // namespace

std::vector<GgufMetadataEntry> ReadGgufMetadata(const std::string& path) {
  const std::shared_ptr<MappedFile> file = MappedFile::Open(path);
  return WithFile(file->path(), [&] {
    const GgufLayout g = gguf::ParseGguf(file->data(), file->size(), /*every_item=*/true);
    std::vector<GgufMetadataEntry> out;
    out.reserve(g.metadata.size());
    for (const MetadataEntry& e : g.metadata) out.push_back({std::string(e.key), Whole(e.value)});
    return out;
  });
}

Document ReadGguf(std::shared_ptr<MappedFile> file, const ReadOptions& /*options*/) {
  return WithFile(file->path(), [&] {
    const GgufLayout g = gguf::ParseGguf(file->data(), file->size());
    Document doc;
    doc.format = "gguf";
    doc.path = file->path();
    doc.file_size = file->size();
    doc.properties.emplace_back("version", PropertyValue::Integer(g.version));
    if (g.draft) doc.properties.emplace_back("layout", "the July 2023 draft (typed fields, magic FUGG)");
    else if (g.magic == "FUGG") doc.properties.emplace_back("magic", "FUGG (GGUF v1's byte-swapped magic)");
    doc.properties.emplace_back("byteorder", g.big_endian ? "big" : "little");
    doc.properties.emplace_back("alignment", PropertyValue::Integer(g.alignment));
    doc.properties.emplace_back("tensors", PropertyValue::Integer(static_cast<int64_t>(g.tensors.size())));
    doc.properties.emplace_back("metadata entries", PropertyValue::Integer(static_cast<int64_t>(g.metadata.size())));
    AddSummary(g, doc);
    for (const MetadataEntry& e : g.metadata) {
      if (e.key == "general.architecture" || e.key == "tokenizer.chat_template") continue;  // in the summary
      doc.properties.emplace_back(std::string(e.key), Property(e.value));
    }

    ContainerRecord header;
    header.name = "header";
    header.size = header.stored_size = g.infos_end;
    header.method = "stored";
    doc.records.push_back(header);

    const SharedBytes bytes = file->bytes();
    Value* root = doc.arena->Dict("dict");
    int64_t index = 0;
    for (const TensorInfo& ti : g.tensors) {
      TensorView view;
      view.dtype = ti.type->dtype;
      view.shape = TorchShape(ti);
      const std::vector<int64_t> logical = view.shape;
      if (ti.type->quantized()) {
        // Raw blocks: the last dimension counts the bytes of a row's blocks.
        if (view.shape.empty()) view.shape.push_back(1);
        view.shape.back() = static_cast<int64_t>(ti.ne[0] / ti.type->block_values() * ti.type->block_bytes());
      }
      view.strides.assign(view.shape.size(), 1);
      for (size_t d = view.shape.size(); d-- > 1;) view.strides[d - 1] = view.strides[d] * std::max<int64_t>(view.shape[d], 1);
      view.byte_order = g.big_endian ? ByteOrder::kBig : ByteOrder::kLittle;
      view.storage = bytes.Slice(g.data_offset + ti.offset, ti.bytes);
      view.storage_index = index++;
      view.storage_key = std::string(ti.name);
      view.Validate();
      root->entries.emplace_back(doc.arena->Str(std::string(ti.name)), doc.arena->Tensor(std::move(view)));
      ContainerRecord r;
      r.name = std::string(ti.name);
      r.offset = g.data_offset + ti.offset;
      r.size = r.stored_size = ti.bytes;
      r.method = std::string(ti.type->name) + (ti.type->quantized() ? " " + ShapeText(logical) : std::string());
      doc.records.push_back(std::move(r));
    }
    doc.root = root;
    doc.tensors = CollectTensors(root);
    return doc;
  });
}

}  // namespace trove
