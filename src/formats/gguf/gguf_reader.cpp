// Reading a GGUF file into a Document: tensors as views of the mapping, metadata as properties.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>

#include "core/confined_directory.h"
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

namespace {

// A part's tensors (views of its own mapping: zero-copy per part) and records added to `doc`.
// `label` prefixes its header record's name ("" for a single file).
void AddTensors(const GgufLayout& g, const std::shared_ptr<MappedFile>& file, const std::string& label, Document& doc,
                Value* root, int64_t& index) {
  ContainerRecord header;
  header.name = label.empty() ? "header" : label + " header";
  header.size = header.stored_size = g.infos_end;
  header.method = "stored";
  doc.records.push_back(header);

  const SharedBytes bytes = file->bytes();
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
    view.byte_order = g.big_endian ? ByteOrder::kBig : ByteOrder::kLittle;
    view.storage = bytes.Slice(g.data_offset + ti.offset, ti.bytes);
    view.storage_index = index++;
    view.storage_key = std::string(ti.name);
    WithContext("tensor '" + std::string(ti.name) + "'", [&] {
      view.strides = ContiguousStrides(view.shape);
      view.Validate();
    });
    root->entries.emplace_back(doc.arena->Str(std::string(ti.name)), doc.arena->Tensor(std::move(view)));
    ContainerRecord r;
    r.name = std::string(ti.name);
    r.offset = g.data_offset + ti.offset;
    r.size = r.stored_size = ti.bytes;
    r.method = std::string(ti.type->name) + (ti.type->quantized() ? " " + ShapeText(logical) : std::string());
    doc.records.push_back(std::move(r));
  }
}

// The first part's properties: version, byte order, the summary, every key.
void AddProperties(const GgufLayout& g, uint64_t tensors, Document& doc) {
  doc.properties.emplace_back("version", PropertyValue::Integer(g.version));
  if (g.draft) doc.properties.emplace_back("layout", "the July 2023 draft (typed fields, magic FUGG)");
  else if (g.magic == "FUGG") doc.properties.emplace_back("magic", "FUGG (GGUF v1's byte-swapped magic)");
  doc.properties.emplace_back("byteorder", g.big_endian ? "big" : "little");
  doc.properties.emplace_back("alignment", PropertyValue::Integer(g.alignment));
  doc.properties.emplace_back("tensors", PropertyValue::Integer(static_cast<int64_t>(tensors)));
  doc.properties.emplace_back("metadata entries", PropertyValue::Integer(static_cast<int64_t>(g.metadata.size())));
  AddSummary(g, doc);
  for (const MetadataEntry& e : g.metadata) {
    if (e.key == "general.architecture" || e.key == "tokenizer.chat_template") continue;  // in the summary
    doc.properties.emplace_back(std::string(e.key), Property(e.value));
  }
}

// split.no / split.count: a u16 (llama.cpp's gguf-split writes them so); split.tensors.count an
// i32. nullopt when the key is absent; a key of another type is an error naming the part.
[[noreturn]] void FailAt(ErrorCode code, uint64_t offset, const std::string& message) {
  Error e(code, message);
  e.SetOffset(offset);
  throw e;
}

std::optional<uint64_t> SplitKey(const GgufLayout& g, std::string_view key, ValueType type) {
  const MetadataEntry* e = g.Find(key);
  if (e == nullptr) return std::nullopt;
  if (e->value.type != type) {
    FailAt(ErrorCode::kCorrupt, e->offset, std::string(key) + " is a " + std::string(gguf::ValueTypeName(e->value.type)) +
                                               ", not a " + std::string(gguf::ValueTypeName(type)));
  }
  if (type == ValueType::kI32) {
    if (e->value.i < 0) FailAt(ErrorCode::kCorrupt, e->offset, std::string(key) + " is negative");
    return static_cast<uint64_t>(e->value.i);
  }
  return e->value.u;
}

// "<prefix>-NNNNN-of-MMMMM.gguf" (llama.cpp's split names: numbers from 1, five digits or more).
struct SplitName {
  std::string prefix;  // with its directory
  uint64_t number = 0;
  uint64_t count = 0;
};

std::optional<SplitName> ParseSplitName(const std::string& path) {
  static const std::regex kName(R"((.*)-([0-9]{5,9})-of-([0-9]{5,9})\.gguf)");
  std::smatch m;
  if (!std::regex_match(path, m, kName)) return std::nullopt;
  return SplitName{m[1].str(), std::stoull(m[2].str()), std::stoull(m[3].str())};
}

std::string SplitPath(const std::string& prefix, uint64_t number, uint64_t count) {
  char tail[64];
  std::snprintf(tail, sizeof tail, "-%05llu-of-%05llu.gguf", static_cast<unsigned long long>(number),
                static_cast<unsigned long long>(count));
  return prefix + tail;
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

namespace {

// One file's document from its parse.
Document SingleFileDocument(const std::shared_ptr<MappedFile>& file, const GgufLayout& g) {
  return WithFile(file->path(), [&] {
    Document doc;
    doc.format = "gguf";
    doc.path = file->path();
    doc.file_size = file->size();
    AddProperties(g, g.tensors.size(), doc);
    Value* root = doc.arena->Dict("dict");
    int64_t index = 0;
    AddTensors(g, file, "", doc, root, index);
    doc.root = root;
    doc.tensors = CollectTensors(root);
    return doc;
  });
}

}  // namespace

Document ReadGgufFile(std::shared_ptr<MappedFile> file) {
  const GgufLayout g = WithFile(file->path(), [&] { return gguf::ParseGguf(file->data(), file->size()); });
  return SingleFileDocument(file, g);
}

Document ReadGguf(std::shared_ptr<MappedFile> file, const ReadOptions& /*options*/) {
  std::optional<uint64_t> count;
  std::optional<uint64_t> number;
  {
    const GgufLayout g = WithFile(file->path(), [&] { return gguf::ParseGguf(file->data(), file->size()); });
    WithFile(file->path(), [&] {
      count = SplitKey(g, "split.count", ValueType::kU16);
      number = SplitKey(g, "split.no", ValueType::kU16);
    });
    if (!count || *count <= 1) return SingleFileDocument(file, g);  // one file (a set of one part is that file)
  }

  // A split model: every part, found by the name llama.cpp gives it, read as one document.
  const std::string given = file->path();
  const std::optional<SplitName> name = ParseSplitName(given);
  if (!number || !name || name->count != *count || name->number != *number + 1) {
    Fail(ErrorCode::kCorrupt, "part " + (number ? std::to_string(*number + 1) : std::string("?")) + " of a model split in " +
                                  std::to_string(*count) + " (split.no, split.count), but its name is not <name>-" +
                                  (number ? SplitPath("", *number + 1, *count).substr(1) : std::string("NNNNN-of-MMMMM.gguf")) +
                                  ": the other parts cannot be found by it");
  }
  if (*count > gguf::kMaxSplitParts) {
    Fail(ErrorCode::kLimit, "split.count " + std::to_string(*count) + " exceeds the cap of " + std::to_string(gguf::kMaxSplitParts) + " parts");
  }
  const std::string parent = std::filesystem::path(given).parent_path().string();
  const std::shared_ptr<const ConfinedDirectory> parts_directory = ConfinedDirectory::Open(parent.empty() ? std::string(".") : parent);
  Document doc;
  doc.format = "gguf";
  Value* root = doc.arena->Dict("dict");
  int64_t index = 0;
  std::map<std::string, std::string, std::less<>> owner;  // tensor name -> the part holding it
  uint64_t tensors = 0;
  std::optional<uint64_t> expected_tensors;
  std::string architecture;
  for (uint64_t i = 0; i < *count; ++i) {
    const std::string path = SplitPath(name->prefix, i + 1, *count);
    const std::string part = BaseName(path);
    std::shared_ptr<MappedFile> f = path == given ? file : nullptr;
    if (f == nullptr) {
      // The other parts are named by the file (split.count), not by the user: they are opened by
      // the rule for files a file names (core/confined_directory.h), beside the part given: a
      // link out of that directory, a FIFO or a device is refused, never opened.
      std::optional<ConfinedFile> opened = WithFile(path, [&] { return parts_directory->OpenFile(part); });
      if (!opened) {
        Error missing(ErrorCode::kNotFound, "part " + std::to_string(i + 1) + " of " + std::to_string(*count) +
                                                " of the split model " + BaseName(given) + " is missing");
        throw missing.SetFile(path);
      }
      f = WithFile(path, [&] { return MappedFile::FromDescriptor(opened->fd.release(), path, opened->size); });
    }
    WithFile(path, [&] {
      const GgufLayout g = gguf::ParseGguf(f->data(), f->size());
      const std::optional<uint64_t> no = SplitKey(g, "split.no", ValueType::kU16);
      const std::optional<uint64_t> n = SplitKey(g, "split.count", ValueType::kU16);
      const std::optional<uint64_t> t = SplitKey(g, "split.tensors.count", ValueType::kI32);
      if (no != i || n != count) {
        Fail(ErrorCode::kCorrupt, "split.no " + (no ? std::to_string(*no) : "absent") + " and split.count " +
                                      (n ? std::to_string(*n) : "absent") + " where part " + std::to_string(i + 1) + " of " +
                                      std::to_string(*count) + " (split.no " + std::to_string(i) + ") belongs");
      }
      if (!t) Fail(ErrorCode::kCorrupt, "split.tensors.count is absent");
      if (i == 0) expected_tensors = t;
      if (t != expected_tensors) {
        Fail(ErrorCode::kCorrupt, "split.tensors.count " + std::to_string(*t) + " where the first part says " +
                                      std::to_string(*expected_tensors) + ": parts of different models");
      }
      // Parts after the first hold only split.* keys (llama.cpp's gguf-split); an architecture
      // other than the first part's is another model's part.
      if (const MetadataEntry* a = g.Find("general.architecture"); a && a->value.type == ValueType::kString) {
        if (i == 0) architecture = std::string(a->value.text);
        else if (a->value.text != architecture) {
          Fail(ErrorCode::kCorrupt, "general.architecture '" + std::string(a->value.text) + "' where the first part's is '" +
                                        architecture + "': parts of different models");
        }
      }
      for (const TensorInfo& ti : g.tensors) {
        auto [at, fresh] = owner.emplace(std::string(ti.name), part);
        if (!fresh) Fail(ErrorCode::kCorrupt, "tensor '" + std::string(ti.name) + "' is also in " + at->second);
      }
      tensors += g.tensors.size();
      if (i == 0) {
        doc.path = path;
        doc.file_size = f->size();
        doc.properties.emplace_back("split", std::to_string(*count) + " parts, " + part + " to " + BaseName(SplitPath(name->prefix, *count, *count)));
        AddProperties(g, *expected_tensors, doc);
      }
      AddTensors(g, f, part, doc, root, index);
    });
  }
  if (tensors != *expected_tensors) {
    Fail(ErrorCode::kCorrupt, doc.path + ": the " + std::to_string(*count) + " parts hold " + std::to_string(tensors) +
                                  " tensors, split.tensors.count says " + std::to_string(*expected_tensors));
  }
  doc.root = root;
  doc.tensors = CollectTensors(root);
  return doc;
}

}  // namespace trove
