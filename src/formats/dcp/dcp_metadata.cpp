// DCP's .metadata pickle read as data: the allowlist (DcpResolver) and the walk from its
// dataclasses to DcpMetadata.
#include "formats/dcp/dcp_metadata.h"

#include <map>
#include <optional>
#include <string_view>

#include "formats/pt/torch_resolver.h"
#include "pickle/pickle_scan.h"
#include "trove/error.h"
#include "trove/unpickler.h"

namespace trove {
namespace {

// The two module paths of DCP: torch 1.13's prototype and torch >= 2.0's.
constexpr std::string_view kModules[] = {"torch.distributed._shard.checkpoint", "torch.distributed.checkpoint"};
// The dataclasses of `<module>.metadata` a Metadata is made of.
constexpr std::string_view kMetadataClasses[] = {"Metadata",        "TensorStorageMetadata", "ChunkStorageMetadata",
                                                 "BytesStorageMetadata", "MetadataIndex",  "TensorProperties",
                                                 "StorageMeta"};
// TensorProperties and its memory-format enum lived in sharded_tensor's metadata until torch 2.2.
constexpr std::string_view kShardedTensorMetadata = "torch.distributed._shard.sharded_tensor.metadata";
constexpr std::string_view kMemoryFormatMembers[] = {"TORCH_CONTIGUOUS_FORMAT", "TORCH_CHANNELS_LAST",
                                                     "TORCH_PRESERVE_FORMAT"};

// The DCP class `dotted` names ("Metadata", "_StorageInfo", ...), or nullopt.
std::optional<std::string> DcpClass(std::string_view dotted) {
  const size_t dot = dotted.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view module = dotted.substr(0, dot), name = dotted.substr(dot + 1);
  for (std::string_view m : kModules) {
    if (module == std::string(m) + ".metadata") {
      for (std::string_view c : kMetadataClasses)
        if (name == c) return std::string(name);
    }
    if (module == std::string(m) + ".filesystem" && name == "_StorageInfo") return std::string(name);
  }
  if (module == kShardedTensorMetadata && name == "TensorProperties") return std::string(name);
  return std::nullopt;
}

bool IsMemoryFormatEnum(std::string_view dotted) {
  constexpr std::string_view kEnum = ".MEM_FORMAT_ENCODING";  // in kShardedTensorMetadata
  return (dotted.size() == kShardedTensorMetadata.size() + kEnum.size() && dotted.starts_with(kShardedTensorMetadata) &&
          dotted.ends_with(kEnum)) ||
         dotted == "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING";
}

// Only what a .metadata holds: DCP's dataclasses, torch.Size, dtypes, the strided layout
// (torch.serialization._get_layout('torch.strided')), the memory-format enum's members and
// pathlib's paths (StorageMeta.checkpoint_id), plus the plain data of Python the base reads.
// Strict: any other name is refused by name, and no tensor or storage can appear.
class DcpResolver : public TorchResolver {
 public:
  DcpResolver() : TorchResolver(PicklePolicy::kStrict) {}

  Value* Global(const std::string& module, const std::string& name, bool& allowed, ValueArena& arena) override {
    const std::string dotted = module + "." + name;
    if (DcpClass(dotted) || IsMemoryFormatEnum(dotted) || IsPath(dotted)) {
      allowed = true;
      return arena.Global(dotted);
    }
    const bool torch_name = dotted == "torch.Size" || dotted == "torch.serialization._get_layout" ||
                            (module == "torch" && (name == "strided" || DTypeFromTorchString(dotted)));
    if (torch_name) return TorchResolver::Global(module, name, allowed, arena);
    return DataResolver::Global(module, name, allowed, arena);
  }

  Value* Call(Value* callable, Value* args, ValueArena& arena) override {
    if (callable->kind == ValueKind::kGlobal) {
      const std::string& fn = callable->type_name;
      if (DcpClass(fn)) return Make(callable, args, false, arena);
      if (IsMemoryFormatEnum(fn)) {
        // Python before 3.11 pickles a member as EnumClass(value).
        const auto& a = args->items;
        if (args->kind == ValueKind::kTuple && a.size() == 1 && a[0]->kind == ValueKind::kInt && !a[0]->is_big_int() &&
            a[0]->integer >= 0 && a[0]->integer < 3) {
          return arena.Global(fn + "." + std::string(kMemoryFormatMembers[a[0]->integer]));
        }
        Fail(ErrorCode::kRefused, "refused call of '" + fn + "': not one of its members' values");
      }
      if (IsPath(fn)) {
        std::string path;
        for (const Value* part : args->items) {
          if (part->kind != ValueKind::kStr) Fail(ErrorCode::kRefused, "refused call of '" + fn + "' with a non-str part");
          if (!path.empty() && !path.ends_with('/')) path += '/';
          path += part->text;
        }
        return arena.Str(path);
      }
    }
    return TorchResolver::Call(callable, args, arena);
  }

  Value* NewObject(Value* cls, Value* args, ValueArena& arena) override {
    if (cls->kind == ValueKind::kGlobal && DcpClass(cls->type_name)) return Make(cls, args, true, arena);
    return TorchResolver::NewObject(cls, args, arena);
  }

  Value* Build(Value* object, Value* state, ValueArena& arena) override {
    if (object->kind == ValueKind::kObject && DcpClass(object->type_name)) {
      if (object->state != nullptr) Fail(ErrorCode::kCorrupt, "'" + object->type_name + "' built twice");
      object->state = state;
      return object;
    }
    return TorchResolver::Build(object, state, arena);
  }

  Value* PersistentLoad(Value* /*pid*/, ValueArena& /*arena*/) override {
    Fail(ErrorCode::kRefused, "refused persistent id: a DCP .metadata is a plain pickle and holds none");
  }

 protected:
  bool ReadsEnumMembers() const override { return true; }
  bool EnumMember(const std::string& enum_class, const std::string& member) const override {
    if (!IsMemoryFormatEnum(enum_class)) return false;
    for (std::string_view m : kMemoryFormatMembers)
      if (member == m) return true;
    return false;
  }

 private:
  static bool IsPath(std::string_view dotted) {
    return dotted == "pathlib.PosixPath" || dotted == "pathlib.PurePosixPath" || dotted == "pathlib.WindowsPath" ||
           dotted == "pathlib.PureWindowsPath";
  }
  static Value* Make(Value* cls, Value* args, bool new_object, ValueArena& arena) {
    Value* v = arena.Object(cls->type_name, args);
    v->new_object = new_object;
    v->module_size = cls->module_size;
    return v;
  }
};

[[noreturn]] void Bad(const std::string& why) { throw Error(ErrorCode::kCorrupt, why); }

// The DCP class an object is ("Metadata"), or "" for anything else.
std::string ClassOf(const Value* v) {
  if (v == nullptr || v->kind != ValueKind::kObject) return "";
  return DcpClass(v->type_name).value_or("");
}

const Value* Expect(const Value* v, std::string_view cls, const std::string& where) {
  if (ClassOf(v) != cls) {
    Bad(where + " is " + (v == nullptr ? std::string("missing")
                          : v->kind == ValueKind::kObject || v->kind == ValueKind::kGlobal ? "'" + v->type_name + "'"
                                                                                          : "a " + std::string(KindName(v->kind))) +
        ", not DCP's " + std::string(cls));
  }
  return v;
}

// A dataclass's field from its BUILD state (a dict of str keys), or null.
const Value* Field(const Value* object, std::string_view name) {
  const Value* state = object->state;
  if (state == nullptr) return nullptr;
  if (state->kind == ValueKind::kTuple && state->items.size() == 2) state = state->items[0];  // (dict, slots)
  return state->kind == ValueKind::kDict ? state->Find(name) : nullptr;
}

const Value* RequireField(const Value* object, std::string_view name, const std::string& where) {
  const Value* v = Field(object, name);
  if (v == nullptr) Bad(where + " has no field '" + std::string(name) + "'");
  return v;
}

std::vector<int64_t> SizeOf(const Value* v, const std::string& where) {
  if (v == nullptr || (v->kind != ValueKind::kTuple && v->kind != ValueKind::kList)) Bad(where + " is not a torch.Size");
  if (v->items.size() > kMaxTensorRank) {
    throw Error(ErrorCode::kLimit, where + " has " + std::to_string(v->items.size()) +
                                       " dimensions, more than kMaxTensorRank (" + std::to_string(kMaxTensorRank) + ")");
  }
  std::vector<int64_t> out;
  for (const Value* x : v->items) {
    if (x->kind != ValueKind::kInt || x->is_big_int() || x->integer < 0) Bad(where + " holds a value that is no size");
    out.push_back(x->integer);
  }
  return out;
}

uint64_t Unsigned(const Value* v, const std::string& where) {
  if (v == nullptr || v->kind != ValueKind::kInt || v->is_big_int() || v->integer < 0) Bad(where + " is not a byte count");
  return static_cast<uint64_t>(v->integer);
}

// TensorProperties: its __getstate__ tuple (dtype, layout, requires_grad, memory format,
// pin_memory), or a dict of those fields from a writer without __getstate__.
void ReadProperties(const Value* props, DcpItem& item, const std::string& where) {
  Expect(props, "TensorProperties", where + ": its properties");
  const Value* state = props->state;
  const Value *dtype = nullptr, *layout = nullptr, *grad = nullptr;
  if (state != nullptr && state->kind == ValueKind::kTuple && state->items.size() == 5) {
    dtype = state->items[0];
    layout = state->items[1];
    grad = state->items[2];
  } else if (state != nullptr && state->kind == ValueKind::kDict) {
    dtype = state->Find("dtype");
    layout = state->Find("layout");
    grad = state->Find("requires_grad");
  } else {
    Bad(where + ": its TensorProperties state is neither DCP's tuple nor a dict");
  }
  std::optional<DType> dt;
  if (dtype != nullptr && dtype->kind == ValueKind::kGlobal) dt = DTypeFromTorchString(dtype->type_name);
  if (!dt) Bad(where + ": its dtype is not a torch dtype");
  item.dtype = *dt;
  if (layout != nullptr && !(layout->kind == ValueKind::kGlobal && layout->type_name == "torch.strided")) {
    throw Error(ErrorCode::kUnsupported, where + ": layout " +
                                             (layout->kind == ValueKind::kGlobal ? "'" + layout->type_name + "'"
                                                                                 : std::string(KindName(layout->kind))) +
                                             " is not read (only strided tensors)");
  }
  item.requires_grad = grad != nullptr && grad->kind == ValueKind::kBool && grad->boolean;
}

}  // namespace

DcpMetadata ParseDcpMetadata(const uint8_t* data, uint64_t size) {
  if (size > kMaxDcpMetadataBytes) {
    throw Error(ErrorCode::kLimit, std::to_string(size) + " bytes exceed the " + std::to_string(kMaxDcpMetadataBytes) +
                                       "-byte cap (kMaxDcpMetadataBytes)");
  }
  ValueArena arena;
  DcpResolver resolver;
  Unpickler unpickler(data, size, arena, resolver);
  const Value* root = unpickler.Load();
  Expect(root, "Metadata", "the pickle");
  DcpMetadata out;
  out.module = root->type_name.substr(0, root->type_name.size() - std::string_view(".metadata.Metadata").size());
  if (const Value* version = Field(root, "version"); version != nullptr && version->kind == ValueKind::kStr) {
    out.version = version->text;
  }
  const Value* items = RequireField(root, "state_dict_metadata", "Metadata");
  if (items->kind != ValueKind::kDict) Bad("Metadata.state_dict_metadata is not a dict");
  if (items->entries.size() > kMaxDcpItems) {
    throw Error(ErrorCode::kLimit, std::to_string(items->entries.size()) + " items exceed kMaxDcpItems (" +
                                       std::to_string(kMaxDcpItems) + ")");
  }
  std::map<std::string, size_t> by_fqn;
  // Each chunk by its item and offsets, to receive its storage.
  std::map<std::pair<size_t, std::vector<int64_t>>, size_t> chunk_at;
  std::vector<std::vector<bool>> stored;
  uint64_t coordinates = 0;
  for (const auto& [key, value] : items->entries) {
    if (key->kind != ValueKind::kStr) Bad("Metadata.state_dict_metadata has a key that is not a str");
    DcpItem item;
    item.fqn = key->text;
    const std::string where = "item '" + item.fqn + "'";
    const std::string cls = ClassOf(value);
    if (cls == "TensorStorageMetadata") {
      item.tensor = true;
      ReadProperties(RequireField(value, "properties", where), item, where);
      item.shape = SizeOf(RequireField(value, "size", where), where + ": its size");
      const Value* chunks = RequireField(value, "chunks", where);
      if (chunks->kind != ValueKind::kList) Bad(where + ": its chunks are not a list");
      out.chunks += chunks->items.size();
      if (out.chunks > kMaxDcpChunks) {
        throw Error(ErrorCode::kLimit, "more than kMaxDcpChunks (" + std::to_string(kMaxDcpChunks) + ") chunks declared");
      }
      for (const Value* c : chunks->items) {
        Expect(c, "ChunkStorageMetadata", where + ": a chunk");
        coordinates += item.shape.size();
        if (coordinates > kMaxDcpChunkCoordinates) {
          throw Error(ErrorCode::kLimit, "more than kMaxDcpChunkCoordinates (" + std::to_string(kMaxDcpChunkCoordinates) +
                                             ") chunk offsets and sizes declared");
        }
        DcpChunk chunk;
        chunk.box.offsets = SizeOf(RequireField(c, "offsets", where), where + ": a chunk's offsets");
        chunk.box.sizes = SizeOf(RequireField(c, "sizes", where), where + ": a chunk's sizes");
        item.chunks.push_back(std::move(chunk));
      }
    } else if (cls != "BytesStorageMetadata") {
      Expect(value, "TensorStorageMetadata or BytesStorageMetadata", where);
    }
    if (!by_fqn.emplace(item.fqn, out.items.size()).second) Bad(where + " is listed twice");
    stored.emplace_back(item.tensor ? item.chunks.size() : 1, false);
    for (size_t i = 0; i < item.chunks.size(); ++i) {
      if (!chunk_at.emplace(std::make_pair(out.items.size(), item.chunks[i].box.offsets), i).second) {
        Bad(where + ": two chunks start at " + DcpTupleText(item.chunks[i].box.offsets));
      }
    }
    out.items.push_back(std::move(item));
  }
  const Value* storage = RequireField(root, "storage_data", "Metadata");
  if (storage->kind != ValueKind::kDict) Bad("Metadata.storage_data is not a dict (not a file-system checkpoint)");
  for (const auto& [key, value] : storage->entries) {
    Expect(key, "MetadataIndex", "a key of Metadata.storage_data");
    const Value* fqn = RequireField(key, "fqn", "a MetadataIndex");
    if (fqn->kind != ValueKind::kStr) Bad("a MetadataIndex's fqn is not a str");
    const std::string where = "storage of item '" + fqn->text + "'";
    auto item_at = by_fqn.find(fqn->text);
    if (item_at == by_fqn.end()) Bad(where + ": no such item in Metadata.state_dict_metadata");
    DcpItem& item = out.items[item_at->second];
    Expect(value, "_StorageInfo", where);
    DcpStorage s;
    const Value* path = RequireField(value, "relative_path", where);
    if (path->kind != ValueKind::kStr) Bad(where + ": its relative_path is not a str");
    s.file = path->text;
    s.offset = Unsigned(RequireField(value, "offset", where), where + ": its offset");
    s.length = Unsigned(RequireField(value, "length", where), where + ": its length");
    if (const Value* t = Field(value, "transform_descriptors");
        t != nullptr && t->kind != ValueKind::kNone && !(t->is_container() && t->items.empty())) {
      throw Error(ErrorCode::kUnsupported, where + ": its bytes pass through stream transforms (such as zstd), "
                                                   "which trove does not read");
    }
    size_t slot = 0;
    if (item.tensor) {
      const Value* offset = Field(key, "offset");
      const std::vector<int64_t> offsets = SizeOf(offset, where + ": its chunk offsets");
      auto c = chunk_at.find({item_at->second, offsets});
      if (c == chunk_at.end()) Bad(where + ": no chunk of the item starts at " + DcpTupleText(offsets));
      slot = c->second;
      item.chunks[slot].storage = s;
    } else {
      item.object = s;
    }
    if (stored[item_at->second][slot]) Bad(where + ": stored twice");
    stored[item_at->second][slot] = true;
  }
  for (size_t i = 0; i < out.items.size(); ++i) {
    for (size_t c = 0; c < stored[i].size(); ++c) {
      if (stored[i][c]) continue;
      const DcpItem& item = out.items[i];
      Bad("item '" + item.fqn + "'" + (item.tensor ? ": its chunk at " + DcpTupleText(item.chunks[c].box.offsets) : "") +
          " has no entry in Metadata.storage_data");
    }
  }
  return out;
}

void ScanDcpMetadata(CheckReport& report, const std::string& entry, const uint8_t* data, uint64_t size) {
  DcpResolver resolver;
  ScanPickle(report, entry, data, size, resolver);
}

}  // namespace trove
