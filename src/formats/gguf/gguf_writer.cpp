// Writing GGUF v3, little-endian (gguf_layout.h has the byte layout): metadata, then the tensor
// infos in the document's order, then the tensors' bytes, each at a multiple of the alignment and
// padded to it, streamed from their views into a temporary renamed when whole.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "core/little_endian.h"
#include "core/progress.h"
#include "formats/gguf/gguf_format.h"
#include "formats/tensor_only_values.h"
#include "formats/gguf/gguf_layout.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace {

using gguf::GgufLayout;
using gguf::ValueType;

constexpr uint32_t kWrittenVersion = 3;

void AppendString(std::string& out, std::string_view s) {
  AppendLe(out, s.size(), 8);
  out.append(s);
}

// One metadata entry as written: its key, then its type and value, encoded.
struct Entry {
  std::string key;
  std::string typed_value;
};

// The source GGUF's entries, their bytes as they are (so every type, nested arrays included, is
// kept exactly). Only a v2/v3 little-endian file's encoding is v3's; the others are refused
// rather than re-encoded.
// split.*: which part of a split model a file is (llama.cpp's gguf-split), kept only where that
// file is rewritten as itself (EditGgufMetadata).
bool IsSplitKey(std::string_view key) { return key == "split.no" || key == "split.count" || key == "split.tensors.count"; }

std::vector<Entry> SourceEntries(const std::string& path, uint64_t expected_size, bool split_keys) {
  const std::shared_ptr<MappedFile> file = MappedFile::Open(path);
  if (file->size() != expected_size) Fail(ErrorCode::kIo, "the source GGUF changed size since it was read");
  const uint8_t* data = file->data();
  const GgufLayout g = gguf::ParseGguf(data, file->size());
  const char* refused = g.draft ? "the July 2023 draft layout"
                        : g.version < 2 ? "GGUF version 1 (32-bit lengths)"
                        : g.big_endian  ? "a big-endian file"
                                        : nullptr;
  if (refused != nullptr && !g.metadata.empty()) {
    Fail(ErrorCode::kUnsupported, std::string("keeping the metadata of ") + refused +
                                      ": trove writes GGUF v3 little-endian and does not re-encode it");
  }
  const uint64_t end = g.tensors.empty() ? g.infos_end : g.tensors.front().info_offset;
  std::vector<Entry> out;
  for (size_t i = 0; i < g.metadata.size(); ++i) {
    const gguf::MetadataEntry& e = g.metadata[i];
    if (!split_keys && IsSplitKey(e.key)) continue;
    if (e.value.elements_as_keys || e.value.type == ValueType::kObject) {
      Fail(ErrorCode::kUnsupported, "metadata key '" + std::string(e.key) + "' is gguf-py's object experiment, which no GGUF reader of today reads; it is not written");
    }
    const uint64_t begin = e.offset + 8 + e.key.size();
    const uint64_t stop = i + 1 < g.metadata.size() ? g.metadata[i + 1].offset : end;
    out.push_back({std::string(e.key), std::string(reinterpret_cast<const char*>(data + begin), stop - begin)});
  }
  return out;
}

// The ggml type of a view and its ne (ggml's order, block types counted in values), or an error
// naming the tensor and what GGUF cannot hold.
struct Planned {
  const NamedTensor* tensor;
  std::string name;  // as safetensors names it (FlatName): "<frida>", "model/w", not the key path
  const gguf::GgmlType* type;
  std::vector<uint64_t> ne;
  uint64_t bytes;
  uint64_t offset;  // from the data section
};

Planned Plan(const NamedTensor& t) {
  const TensorView& v = *t.view;
  const std::string who = "'" + t.key + "'";
  std::string name = FlatName(t.key);
  if (name.size() > gguf::kMaxTensorNameBytes) {
    Fail(ErrorCode::kUnsupported, who + ": a GGUF tensor name is at most " + std::to_string(gguf::kMaxTensorNameBytes) +
                                      " bytes (ggml's GGML_MAX_NAME); this one is " + std::to_string(name.size()));
  }
  if (!v.has_data) Fail(ErrorCode::kUnsupported, who + ": a meta tensor (shape only) has no bytes for GGUF");
  const gguf::GgmlType* type = gguf::GgmlTypeOf(v.dtype);
  if (type == nullptr) {
    Fail(ErrorCode::kUnsupported, who + ": GGUF has no type for " + std::string(Name(v.dtype)) +
                                      " (ggml holds F32, F16, BF16, F64, I8-I64 and its block types; --dtype float32 converts floats)");
  }
  if (v.shape.size() > gguf::kMaxDims) {
    Fail(ErrorCode::kUnsupported, who + ": " + std::to_string(v.shape.size()) + " dimensions " + ShapeString(v.shape) +
                                      "; a GGUF tensor has at most " + std::to_string(gguf::kMaxDims));
  }
  std::vector<uint64_t> ne;
  for (size_t d = v.shape.size(); d-- > 0;) ne.push_back(static_cast<uint64_t>(v.shape[d]));
  if (type->quantized()) {
    if (v.byte_order == ByteOrder::kBig) Fail(ErrorCode::kUnsupported, who + ": a big-endian file's blocks are not rewritten");
    if (ne.empty() || ne[0] % type->block_bytes() != 0) {
      Fail(ErrorCode::kUnsupported, who + ": its last dimension is not whole " + std::string(type->name) + " blocks");
    }
    ne[0] = ne[0] / type->block_bytes() * type->block_values();
  }
  return {&t, std::move(name), type, std::move(ne), v.nbytes(), 0};
}

ValueType TypeOfName(const std::string& name) {
  for (uint32_t t = 0; t <= static_cast<uint32_t>(ValueType::kF64); ++t) {
    if (gguf::ValueTypeName(static_cast<ValueType>(t)) == name && t != static_cast<uint32_t>(ValueType::kArray)) {
      return static_cast<ValueType>(t);
    }
  }
  Fail(ErrorCode::kUsage, "unknown GGUF type '" + name + "' (string, bool, u8, u16, u32, u64, i8, i16, i32, i64, f32, f64)");
}

// A scalar or string value given as text, encoded as its type and value.
std::string EncodeValue(const std::string& key, ValueType type, const std::string& text) {
  std::string out;
  AppendLe(out, static_cast<uint32_t>(type), 4);
  const std::string who = "'" + key + "': '" + text + "' is not ";
  auto whole = [&](auto parsed, const char* what) {
    decltype(parsed) v{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) Fail(ErrorCode::kUsage, who + "a " + what);
    return v;
  };
  switch (type) {
    case ValueType::kString:
      if (text.size() > gguf::kMaxStringBytes) Fail(ErrorCode::kUsage, "'" + key + "': a string over kMaxStringBytes");
      AppendString(out, text);
      break;
    case ValueType::kBool:
      if (text != "true" && text != "false" && text != "1" && text != "0") Fail(ErrorCode::kUsage, who + "a bool (true, false, 1, 0)");
      out.push_back(text == "true" || text == "1" ? 1 : 0);
      break;
    case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kU64: {
      const unsigned bytes = type == ValueType::kU8 ? 1 : type == ValueType::kU16 ? 2 : type == ValueType::kU32 ? 4 : 8;
      const uint64_t v = whole(uint64_t{}, "non-negative integer");
      if (bytes < 8 && v >> (8 * bytes) != 0) Fail(ErrorCode::kUsage, who + "within " + std::string(gguf::ValueTypeName(type)));
      AppendLe(out, v, bytes);
      break;
    }
    case ValueType::kI8: case ValueType::kI16: case ValueType::kI32: case ValueType::kI64: {
      const unsigned bytes = type == ValueType::kI8 ? 1 : type == ValueType::kI16 ? 2 : type == ValueType::kI32 ? 4 : 8;
      const int64_t v = whole(int64_t{}, "integer");
      const int64_t bound = bytes < 8 ? int64_t{1} << (8 * bytes - 1) : 0;
      if (bytes < 8 && (v < -bound || v >= bound)) Fail(ErrorCode::kUsage, who + "within " + std::string(gguf::ValueTypeName(type)));
      AppendLe(out, static_cast<uint64_t>(v), bytes);
      break;
    }
    case ValueType::kF32: {
      const double d = whole(double{}, "number");
      const float f = static_cast<float>(d);
      // A finite number beyond float's range would be written as inf: not the value given.
      if (std::isfinite(d) && !std::isfinite(f)) Fail(ErrorCode::kUsage, who + "within f32 (up to about 3.4e38)");
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      AppendLe(out, bits, 4);
      break;
    }
    case ValueType::kF64: {
      const double d = whole(double{}, "number");
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      AppendLe(out, bits, 8);
      break;
    }
    default: Fail(ErrorCode::kUnsupported, "'" + key + "': setting a value of type " + std::string(gguf::ValueTypeName(type)));
  }
  return out;
}

// A key trove is asked to write: gguf.md's keys are ASCII (lower_snake_case parts joined by dots),
// and llama.cpp and gguf-py print them as they are, so a control byte or a non-ASCII byte in one
// would reach their users' terminals. Keys a GGUF source already holds are kept as they are
// (nothing lost) and can still be deleted.
void CheckNewKey(const std::string& key) {
  if (key.empty() || key.size() > gguf::kMaxKeyBytes) Fail(ErrorCode::kUsage, "a GGUF key is 1 to 65535 bytes ('" + key + "')");
  for (const char c : key) {
    if (c < 0x21 || c > 0x7E) {
      Fail(ErrorCode::kUsage, "'" + key + "': a GGUF key is printable ASCII without spaces (gguf.md: lower_snake_case parts joined by '.')");
    }
  }
}

void ApplyEdits(std::vector<Entry>& entries, const std::vector<GgufMetadataEdit>& edits) {
  for (const GgufMetadataEdit& edit : edits) {
    if (edit.key.empty() || edit.key.size() > gguf::kMaxKeyBytes) Fail(ErrorCode::kUsage, "a GGUF key is 1 to 65535 bytes");
    if (!edit.remove) CheckNewKey(edit.key);
    auto at = std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.key == edit.key; });
    if (edit.remove) {
      if (at == entries.end()) Fail(ErrorCode::kNotFound, "no metadata key '" + edit.key + "' to delete");
      entries.erase(at);
      continue;
    }
    // A new key is a string unless --type says otherwise; general.alignment is always a u32.
    ValueType type = edit.key == "general.alignment" ? ValueType::kU32 : ValueType::kString;
    if (!edit.type.empty()) {
      type = TypeOfName(edit.type);
    } else if (at != entries.end()) {
      type = static_cast<ValueType>(LoadLe32(reinterpret_cast<const uint8_t*>(at->typed_value.data())));
      if (type == ValueType::kArray) Fail(ErrorCode::kUnsupported, "'" + edit.key + "' holds an array: trove gguf set writes strings and scalars (--type gives another type)");
    }
    std::string typed = EncodeValue(edit.key, type, edit.value);
    if (edit.key == "general.alignment") {
      const uint64_t a = type == ValueType::kU32 ? LoadLe32(reinterpret_cast<const uint8_t*>(typed.data()) + 4) : 0;
      if (a == 0 || (a & (a - 1)) != 0 || a > gguf::kMaxAlignment) {
        Fail(ErrorCode::kUsage, "general.alignment is a u32 power of two up to 1 MiB (ggml's cap)");
      }
    }
    if (at != entries.end()) at->typed_value = std::move(typed);
    else entries.push_back({edit.key, std::move(typed)});
  }
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// A u16/i32 metadata value: its type, then its bytes.
std::string TypedInteger(ValueType type, uint64_t value, unsigned bytes) {
  std::string out;
  AppendLe(out, static_cast<uint32_t>(type), 4);
  AppendLe(out, value, bytes);
  return out;
}

// general.file_type (llama.cpp's llama_ftype: which type the model's weights are) of tensors of
// these dtypes: float32 alone is ALL_F32; otherwise the one other type, float32 tensors (norms,
// biases) aside, when llama_ftype has a "mostly" value for it; none for a mix (Q4_K_M's Q4_K and
// Q6_K, say): which mix it is cannot be told from the types. The values are the file format's.
std::optional<uint32_t> FileTypeOf(const std::vector<NamedTensor>& tensors) {
  static constexpr std::pair<DType, uint32_t> kMostly[] = {
      {DType::kFloat16, 1},    {DType::kGgmlQ4_0, 2},    {DType::kGgmlQ4_1, 3},    {DType::kGgmlQ8_0, 7},
      {DType::kGgmlQ5_0, 8},   {DType::kGgmlQ5_1, 9},    {DType::kGgmlQ6_K, 18},   {DType::kGgmlIQ4_NL, 25},
      {DType::kGgmlIQ4_XS, 30}, {DType::kBFloat16, 32},  {DType::kGgmlTQ1_0, 36},  {DType::kGgmlTQ2_0, 37}};
  std::set<DType> others;
  for (const NamedTensor& t : tensors)
    if (t.view->dtype != DType::kFloat32) others.insert(t.view->dtype);
  if (others.empty()) return 0;
  if (others.size() > 1) return std::nullopt;
  for (const auto& [dtype, value] : kMostly)
    if (dtype == *others.begin()) return value;
  return std::nullopt;
}

// One GGUF file: the header (entries, then the tensor infos at their planned offsets), then each
// tensor's bytes padded to the alignment, through a temporary renamed when whole.
void WriteFile(const std::string& path, const std::vector<Entry>& entries, const std::vector<Planned>& plan, uint32_t alignment,
               Durability durability, ProgressReporter& progress) {
  std::string head = "GGUF";
  AppendLe(head, kWrittenVersion, 4);
  AppendLe(head, plan.size(), 8);
  AppendLe(head, entries.size(), 8);
  for (const Entry& e : entries) {
    AppendString(head, e.key);
    head += e.typed_value;
  }
  for (const Planned& p : plan) {
    AppendString(head, p.name);
    AppendLe(head, p.ne.size(), 4);
    for (uint64_t n : p.ne) AppendLe(head, n, 8);
    AppendLe(head, p.type->id, 4);
    AppendLe(head, p.offset, 8);
  }
  head.append(AlignUp(head.size(), alignment) - head.size(), '\0');

  AtomicFile file(path, durability);
  file.Write(head.data(), head.size());
  const std::string zeros(alignment, '\0');
  for (const Planned& p : plan) {
    WithContext("tensor '" + p.tensor->key + "'", [&] {
      const TensorView& v = *p.tensor->view;
      if (std::optional<SharedBytes> stored = v.StoredBytes()) {
        // Run by run: mapped ranges (an assembled tensor's pieces too) are copied by the kernel.
        stored->ForEachRun([&](const uint8_t* data, size_t size) { file.Write(data, size); });
      } else {
        v.ForEachChunk([&](const uint8_t* data, size_t size) { file.Write(data, size); });
      }
    });
    const uint64_t padded = AlignUp(p.bytes, alignment);
    file.Write(zeros.data(), padded - p.bytes);
    progress.Add(padded);
  }
  file.Commit();
}

}  // namespace

void WriteGguf(const Document& doc, const std::string& destination, const GgufWriteOptions& options) {
  RefuseOrDropValues(doc, "GGUF", options, "; --metadata KEY=VALUE writes string metadata");
  std::vector<Entry> entries;
  if (!options.source_gguf.empty()) entries = SourceEntries(options.source_gguf, options.source_size, options.split_keys_kept);
  ApplyEdits(entries, options.config_metadata);
  // A source's general.file_type names the types it had: once --dtype converted tensors it is
  // the written tensors' (FileTypeOf), or gone when no one value names them.
  const auto file_type = std::find_if(entries.begin(), entries.end(), [](const Entry& e) { return e.key == "general.file_type"; });
  const bool converted = std::any_of(doc.tensors.begin(), doc.tensors.end(), [](const NamedTensor& t) { return t.view->cast_source != nullptr; });
  if (file_type != entries.end() && converted) {
    if (const std::optional<uint32_t> value = FileTypeOf(doc.tensors)) file_type->typed_value = TypedInteger(ValueType::kU32, *value, 4);
    else entries.erase(file_type);
  }
  for (const auto& kv : options.metadata) {
    const std::string& key = kv.first;  // a named reference: clang 14 cannot capture a structured binding
    const std::string& value = kv.second;
    if (key == "general.alignment") Fail(ErrorCode::kUsage, "general.alignment is a u32 power of two, not a string: it is kept from a GGUF source (else 32)");
    CheckNewKey(key);
    std::string typed;
    AppendLe(typed, static_cast<uint32_t>(ValueType::kString), 4);
    AppendString(typed, value);
    auto same = std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.key == key; });
    if (same != entries.end()) same->typed_value = std::move(typed);
    else entries.push_back({key, std::move(typed)});
  }
  ApplyEdits(entries, options.edits);
  uint32_t alignment = gguf::kDefaultAlignment;
  for (const Entry& e : entries) {
    if (e.key != "general.alignment") continue;
    // The parse (or ApplyEdits) checked it: a u32 power of two within kMaxAlignment.
    alignment = static_cast<uint32_t>(LoadLe32(reinterpret_cast<const uint8_t*>(e.typed_value.data()) + 4));
  }

  if (doc.tensors.size() > gguf::kMaxTensors) Fail(ErrorCode::kLimit, std::to_string(doc.tensors.size()) + " tensors: GGUF readers take at most 2^20");
  std::vector<Planned> plan;
  std::set<std::string> names;
  uint64_t data_bytes = 0;
  for (const NamedTensor& t : doc.tensors) {
    Planned p = Plan(t);
    if (!names.insert(p.name).second) Fail(ErrorCode::kUnsupported, "'" + t.key + "': a second tensor named '" + p.name + "'");
    p.offset = data_bytes;
    data_bytes = AlignUp(data_bytes + p.bytes, alignment);
    plan.push_back(std::move(p));
  }
  WithFile(doc.path, [&] { CheckExpansion(doc.tensors, /*views_kept=*/false); });  // the source's to say
  ProgressReporter progress(options.progress, data_bytes);
  if (options.max_part_bytes == 0) {
    WriteFile(destination, entries, plan, alignment, options.durability, progress);
    progress.Finish();
    return;
  }

  // Parts as llama.cpp's gguf-split cuts them: tensors in order fill a part until the next one
  // (its bytes padded to the alignment) would pass the maximum; a larger tensor has a part of its
  // own. Every part holds at least one tensor.
  std::vector<std::vector<Planned>> parts;
  uint64_t filled = 0;
  for (const Planned& p : plan) {
    const uint64_t padded = AlignUp(p.bytes, alignment);
    if (parts.empty() || (filled > 0 && filled + padded > options.max_part_bytes)) {
      parts.emplace_back();
      filled = 0;
    }
    parts.back().push_back(p);
    parts.back().back().offset = filled;
    filled += padded;
  }
  if (parts.empty()) parts.emplace_back();  // no tensors: one part of metadata
  if (parts.size() > gguf::kMaxSplitParts) {
    Fail(ErrorCode::kLimit, std::to_string(parts.size()) + " parts of at most " + std::to_string(options.max_part_bytes) +
                                " bytes: more than the " + std::to_string(gguf::kMaxSplitParts) + " a split model may have (--max-shard-size larger)");
  }
  const std::filesystem::path dest(destination);
  std::string stem = dest.filename().string();
  if (stem.ends_with(".gguf")) stem.resize(stem.size() - 5);
  if (stem.empty()) Fail(ErrorCode::kUsage, "'" + destination + "': the parts are named <name>-00001-of-0000N.gguf, and the name is empty");
  std::error_code ec;
  const std::string directory = std::filesystem::absolute(dest.parent_path().empty() ? "." : dest.parent_path(), ec).lexically_normal().string();
  AtomicDirectory out(directory, options.durability, OutputKind::kFilesInDirectory);
  for (size_t i = 0; i < parts.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "-%05zu-of-%05zu.gguf", i + 1, parts.size());
    // The model's metadata in the first part only; split.* in every one (gguf-split's keys and types).
    std::vector<Entry> part_entries = i == 0 ? entries : std::vector<Entry>{};
    part_entries.push_back({"split.no", TypedInteger(ValueType::kU16, i, 2)});
    part_entries.push_back({"split.count", TypedInteger(ValueType::kU16, parts.size(), 2)});
    part_entries.push_back({"split.tensors.count", TypedInteger(ValueType::kI32, plan.size(), 4)});
    const std::string file = stem + name;
    WithFile(file, [&] {
      WriteFile((std::filesystem::path(out.path()) / file).string(), part_entries, parts[i], alignment, options.durability, progress);
    });
  }
  progress.Finish();
  out.Commit();
}

void EditGgufMetadata(const std::string& path, const std::vector<GgufMetadataEdit>& edits, const WriteOptions& options) {
  WithFile(path, [&] {
    const Document doc = ReadGgufFile(MappedFile::Open(path));  // a split model's part alone
    GgufWriteOptions o;
    o.split_keys_kept = true;
    static_cast<WriteOptions&>(o) = options;
    o.source_gguf = path;
    o.source_size = doc.file_size;
    o.edits = edits;
    WriteGguf(doc, path, o);
  });
}

}  // namespace trove
