// FSDP / verl per-rank files read as one checkpoint (formats/fsdp/fsdp_reader.h).
#include "formats/fsdp/fsdp_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/confined_directory.h"
#include "core/progress.h"
#include "formats/dcp/dcp_layout.h"
#include "formats/pt/pt_checks.h"
#include "formats/pt/pt_reader.h"
#include "trove/error.h"
#include "trove/zip_reader.h"

namespace trove {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kShardedTensor = "torch.distributed._shard.sharded_tensor.api.ShardedTensor";
constexpr std::string_view kMemFormat = "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING";
// What a torch 1.13 ShardedTensor pickles as (its __getstate__: local shards, metadata, process
// group state, sharding spec), its ProcessGroupState reached as getattr(ShardedTensor, ...).
constexpr std::string_view kShardedTensorClasses[] = {
    "torch.distributed._shard.sharded_tensor.api.ShardedTensor",
    "torch.distributed._shard.sharded_tensor.api.ShardedTensor.ProcessGroupState",
    "torch.distributed._shard.sharded_tensor.shard.Shard",
    "torch.distributed._shard.metadata.ShardMetadata",
    "torch.distributed._shard.sharded_tensor.metadata.ShardedTensorMetadata",
    "torch.distributed._shard.sharded_tensor.metadata.TensorProperties",
    "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING",
    "torch.distributed._shard.sharding_spec.chunk_sharding_spec.ChunkShardingSpec",
    "torch.distributed._shard.sharding_spec.api.EnumerableShardingSpec",
    "torch.distributed.remote_device._remote_device",
};
constexpr std::string_view kMemFormatMembers[] = {"TORCH_CONTIGUOUS_FORMAT", "TORCH_CHANNELS_LAST", "TORCH_PRESERVE_FORMAT"};
// DTensor's modules: torch >= 2.5's public one and the private one before it, and what a DTensor
// pickles as inside them: its spec, the spec's tensor meta and placements, the device mesh.
constexpr std::string_view kDTensorModules[] = {"torch.distributed.tensor", "torch.distributed._tensor"};
constexpr std::string_view kDTensorNames[] = {"DTensor", "_api.DTensor", "api.DTensor"};
constexpr std::string_view kDTensorSpecNames[] = {
    "_dtensor_spec.DTensorSpec",     "_dtensor_spec.TensorMeta",     "placement_types.DTensorSpec",
    "placement_types.TensorMeta",    "placement_types.Shard",        "placement_types.Replicate",
    "placement_types._StridedShard", "placement_types.Partial",      "placement_types._Partial"};
constexpr std::string_view kDeviceMeshes[] = {"torch.distributed.device_mesh.DeviceMesh",
                                              "torch.distributed._tensor.device_mesh.DeviceMesh"};

bool InModules(std::string_view dotted, const std::string_view* names, size_t count) {
  for (std::string_view m : kDTensorModules) {
    if (!dotted.starts_with(m) || dotted.size() <= m.size() || dotted[m.size()] != '.') continue;
    const std::string_view rest = dotted.substr(m.size() + 1);
    for (size_t i = 0; i < count; ++i)
      if (rest == names[i]) return true;
  }
  return false;
}

bool IsDTensorClass(std::string_view dotted) { return InModules(dotted, kDTensorNames, std::size(kDTensorNames)); }

// The classes read as data in a rank file (docs/security.md, "FSDP per-rank files").
bool FsdpDataClass(const std::string& dotted) {
  for (std::string_view c : kShardedTensorClasses)
    if (dotted == c) return true;
  for (std::string_view c : kDeviceMeshes)
    if (dotted == c) return true;
  return IsDTensorClass(dotted) || InModules(dotted, kDTensorSpecNames, std::size(kDTensorSpecNames));
}

// getattr(Class, 'NAME') as Python >= 3.11 pickles an enum member or a nested class.
bool FsdpClassAttribute(const std::string& cls, const std::string& member) {
  if (cls == kShardedTensor) return member == "ProcessGroupState";
  if (cls == kMemFormat) {
    for (std::string_view m : kMemFormatMembers)
      if (member == m) return true;
  }
  return false;
}

const PtKnownNames& FsdpNames() {
  static const PtKnownNames names{.enum_members = FsdpClassAttribute, .data_classes = FsdpDataClass};
  return names;
}

// ---- the files ---------------------------------------------------------------------------

// The files of one kind (`model_world_size_2_rank_{R}.pt`), by rank.
struct RankGroup {
  std::string pattern;  // the name with its rank as {R}
  std::string stem;     // what the name says the files hold ("model", "optim"; "" for rank_{R}.pt)
  std::optional<uint64_t> declared_world;  // verl's world_size_W
  std::map<uint64_t, std::string> files;
  std::string NameOf(uint64_t rank) const {
    std::string n = pattern;
    n.replace(n.find("{R}"), 3, std::to_string(rank));
    return n;
  }
};

std::vector<RankGroup> ListRankGroups(const std::string& directory) {
  static const std::regex rank_name(R"(^(.*?)(rank[_-]?)([0-9]{1,9})(\.(pt|pth|bin))$)");
  static const std::regex world_size(R"(_?world_size_([0-9]{1,9})_?)");
  std::map<std::string, RankGroup> groups;
  std::error_code ec;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, rank_name)) continue;
    const uint64_t rank = std::stoull(m[3].str());
    if (rank >= kMaxFsdpRanks) {
      throw Error(ErrorCode::kLimit, "'" + name + "': rank past kMaxFsdpRanks (" + std::to_string(kMaxFsdpRanks) + ")")
          .SetFile(directory);
    }
    const std::string pattern = m[1].str() + m[2].str() + "{R}" + m[4].str();
    RankGroup& g = groups[pattern];
    g.pattern = pattern;
    std::string prefix = m[1].str();
    std::smatch w;
    if (std::regex_search(prefix, w, world_size)) {
      g.declared_world = std::stoull(w[1].str());
      prefix = w.prefix().str() + (w.prefix().length() && w.suffix().length() ? "_" : "") + w.suffix().str();
    }
    while (!prefix.empty() && (prefix.back() == '_' || prefix.back() == '-')) prefix.pop_back();
    g.stem = prefix;
    auto [at, fresh] = g.files.emplace(rank, name);
    if (!fresh) {
      throw Error(ErrorCode::kCorrupt, "'" + at->second + "' and '" + name + "' both name rank " + std::to_string(rank))
          .SetFile(directory);
    }
  }
  std::vector<RankGroup> out;
  for (auto& [pattern, g] : groups) out.push_back(std::move(g));
  return out;
}

// Every rank from 0 to the highest (or to verl's declared world size) has its file.
uint64_t CheckRanks(const RankGroup& g, const std::string& directory) {
  const uint64_t highest = g.files.rbegin()->first;
  const uint64_t world = g.declared_world.value_or(highest + 1);
  if (g.declared_world && (world == 0 || highest >= world)) {
    throw Error(ErrorCode::kCorrupt, "'" + g.files.rbegin()->second + "': rank " + std::to_string(highest) +
                                         " in a world of " + std::to_string(world) + " (its name says)")
        .SetFile(directory);
  }
  if (world > kMaxFsdpRanks) {
    throw Error(ErrorCode::kLimit, "'" + g.pattern + "': a world of " + std::to_string(world) +
                                       " ranks, past kMaxFsdpRanks")
        .SetFile(directory);
  }
  for (uint64_t r = 0; r < world; ++r) {
    if (!g.files.count(r)) {
      throw Error(ErrorCode::kNotFound, "rank " + std::to_string(r) + "'s file '" + g.NameOf(r) + "' is missing (" +
                                            std::to_string(g.files.size()) + " of " + std::to_string(world) +
                                            " ranks' files are present)")
          .SetFile(directory);
    }
  }
  return world;
}

Document ReadRankFile(const ConfinedDirectory& dir, const std::string& name, const ReadOptions& options,
                      std::shared_ptr<ValueArena> arena, uint64_t& size) {
  const std::string path = (fs::path(dir.path()) / name).string();
  return WithFile(path, [&] {
    ConfinedFile file = dir.RequireFile(name);
    size = file.size;
    auto mapped = MappedFile::FromDescriptor(file.fd.release(), file.path, file.size);
    ZipReader zip(mapped, options.pickle_policy == PicklePolicy::kPermissive ? ZipDisagreement::kReport
                                                                            : ZipDisagreement::kRefuse);
    return ReadPtWithNames(zip, options, FsdpNames(), std::move(arena));
  });
}

// ---- the values --------------------------------------------------------------------------

bool IsShardedValue(const Value* v) {
  return v->kind == ValueKind::kObject && (v->type_name == kShardedTensor || IsDTensorClass(v->type_name));
}

std::string WhatIs(const Value* v) {
  if (v == nullptr) return "nothing";
  if (v->kind == ValueKind::kTensor) return "a tensor";
  if (v->kind == ValueKind::kObject) return "a '" + v->type_name + "'";
  return "a " + std::string(KindName(v->kind));
}

struct Leaf {
  std::string key;
  Value* value;
};

// The tensors and sharded values of a state dict by key path, in order; each node once.
std::vector<Leaf> TensorLeaves(Value* root) {
  std::vector<Leaf> out;
  std::unordered_set<const Value*> seen;
  struct Frame {
    Value* value;
    std::string key;
    size_t depth;
  };
  std::vector<Frame> stack{{root, "", 0}};
  while (!stack.empty()) {
    Frame f = std::move(stack.back());
    stack.pop_back();
    Value* v = f.value;
    if (!seen.insert(v).second) continue;
    if (v->kind == ValueKind::kTensor || IsShardedValue(v)) {
      out.push_back({std::move(f.key), v});
      continue;
    }
    const bool container = v->kind == ValueKind::kDict || v->kind == ValueKind::kList || v->kind == ValueKind::kTuple;
    if (!container) continue;
    if (f.depth >= kMaxFsdpNesting) {
      Fail(ErrorCode::kLimit, "'" + f.key + "': containers nested deeper than kMaxFsdpNesting (" +
                                  std::to_string(kMaxFsdpNesting) + ")");
    }
    auto join = [&](const std::string& c) { return f.key.empty() ? c : f.key + "/" + c; };
    if (v->kind == ValueKind::kDict) {
      const std::vector<std::string> keys = DictKeyComponents(*v);
      for (size_t i = v->entries.size(); i > 0; --i) stack.push_back({v->entries[i - 1].second, join(keys[i - 1]), f.depth + 1});
    } else {
      for (size_t i = v->items.size(); i > 0; --i) stack.push_back({v->items[i - 1], join(std::to_string(i - 1)), f.depth + 1});
    }
  }
  return out;
}

// Every tensor reachable from `root` (through containers, attributes and objects), each once.
template <class F>
void ForEachTensor(Value* root, F&& fn) {
  std::unordered_set<const Value*> seen;
  std::vector<Value*> stack{root};
  while (!stack.empty()) {
    Value* v = stack.back();
    stack.pop_back();
    if (v == nullptr || !seen.insert(v).second) continue;
    if (v->kind == ValueKind::kTensor) fn(*v->tensor);
    for (auto& [k, x] : v->entries) stack.push_back(x);
    for (Value* x : v->items) stack.push_back(x);
    stack.push_back(v->args);
    stack.push_back(v->state);
  }
}

// A dataclass's or object's field from its BUILD state: a dict, or (dict or None, slots dict).
const Value* Field(const Value* object, std::string_view name) {
  const Value* state = object == nullptr ? nullptr : object->state;
  if (state == nullptr) return nullptr;
  if (state->kind == ValueKind::kDict) return state->Find(name);
  if (state->kind == ValueKind::kTuple && state->items.size() == 2) {
    for (const Value* part : {state->items[1], state->items[0]}) {
      if (part->kind != ValueKind::kDict) continue;
      if (const Value* v = part->Find(name)) return v;
    }
  }
  return nullptr;
}

int64_t IntOf(const Value* v, const std::string& what) {
  if (v == nullptr || v->kind != ValueKind::kInt || v->is_big_int()) Fail(ErrorCode::kCorrupt, what + " is not an int");
  return v->integer;
}

std::vector<int64_t> SizesOf(const Value* v, const std::string& what) {
  if (v == nullptr || (v->kind != ValueKind::kTuple && v->kind != ValueKind::kList)) {
    Fail(ErrorCode::kCorrupt, what + " is not a tuple of sizes");
  }
  if (v->items.size() > kMaxTensorRank) Fail(ErrorCode::kLimit, what + " has more than kMaxTensorRank dimensions");
  std::vector<int64_t> out;
  for (const Value* x : v->items) {
    const int64_t s = IntOf(x, what);
    if (s < 0) Fail(ErrorCode::kCorrupt, what + " holds a negative size");
    out.push_back(s);
  }
  return out;
}

// One rank's piece of a global tensor: its box in the global tensor and its local tensor.
struct Piece {
  size_t rank = 0;
  DcpBox box;
  TensorView local;
};

// What one rank says of a value: the global shape and dtype, and the pieces it holds.
struct RankView {
  std::string kind;  // "a tensor", "a ShardedTensor", "a DTensor"
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  std::vector<Piece> pieces;
};

const TensorView& LocalTensor(const Value* v, const std::string& what) {
  if (v == nullptr || v->kind != ValueKind::kTensor) Fail(ErrorCode::kCorrupt, what + " is " + WhatIs(v) + ", not a tensor");
  const TensorView& t = *v->tensor;
  if (!t.has_data) Fail(ErrorCode::kUnsupported, what + " has no data (a meta tensor)");
  if (t.quantizer) Fail(ErrorCode::kUnsupported, what + " is quantized: not assembled");
  return t;
}

// _rebuild_wrapper_subclass's arguments: (class, dtype, size, stride, storage offset, layout,
// device, requires_grad): the global dtype and shape.
void WrapperGlobal(const Value* v, RankView& out) {
  const Value* a = v->args;
  if (a == nullptr || a->kind != ValueKind::kTuple || a->items.size() < 3) {
    Fail(ErrorCode::kCorrupt, "its wrapper's arguments are not (class, dtype, size, ...)");
  }
  const Value* dtype = a->items[1];
  std::optional<DType> dt = dtype->kind == ValueKind::kGlobal ? DTypeFromTorchString(dtype->type_name) : std::nullopt;
  if (!dt) Fail(ErrorCode::kCorrupt, "its dtype is not a torch dtype");
  out.dtype = *dt;
  out.shape = SizesOf(a->items[2], "its global size");
}

void CheckLocal(const TensorView& t, const RankView& out, const std::vector<int64_t>& sizes, const std::string& what) {
  if (t.dtype != out.dtype) {
    Fail(ErrorCode::kCorrupt, what + " is " + std::string(Name(t.dtype)) + ", the global tensor " +
                                  std::string(Name(out.dtype)));
  }
  if (t.shape != sizes) {
    Fail(ErrorCode::kCorrupt, what + " has shape " + DcpTupleText(t.shape) + ", its place in the global tensor " +
                                  DcpTupleText(out.shape) + " " + DcpTupleText(sizes));
  }
}

// A ShardedTensor: its state is (local shards, ShardedTensorMetadata, process group state,
// sharding spec[, init_rrefs]); each Shard holds its tensor and ShardMetadata (offsets, sizes).
RankView ReadShardedTensor(const Value* v, size_t rank) {
  RankView out;
  out.kind = "a ShardedTensor";
  WrapperGlobal(v, out);
  const Value* state = v->state;
  if (state == nullptr || state->kind != ValueKind::kTuple || state->items.empty() ||
      state->items[0]->kind != ValueKind::kList) {
    Fail(ErrorCode::kCorrupt, "its state is not (local shards, metadata, ...)");
  }
  const Value* shards = state->items[0];
  for (size_t i = 0; i < shards->items.size(); ++i) {
    const Value* shard = shards->items[i];
    const std::string what = "local shard " + std::to_string(i);
    if (shard->kind != ValueKind::kObject || shard->type_name != "torch.distributed._shard.sharded_tensor.shard.Shard") {
      Fail(ErrorCode::kCorrupt, what + " is " + WhatIs(shard) + ", not a Shard");
    }
    const Value* md = Field(shard, "metadata");
    Piece p;
    p.rank = rank;
    p.box.offsets = SizesOf(Field(md, "shard_offsets"), what + "'s offsets");
    p.box.sizes = SizesOf(Field(md, "shard_sizes"), what + "'s sizes");
    p.local = LocalTensor(Field(shard, "tensor"), what);
    CheckLocal(p.local, out, p.box.sizes, what);
    out.pieces.push_back(std::move(p));
  }
  return out;
}

// The ranks of a device mesh (its `mesh` tensor of ranks), and its shape.
std::vector<int64_t> MeshRanks(const Value* mesh, std::vector<int64_t>& shape) {
  const TensorView& t = LocalTensor(Field(mesh, "mesh"), "its device mesh's 'mesh'");
  if (t.dtype != DType::kInt64 && t.dtype != DType::kInt32) Fail(ErrorCode::kCorrupt, "its device mesh holds no int ranks");
  if (static_cast<uint64_t>(t.numel()) > kMaxFsdpRanks) Fail(ErrorCode::kLimit, "its device mesh has more than kMaxFsdpRanks ranks");
  shape = t.shape;
  const SharedBytes bytes = t.ContiguousLittleEndian();
  std::vector<int64_t> ranks(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (t.dtype == DType::kInt64) {
      std::memcpy(&ranks[i], bytes.data() + i * 8, 8);
    } else {
      int32_t r;
      std::memcpy(&r, bytes.data() + i * 4, 4);
      ranks[i] = r;
    }
  }
  return ranks;
}

std::string ShortClass(const std::string& dotted) { return dotted.substr(dotted.rfind('.') + 1); }

// A DTensor: its state holds `_local_tensor` and `_spec` (the device mesh and one placement per
// mesh dimension). The rank's box follows DTensor's own split of each Shard(dim) (torch.chunk's:
// ceil(size / n) per coordinate, the last ones shorter or empty); Replicate keeps the extent.
RankView ReadDTensor(const Value* v, size_t rank) {
  RankView out;
  out.kind = "a DTensor";
  WrapperGlobal(v, out);
  const Value* spec = Field(v, "_spec");
  if (spec == nullptr || spec->kind != ValueKind::kObject) Fail(ErrorCode::kCorrupt, "it has no _spec");
  const Value* placements = Field(spec, "placements");
  if (placements == nullptr || (placements->kind != ValueKind::kTuple && placements->kind != ValueKind::kList)) {
    Fail(ErrorCode::kCorrupt, "its spec has no placements");
  }
  std::vector<int64_t> mesh_shape;
  const std::vector<int64_t> ranks = MeshRanks(Field(spec, "mesh"), mesh_shape);
  if (mesh_shape.size() != placements->items.size()) {
    Fail(ErrorCode::kCorrupt, "its " + std::to_string(placements->items.size()) + " placements do not match its " +
                                  std::to_string(mesh_shape.size()) + "-dimensional device mesh");
  }
  auto at = std::find(ranks.begin(), ranks.end(), static_cast<int64_t>(rank));
  if (at == ranks.end()) Fail(ErrorCode::kCorrupt, "rank " + std::to_string(rank) + " is not in its device mesh");
  uint64_t flat = static_cast<uint64_t>(at - ranks.begin());
  std::vector<int64_t> coord(mesh_shape.size());
  for (size_t d = mesh_shape.size(); d > 0; --d) {
    coord[d - 1] = static_cast<int64_t>(flat % static_cast<uint64_t>(mesh_shape[d - 1]));
    flat /= static_cast<uint64_t>(mesh_shape[d - 1]);
  }
  Piece p;
  p.rank = rank;
  p.box.offsets.assign(out.shape.size(), 0);
  p.box.sizes = out.shape;
  for (size_t i = 0; i < placements->items.size(); ++i) {
    const Value* pl = placements->items[i];
    const std::string cls = pl->kind == ValueKind::kObject ? ShortClass(pl->type_name) : "";
    if (cls == "Replicate") continue;
    if (cls != "Shard") {
      Fail(ErrorCode::kUnsupported, "placement '" + (cls.empty() ? WhatIs(pl) : cls) + "' on mesh dimension " +
                                        std::to_string(i) + " is not read (Shard and Replicate are)");
    }
    int64_t dim = IntOf(Field(pl, "dim"), "a Shard's dim");
    if (dim < 0) dim += static_cast<int64_t>(out.shape.size());
    if (dim < 0 || dim >= static_cast<int64_t>(out.shape.size())) Fail(ErrorCode::kCorrupt, "a Shard's dim lies outside the tensor");
    const int64_t n = mesh_shape[i], extent = p.box.sizes[dim];
    const int64_t chunk = n == 0 ? 0 : (extent + n - 1) / n;
    const int64_t start = std::min(coord[i] * chunk, extent);
    p.box.offsets[dim] += start;
    p.box.sizes[dim] = std::min(chunk, extent - start);
  }
  p.local = LocalTensor(Field(v, "_local_tensor"), "its local tensor");
  CheckLocal(p.local, out, p.box.sizes, "its local tensor");
  out.pieces.push_back(std::move(p));
  return out;
}

RankView ReadRankValue(const Value* v, size_t rank) {
  if (v->kind == ValueKind::kTensor) {
    RankView out;
    out.kind = "a tensor";
    const TensorView& t = LocalTensor(v, "the tensor");
    out.shape = t.shape;
    out.dtype = t.dtype;
    Piece p;
    p.rank = rank;
    p.box.offsets.assign(t.shape.size(), 0);
    p.box.sizes = t.shape;
    p.local = t;
    out.pieces.push_back(std::move(p));
    return out;
  }
  return v->type_name == kShardedTensor ? ReadShardedTensor(v, rank) : ReadDTensor(v, rank);
}

// A global tensor assembled from its ranks' pieces when its bytes are read: the tiles copied into
// place, each replica compared with the tile it repeats. Each pass assembles its own copy.
class FsdpAssembly : public DeferredSource {
 public:
  FsdpAssembly(std::string key, DType dtype, std::vector<int64_t> shape, std::vector<Piece> tiles,
               std::vector<std::pair<size_t, Piece>> replicas)
      : key_(std::move(key)), dtype_(dtype), shape_(std::move(shape)), tiles_(std::move(tiles)), replicas_(std::move(replicas)) {}

  // The assembled tensor's bytes: what Produce allocates (the shape's tiling was checked when
  // the assembly was made).
  uint64_t assembled_bytes() const {
    uint64_t numel = 1;
    for (int64_t s : shape_) numel *= static_cast<uint64_t>(s);
    return numel * ElementSize(dtype_);
  }

  SharedBytes Produce() const override {
    const size_t esize = ElementSize(dtype_);
    std::vector<uint8_t> global(static_cast<size_t>(assembled_bytes()));
    for (size_t i = 0; i < tiles_.size(); ++i) {
      const Piece& tile = tiles_[i];
      const SharedBytes bytes = tile.local.ContiguousLittleEndian();
      for (const auto& [of, replica] : replicas_) {
        if (of != i) continue;
        const SharedBytes copy = replica.local.ContiguousLittleEndian();
        if (copy.size() != bytes.size() || std::memcmp(copy.data(), bytes.data(), bytes.size()) != 0) {
          throw Error(ErrorCode::kCorrupt, "'" + key_ + "': rank " + std::to_string(replica.rank) + "'s copy of " +
                                               (tile.box.sizes == shape_ ? "the tensor" : "its part at " + DcpTupleText(tile.box.offsets)) +
                                               " differs from rank " + std::to_string(tile.rank) +
                                               "'s (a replicated value: every rank's copy must be equal)");
        }
        copy.Release(0, copy.size());
      }
      CopyDcpBox(global.data(), shape_, esize, tile.box, bytes.data());
      // Copied: its pages leave the resident set (they stay in the page cache).
      bytes.Release(0, bytes.size());
    }
    return SharedBytes::FromVector(std::move(global));
  }

 private:
  std::string key_;
  DType dtype_;
  std::vector<int64_t> shape_;
  std::vector<Piece> tiles_;
  std::vector<std::pair<size_t, Piece>> replicas_;
};

struct Opened {
  Document doc;
  std::vector<std::pair<std::string, std::shared_ptr<const FsdpAssembly>>> assemblies;  // by key, for verify
  std::vector<std::string> files;
};

struct Counts {
  uint64_t sharded = 0, replicated = 0, assembled = 0;
};

// One group's ranks as one state dict: rank 0's tree, its sharded values and tensors replaced
// by the global tensors. Returns rank 0's root.
Value* Consolidate(const std::string& prefix, const std::vector<Value*>& roots, Document& doc, Opened& opened,
                   int64_t& next_storage, Counts& counts) {
  // Rank 0's other tensors (inside objects, or unsharded ones below) keep their storages apart
  // from the other files': numbered again from this document's count.
  std::map<int64_t, int64_t> renumbered;
  ForEachTensor(roots[0], [&](TensorView& t) {
    if (t.storage_index < 0) return;
    auto [at, fresh] = renumbered.emplace(t.storage_index, next_storage);
    if (fresh) ++next_storage;
    t.storage_index = at->second;
  });
  std::vector<std::vector<Leaf>> leaves(roots.size());
  std::vector<std::unordered_map<std::string, Value*>> by_key(roots.size());
  for (size_t r = 0; r < roots.size(); ++r) {
    leaves[r] = WithContext("rank " + std::to_string(r), [&] { return TensorLeaves(roots[r]); });
    for (const Leaf& l : leaves[r]) by_key[r].emplace(l.key, l.value);
  }
  for (size_t r = 1; r < roots.size(); ++r) {
    for (const Leaf& l : leaves[r]) {
      if (!by_key[0].count(l.key)) {
        Fail(ErrorCode::kCorrupt, "'" + prefix + l.key + "': " + WhatIs(l.value) + " on rank " + std::to_string(r) +
                                      ", nothing of that name on rank 0");
      }
    }
  }
  for (const Leaf& leaf : leaves[0]) {
    const std::string key = prefix + leaf.key;
    WithContext("'" + key + "'", [&] {
      std::vector<RankView> views;
      for (size_t r = 0; r < roots.size(); ++r) {
        auto it = by_key[r].find(leaf.key);
        if (it == by_key[r].end()) {
          Fail(ErrorCode::kCorrupt, WhatIs(leaf.value) + " on rank 0, nothing of that name on rank " + std::to_string(r));
        }
        const bool same_kind = it->second->kind == leaf.value->kind && it->second->type_name == leaf.value->type_name;
        if (!same_kind) {
          Fail(ErrorCode::kCorrupt, WhatIs(leaf.value) + " on rank 0, " + WhatIs(it->second) + " on rank " + std::to_string(r));
        }
        views.push_back(WithContext("rank " + std::to_string(r) + "'s " + WhatIs(it->second),
                                    [&] { return ReadRankValue(it->second, r); }));
        const RankView& v = views.back();
        if (v.shape != views[0].shape || v.dtype != views[0].dtype) {
          Fail(ErrorCode::kCorrupt, "rank 0 says " + std::string(Name(views[0].dtype)) + " " + DcpTupleText(views[0].shape) +
                                        ", rank " + std::to_string(r) + " " + std::string(Name(v.dtype)) + " " +
                                        DcpTupleText(v.shape));
        }
      }
      const RankView& first = views[0];
      // Pieces at the same box are copies of one part (a replicated value); the others tile it.
      std::vector<Piece> tiles;
      std::vector<std::pair<size_t, Piece>> replicas;
      std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, size_t> at_box;
      for (RankView& v : views) {
        for (Piece& p : v.pieces) {
          auto [at, fresh] = at_box.emplace(std::make_pair(p.box.offsets, p.box.sizes), tiles.size());
          if (fresh) {
            tiles.push_back(std::move(p));
          } else {
            replicas.emplace_back(at->second, std::move(p));
          }
        }
      }
      std::vector<DcpBox> boxes;
      for (const Piece& t : tiles) boxes.push_back(t.box);
      CheckDcpTiling(key, first.shape, boxes);
      TensorView view;
      if (tiles.size() == 1 && replicas.empty() && tiles[0].box.sizes == first.shape) {
        view = tiles[0].local;  // one rank holds all of it: a view into its file
        view.storage_key = std::to_string(tiles[0].rank) + ":" + view.storage_key;
      } else {
        view.dtype = first.dtype;
        view.shape = first.shape;
        view.strides = ContiguousStrides(first.shape);
        uint64_t nbytes = 0;  // the tiles cover the tensor: their sizes add up to it
        for (const Piece& t : tiles) nbytes += static_cast<uint64_t>(t.local.numel()) * ElementSize(first.dtype);
        auto assembly = std::make_shared<const FsdpAssembly>(key, first.dtype, first.shape, std::move(tiles), std::move(replicas));
        view.storage = SharedBytes::Deferred(assembly, nbytes);
        view.storage_key = "(" + std::to_string(boxes.size()) + " parts, " + std::to_string(roots.size()) + " ranks)";
        opened.assemblies.emplace_back(key, assembly);
        ++counts.assembled;
      }
      view.storage_index = next_storage++;
      view.is_parameter = false;
      view.Validate();
      counts.sharded += leaf.value->kind == ValueKind::kObject;
      counts.replicated += leaf.value->kind == ValueKind::kTensor && roots.size() > 1;
      Value* node = leaf.value;  // rank 0's node becomes the global tensor (memo references too)
      node->kind = ValueKind::kTensor;
      node->tensor = doc.arena->AddTensorView(std::move(view));
      node->type_name.clear();
      node->args = nullptr;
      node->state = nullptr;
      node->unknown_class = false;
    });
  }
  return roots[0];
}

Opened OpenFsdp(const std::string& directory, const ReadOptions& options) {
  Opened o;
  auto dir = ConfinedDirectory::Open(directory);
  std::vector<RankGroup> groups = ListRankGroups(dir->path());
  if (groups.empty()) {
    throw Error(ErrorCode::kNotFound, "holds no per-rank files (<name>rank<R>.pt)").SetFile(directory);
  }
  Document& doc = o.doc;
  doc.format = "fsdp";
  doc.path = directory;
  int64_t next_storage = 0;
  Counts counts;
  uint64_t world_size = 0;
  std::vector<std::pair<std::string, Value*>> group_roots;
  // verl writes the optimizer's state and the trainer's (scheduler, RNG) beside the model
  // (optim_world_size_W_rank_R.pt, extra_state_...): the model is what the directory stands for.
  // Its tensors are at the top under their own names, so that what convert writes loads into the
  // model as it is (as DeepSpeed's masters are); the other kinds are under their names and opt-in.
  const bool has_model = std::any_of(groups.begin(), groups.end(), [](const RankGroup& g) { return g.stem == "model"; });
  const bool model_at_top = has_model && groups.size() > 1;
  for (const RankGroup& g : groups) {
    const uint64_t world = CheckRanks(g, dir->path());
    if (world_size != 0 && world != world_size) {
      throw Error(ErrorCode::kCorrupt, "'" + g.pattern + "' has " + std::to_string(world) + " ranks, '" +
                                           groups[0].pattern + "' " + std::to_string(world_size))
          .SetFile(directory);
    }
    world_size = world;
    std::vector<Value*> roots;
    for (uint64_t r = 0; r < world; ++r) {
      const std::string& name = g.files.at(r);
      uint64_t size = 0;
      Document part = ReadRankFile(*dir, name, options, doc.arena, size);
      for (const auto& w : part.warnings) doc.warnings.push_back(name + ": " + w);
      roots.push_back(part.root);
      o.files.push_back(name);
      ContainerRecord rec;
      rec.name = name;
      rec.size = rec.stored_size = size;
      rec.method = "file";
      doc.records.push_back(rec);
      doc.file_size += size;
    }
    const std::string label = groups.size() == 1 ? "" : (g.stem.empty() ? g.pattern : g.stem);
    const std::string prefix = label.empty() || (model_at_top && label == "model") ? "" : EncodeKeyComponent(label) + "/";
    if (g.stem == "extra_state" && world > 1) {
      // verl's trainer state is each rank's own (its RNG states differ by design): one subtree
      // per rank, rank_0, rank_1..., rather than a replicated value whose copies must agree.
      Value* per_rank = doc.arena->Dict("dict");
      for (uint64_t r = 0; r < world; ++r) {
        const std::string rank = "rank_" + std::to_string(r);
        WithFile((fs::path(dir->path()) / g.NameOf(r)).string(), [&] {
          Value* root = Consolidate(prefix + rank + "/", {roots[r]}, doc, o, next_storage, counts);
          // Its storages are rank r's file's, which a one-rank consolidation names rank 0's.
          ForEachTensor(root, [&](TensorView& t) {
            if (t.storage_key.starts_with("0:")) t.storage_key = std::to_string(r) + t.storage_key.substr(1);
          });
          per_rank->entries.emplace_back(doc.arena->Str(rank), root);
        });
      }
      group_roots.emplace_back(label, per_rank);
      continue;
    }
    WithFile((fs::path(dir->path()) / g.NameOf(0)).string(), [&] {
      group_roots.emplace_back(label, Consolidate(prefix, roots, doc, o, next_storage, counts));
    });
  }
  if (group_roots.size() == 1) {
    doc.root = group_roots[0].second;
  } else {
    doc.root = doc.arena->Dict("dict");
    for (const auto& [label, root] : group_roots) {
      if (model_at_top && label == "model") {
        if (root->kind != ValueKind::kDict) {
          throw Error(ErrorCode::kCorrupt,
                      "the model's rank files hold " + std::string(KindName(root->kind)) + ", not a state dict")
              .SetFile(directory);
        }
        // First in the loop's order (groups are sorted, but "model" need not come first): the
        // kinds' names are checked against its keys below, whichever comes first.
        doc.root->entries.insert(doc.root->entries.begin(), root->entries.begin(), root->entries.end());
        continue;
      }
      doc.root->entries.emplace_back(doc.arena->Str(label), root);
    }
    std::set<std::string_view> seen;
    for (const auto& [key, unused] : doc.root->entries) {
      if (key->kind == ValueKind::kStr && !seen.insert(key->text).second) {
        throw Error(ErrorCode::kCorrupt, "two entries are both named '" + key->text +
                                             "' (kinds of rank files, or the model's keys beside them)")
            .SetFile(directory);
      }
    }
    // Beside a model, the rest is listed but written, compared and counted only when --keys asks
    // for it, as DeepSpeed's optimizer state is.
    for (const auto& [label, unused] : group_roots) {
      if (model_at_top && label != "model") doc.opt_in_prefixes.push_back(EncodeKeyComponent(label) + "/");
    }
  }
  doc.tensors = CollectTensors(doc.root);
  std::string patterns;
  for (const RankGroup& g : groups) patterns += (patterns.empty() ? "" : ", ") + g.pattern;
  doc.properties.emplace_back("rank_files", patterns);
  doc.properties.emplace_back("world_size", PropertyValue::Integer(static_cast<int64_t>(world_size)));
  doc.properties.emplace_back("sharded_tensors", PropertyValue::Integer(static_cast<int64_t>(counts.sharded)));
  doc.properties.emplace_back("replicated_tensors", PropertyValue::Integer(static_cast<int64_t>(counts.replicated)));
  doc.properties.emplace_back("assembled_tensors", PropertyValue::Integer(static_cast<int64_t>(counts.assembled)));
  doc.properties.emplace_back("files", PropertyValue::Integer(static_cast<int64_t>(o.files.size())));
  return o;
}

}  // namespace

bool IsFsdpDirectory(const std::string& directory) {
  try {
    return !ListRankGroups(directory).empty();
  } catch (const Error&) {
    return true;  // rank files, badly named: reading says why
  }
}

Document ReadFsdpCheckpoint(const std::string& directory, const ReadOptions& options) {
  return std::move(OpenFsdp(directory, options).doc);
}

void VerifyFsdpCheckpoint(const std::string& directory, CheckReport& report,
                          const ProgressReporter::Callback& progress) {
  try {
    Opened o = OpenFsdp(directory, {});
    for (const auto& w : o.doc.warnings) report.Add(Severity::kInfo, "", 0, w);
    auto root = ConfinedDirectory::Open(directory);
    CheckTorchArchiveCrcsIn(report, *root, o.files, progress);
    // Every assembled tensor once: its parts' bytes read, its replicated copies compared (a step
    // of its own on the progress line: the assembled tensors' bytes).
    uint64_t assembled_bytes = 0;
    for (const auto& [key, assembly] : o.assemblies) assembled_bytes += assembly->assembled_bytes();
    ProgressReporter step(progress, assembled_bytes);
    step.Begin();
    for (const auto& [key, assembly] : o.assemblies) {
      try {
        assembly->Produce();
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kIo) throw;
        report.AddError(Severity::kMedium, "", e);
      }
      step.Add(assembly->assembled_bytes());
    }
    step.Finish();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo) throw;
    report.AddError(Severity::kMedium, "", e);
  }
}

void ScanFsdpCheckpoint(const std::string& directory, CheckReport& report) {
  std::vector<std::string> names;
  std::shared_ptr<const ConfinedDirectory> root;
  try {
    root = ConfinedDirectory::Open(directory);
    for (const RankGroup& g : ListRankGroups(root->path())) {
      for (const auto& [rank, name] : g.files) names.push_back(name);
    }
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo) throw;
    report.AddError(Severity::kMedium, "", e);
    return;
  }
  ScanTorchArchivesIn(report, *root, names, FsdpClassAttribute, FsdpDataClass);
}

}  // namespace trove
