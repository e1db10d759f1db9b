// DeepSpeed ZeRO checkpoints read as one document (formats/deepspeed/deepspeed_reader.h).
#include "formats/deepspeed/deepspeed_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>

#include "core/confined_directory.h"
#include "formats/deepspeed/zero_layout.h"
#include "formats/pt/pt_checks.h"
#include "formats/pt/pt_reader.h"
#include "trove/error.h"
#include "trove/zip_reader.h"

namespace trove {
namespace fs = std::filesystem;

namespace {

// A `latest` file holds a tag ("global_step1200"); anything longer is not one.
constexpr uint64_t kMaxLatestBytes = 4096;
// Ranks named by files or partition counts; more than any data-parallel run, and it bounds the
// rank files opened before their sizes are compared.
constexpr uint64_t kMaxZeroRanks = uint64_t{1} << 16;

constexpr std::string_view kModelStates = "mp_rank_00_model_states.pt";
constexpr std::string_view kStage3ModelStates = "zero_pp_rank_0_mp_rank_00_model_states.pt";
constexpr std::string_view kZeroStageEnum = "deepspeed.runtime.zero.config.ZeroStageEnum";

// ZeroStageEnum's members (DeepSpeed's deepspeed/runtime/zero/config.py) and their stages.
std::optional<int64_t> ZeroStageMember(std::string_view member) {
  if (member == "disabled") return 0;
  if (member == "optimizer_states") return 1;
  if (member == "gradients") return 2;
  if (member == "weights" || member == "max_stage") return 3;
  return std::nullopt;
}

bool ZeroEnumMember(const std::string& enum_class, const std::string& member) {
  return enum_class == kZeroStageEnum && ZeroStageMember(member).has_value();
}

// The tag directory inside `root`: `latest`'s tag, or "" when `root` is the tag directory.
// Throws Error(kRefused) for a tag the rule for names refuses (absolute, `..`).
std::optional<std::string> FindTag(const ConfinedDirectory& root) {
  std::optional<ConfinedFile> latest = root.OpenFile(kDeepSpeedLatestName);
  if (!latest) return std::string();
  return WithFile((fs::path(root.path()) / kDeepSpeedLatestName).string(), [&]() -> std::optional<std::string> {
    if (latest->size > kMaxLatestBytes) Fail(ErrorCode::kLimit, "larger than kMaxLatestBytes: not a tag");
    auto mapped = MappedFile::FromDescriptor(latest->fd.release(), latest->path, latest->size, false);
    std::string tag(reinterpret_cast<const char*>(mapped->data()), mapped->size());
    while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.back()))) tag.pop_back();
    while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.front()))) tag.erase(tag.begin());
    if (tag.empty()) Fail(ErrorCode::kCorrupt, "names no tag");
    WithContext("its tag '" + tag + "'", [&] { ConfinedDirectory::CheckName(tag); });
    return tag;
  });
}

std::string Join(const std::string& tag, std::string_view name) { return tag.empty() ? std::string(name) : tag + "/" + std::string(name); }

struct RankFiles {
  std::string model_states;            // relative to the root
  std::map<uint64_t, std::string> optim;  // rank -> name relative to the root
};

// The checkpoint's files by name (listed only; each is opened by the rule when read).
RankFiles ListFiles(const std::string& root, const std::string& tag) {
  static const std::regex optim_name(R"((bf16_)?zero_pp_rank_([0-9]{1,9})_mp_rank_00_optim_states\.pt)");
  RankFiles out;
  const fs::path dir = fs::path(root) / tag;
  std::error_code ec;
  std::string prefix;
  bool has_model = false, has_stage3_model = false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::smatch m;
    if (name == kModelStates) has_model = true;
    if (name == kStage3ModelStates) has_stage3_model = true;
    if (!std::regex_match(name, m, optim_name)) continue;
    if (!out.optim.empty() && m[1].str() != prefix) {
      Fail(ErrorCode::kCorrupt, "both bf16_ and plain optimizer-state files in '" + dir.string() + "'");
    }
    prefix = m[1].str();
    const uint64_t rank = std::stoull(m[2].str());
    if (rank >= kMaxZeroRanks) Fail(ErrorCode::kLimit, "'" + name + "': rank past kMaxZeroRanks");
    out.optim.emplace(rank, Join(tag, name));
  }
  if (has_model) out.model_states = Join(tag, kModelStates);
  else if (has_stage3_model) out.model_states = Join(tag, kStage3ModelStates);
  return out;
}

// One file of the checkpoint, read by the pt reader; its mapping stays alive with the document.
struct ReadFile {
  std::string name;
  std::string path;
  uint64_t size = 0;
  Document doc;
};

ReadFile ReadCheckpointFile(const ConfinedDirectory& root, const std::string& name, const ReadOptions& options) {
  ReadFile out;
  out.name = name;
  out.path = (fs::path(root.path()) / name).string();
  out.doc = WithFile(out.path, [&] {
    ConfinedFile file = root.RequireFile(name);
    out.size = file.size;
    auto mapped = MappedFile::FromDescriptor(file.fd.release(), file.path, file.size);
    ZipReader zip(mapped, options.pickle_policy == PicklePolicy::kPermissive ? ZipDisagreement::kReport
                                                                            : ZipDisagreement::kRefuse);
    return ReadPtWithEnums(zip, options, ZeroEnumMember);
  });
  return out;
}

[[noreturn]] void FailIn(const std::string& path, ErrorCode code, std::string message) {
  throw Error(code, std::move(message)).SetFile(path);
}

const Value* Require(const ReadFile& f, const Value* dict, std::string_view key) {
  const Value* v = dict ? dict->Find(key) : nullptr;
  if (v == nullptr) FailIn(f.path, ErrorCode::kCorrupt, "has no '" + std::string(key) + "'");
  return v;
}

int64_t IntOf(const ReadFile& f, const Value* v, std::string_view what) {
  if (v->kind == ValueKind::kInt && !v->is_big_int()) return v->integer;
  FailIn(f.path, ErrorCode::kCorrupt, "'" + std::string(what) + "' is not an int");
}

// zero_stage: an int, a ZeroStageEnum member (Python >= 3.11: getattr; before: ZeroStageEnum(n),
// an inert object holding n).
int64_t ZeroStageOf(const ReadFile& f, const Value* v) {
  if (v->kind == ValueKind::kGlobal && v->type_name.starts_with(std::string(kZeroStageEnum) + ".")) {
    if (auto s = ZeroStageMember(std::string_view(v->type_name).substr(kZeroStageEnum.size() + 1))) return *s;
  }
  if (v->kind == ValueKind::kObject && v->type_name == kZeroStageEnum && v->args && v->args->items.size() == 1) {
    return IntOf(f, v->args->items[0], "zero_stage");
  }
  return IntOf(f, v, "zero_stage");
}

// The world size a rank's optimizer state declares: partition_count, an int or one per group.
int64_t WorldOf(const ReadFile& f, const Value* v) {
  if (v->kind == ValueKind::kList || v->kind == ValueKind::kTuple) {
    int64_t w = 0;
    for (const Value* x : v->items) w = std::max(w, IntOf(f, x, "partition_count"));
    return w;
  }
  return IntOf(f, v, "partition_count");
}

// The element count of a torch.Size (a tuple of ints), saturating far past any file.
uint64_t NumelOf(const ReadFile& f, const std::string& name, const Value* shape, std::vector<int64_t>& dims) {
  if (shape->kind != ValueKind::kTuple && shape->kind != ValueKind::kList) {
    FailIn(f.path, ErrorCode::kCorrupt, "param_shapes: '" + name + "' has no shape");
  }
  uint64_t n = 1;
  for (const Value* d : shape->items) {
    const int64_t s = IntOf(f, d, "param_shapes['" + name + "']");
    if (s < 0) FailIn(f.path, ErrorCode::kCorrupt, "param_shapes: '" + name + "' has a negative size");
    dims.push_back(s);
    n = (s != 0 && n > (uint64_t{1} << 62) / static_cast<uint64_t>(s)) ? (uint64_t{1} << 62) : n * static_cast<uint64_t>(s);
  }
  return n;
}

// A rank's fp32 partition tensor: 1-D, contiguous, little-endian, with its bytes.
const TensorView& PartitionOf(const ReadFile& f, const Value* v, size_t g) {
  if (v->kind != ValueKind::kTensor || v->tensor->shape.size() != 1 || !v->tensor->is_contiguous() ||
      v->tensor->byte_order != ByteOrder::kLittle || !v->tensor->has_data || v->tensor->quantizer) {
    FailIn(f.path, ErrorCode::kCorrupt, "fp32 partition " + std::to_string(g) + " is not a flat tensor");
  }
  return *v->tensor;
}

const uint8_t* ElementsAt(const TensorView& t, uint64_t offset) {
  return t.storage.data() + (static_cast<uint64_t>(t.storage_offset) + offset) * ElementSize(t.dtype);
}

// A parameter spread over several ranks' partitions: contiguous runs of their flat tensors, in
// rank order. Its bytes are those runs (Pieces): a writer copies each from its file by the kernel
// and a slice reads only the runs it overlaps. Asked for whole (a strided view), it is assembled;
// each such pass assembles its own copy, the pieces' pages released after each copy.
class ZeroAssembly : public DeferredSource {
 public:
  ZeroAssembly(std::shared_ptr<const std::vector<ReadFile>> files,
               std::shared_ptr<const std::vector<std::vector<const TensorView*>>> parts, std::vector<ZeroPiece> pieces,
               DType dtype)
      : files_(std::move(files)), parts_(std::move(parts)), pieces_(std::move(pieces)), dtype_(dtype) {}

  SharedBytes Produce() const override {
    const size_t esize = ElementSize(dtype_);
    uint64_t total = 0;
    for (const ZeroPiece& p : pieces_) total += p.count;
    // Every byte is copied below: no zero-filling first.
    std::shared_ptr<uint8_t[]> out(new uint8_t[std::max<uint64_t>(1, total * esize)]);
    uint64_t at = 0;
    for (const ZeroPiece& p : pieces_) {
      const TensorView& t = *(*parts_)[p.rank][p.group];
      std::memcpy(out.get() + at, ElementsAt(t, p.offset), p.count * esize);
      at += p.count * esize;
      // Copied: the piece's pages leave the resident set (they stay in the page cache).
      const uint64_t start = (static_cast<uint64_t>(t.storage_offset) + p.offset) * esize;
      t.storage.Release(start, p.count * esize);
    }
    const uint8_t* data = out.get();
    return SharedBytes(std::shared_ptr<const void>(out, data), data, total * esize);
  }

  std::optional<std::vector<SharedBytes>> Pieces(uint64_t offset, uint64_t length) const override {
    const size_t esize = ElementSize(dtype_);
    std::vector<SharedBytes> out;
    uint64_t at = 0;  // where the piece starts in the parameter's bytes
    for (const ZeroPiece& p : pieces_) {
      const uint64_t bytes = p.count * esize;
      const uint64_t from = std::max(at, offset), to = std::min(at + bytes, offset + length);
      if (from < to) {
        const TensorView& t = *(*parts_)[p.rank][p.group];
        const uint64_t start = (static_cast<uint64_t>(t.storage_offset) + p.offset) * esize;
        out.push_back(t.storage.Slice(start + (from - at), to - from));
      }
      at += bytes;
    }
    return out;
  }

 private:
  std::shared_ptr<const std::vector<ReadFile>> files_;  // keeps the partitions' documents alive
  std::shared_ptr<const std::vector<std::vector<const TensorView*>>> parts_;
  std::vector<ZeroPiece> pieces_;
  DType dtype_;
};

TensorView Contiguous(DType dtype, const std::vector<int64_t>& shape) {
  TensorView view;
  view.dtype = dtype;
  view.shape = shape;
  view.strides.assign(shape.size(), 1);
  for (size_t d = shape.size(); d > 1; --d) view.strides[d - 2] = view.strides[d - 1] * shape[d - 1];
  return view;
}

struct Opened {
  std::shared_ptr<const ConfinedDirectory> root;
  std::string tag;
  std::shared_ptr<std::vector<ReadFile>> files;  // [0]: model states, then rank 0, 1, ...
};

Opened OpenCheckpoint(const std::string& directory, const ReadOptions& options) {
  Opened o;
  o.root = ConfinedDirectory::Open(directory);
  o.tag = *FindTag(*o.root);
  RankFiles names = ListFiles(o.root->path(), o.tag);
  const std::string where = (fs::path(o.root->path()) / o.tag).string();
  if (names.model_states.empty()) {
    FailIn(where, ErrorCode::kNotFound, "holds no " + std::string(kModelStates));
  }
  if (names.optim.empty()) {
    FailIn(where, ErrorCode::kNotFound, "holds no zero_pp_rank_<R>_mp_rank_00_optim_states.pt");
  }
  o.files = std::make_shared<std::vector<ReadFile>>();
  o.files->push_back(ReadCheckpointFile(*o.root, names.model_states, options));
  const uint64_t listed = names.optim.rbegin()->first + 1;
  for (uint64_t r = 0; r < listed; ++r) {
    auto it = names.optim.find(r);
    if (it == names.optim.end()) {
      FailIn(where, ErrorCode::kNotFound, "rank " + std::to_string(r) + "'s optimizer-state file is missing (ranks up to " +
                                       std::to_string(listed - 1) + " are present)");
    }
    o.files->push_back(ReadCheckpointFile(*o.root, it->second, options));
  }
  return o;
}

}  // namespace

bool IsDeepSpeedDirectory(const std::string& directory) {
  try {
    auto root = ConfinedDirectory::Open(directory);
    const std::optional<std::string> tag = FindTag(*root);
    RankFiles names = ListFiles(root->path(), *tag);
    return !names.model_states.empty() && !names.optim.empty();
  } catch (const Error&) {
    // A `latest` naming a tag the rule refuses still says what the directory is: reading it
    // then reports why.
    std::error_code ec;
    return fs::is_regular_file(fs::path(directory) / kDeepSpeedLatestName, ec) &&
           !fs::exists(fs::path(directory) / ".metadata", ec);
  }
}

Document ReadDeepSpeedCheckpoint(const std::string& directory, const ReadOptions& options) {
  Opened o = OpenCheckpoint(directory, options);
  const std::vector<ReadFile>& files = *o.files;
  const ReadFile& model = files[0];
  const Value* mroot = model.doc.root;
  const size_t world = files.size() - 1;

  // Each rank's optimizer state: the stage, the world size, the fp32 partitions.
  int64_t stage = -1;
  auto parts = std::make_shared<std::vector<std::vector<const TensorView*>>>(world);
  std::vector<std::vector<uint64_t>> sizes(world);
  std::optional<DType> dtype;
  for (size_t r = 0; r < world; ++r) {
    const ReadFile& f = files[r + 1];
    const Value* osd = Require(f, f.doc.root, "optimizer_state_dict");
    const Value* groups = osd->Find("single_partition_of_fp32_groups");
    int64_t s = 1;  // DeepSpeed's bf16 optimizer (ZeRO-1) writes no zero_stage
    if (const Value* zs = osd->Find("zero_stage")) s = ZeroStageOf(f, zs);
    if (s >= 3) groups = Require(f, osd, "fp32_flat_groups");
    else if (groups == nullptr) groups = Require(f, osd, "single_partition_of_fp32_groups");
    if (s < 1 || s > 3) FailIn(f.path, ErrorCode::kCorrupt, "zero_stage " + std::to_string(s) + " is not 1, 2 or 3");
    if (stage >= 0 && s != stage) {
      FailIn(f.path, ErrorCode::kCorrupt, "zero_stage " + std::to_string(s) + ", rank 0's is " + std::to_string(stage));
    }
    stage = s;
    const int64_t declared = WorldOf(f, Require(f, osd, "partition_count"));
    if (declared != static_cast<int64_t>(world)) {
      FailIn(f.path, ErrorCode::kCorrupt, "partition_count says " + std::to_string(declared) + " ranks, the directory holds " +
                                      std::to_string(world) + " rank files");
    }
    if (groups->kind != ValueKind::kList && groups->kind != ValueKind::kTuple) {
      FailIn(f.path, ErrorCode::kCorrupt, "the fp32 partitions are not a list");
    }
    for (size_t g = 0; g < groups->items.size(); ++g) {
      const TensorView& t = PartitionOf(f, groups->items[g], g);
      if (dtype && t.dtype != *dtype) {
        FailIn(f.path, ErrorCode::kCorrupt, "fp32 partition " + std::to_string(g) + " is " + std::string(Name(t.dtype)) + ", the others " + std::string(Name(*dtype)));
      }
      dtype = t.dtype;
      (*parts)[r].push_back(&t);
      sizes[r].push_back(static_cast<uint64_t>(t.numel()));
    }
  }

  // The params, group by group, from param_shapes.
  const Value* shapes = Require(model, mroot, "param_shapes");
  std::vector<const Value*> group_shapes;
  if (shapes->kind == ValueKind::kDict) {
    group_shapes.push_back(shapes);  // one group written as a dict
  } else if (shapes->kind == ValueKind::kList || shapes->kind == ValueKind::kTuple) {
    group_shapes.assign(shapes->items.begin(), shapes->items.end());
  } else {
    FailIn(model.path, ErrorCode::kCorrupt, "param_shapes is not a list of dicts");
  }
  std::vector<std::vector<ZeroParam>> groups;
  std::map<std::string, std::vector<int64_t>> dims;
  for (const Value* g : group_shapes) {
    if (g->kind != ValueKind::kDict) FailIn(model.path, ErrorCode::kCorrupt, "param_shapes holds a non-dict");
    groups.emplace_back();
    for (const auto& [k, v] : g->entries) {
      if (k->kind != ValueKind::kStr) FailIn(model.path, ErrorCode::kCorrupt, "param_shapes has a non-str name");
      std::vector<int64_t> d;
      const uint64_t n = NumelOf(model, k->text, v, d);
      if (!dims.emplace(k->text, d).second) FailIn(model.path, ErrorCode::kCorrupt, "param_shapes names '" + k->text + "' twice");
      groups.back().push_back({k->text, n});
    }
  }
  std::vector<ZeroParam> params;
  for (const auto& g : groups) params.insert(params.end(), g.begin(), g.end());
  const std::vector<std::vector<ZeroPiece>> pieces = WithContext(
      "'" + (fs::path(o.root->path()) / o.tag).string() + "' (ZeRO stage " + std::to_string(stage) + ", " +
          std::to_string(world) + " ranks)",
      [&] { return stage == 3 ? ZeroStage3Pieces(params, sizes) : ZeroStage12Pieces(groups, sizes); });

  Document doc;
  doc.format = "deepspeed";
  doc.path = directory;
  doc.file_size = model.size;
  Value* root = doc.arena->Dict("dict");
  std::map<std::string, Value*> by_name;
  int64_t storage_index = 0;
  uint64_t assembled = 0;
  const DType out_dtype = dtype.value_or(DType::kFloat32);
  for (size_t i = 0; i < params.size(); ++i) {
    const ZeroParam& p = params[i];
    TensorView view = Contiguous(out_dtype, dims[p.name]);
    if (pieces[i].size() == 1) {
      // Within one rank's partition: a view of it, into the mapping.
      const ZeroPiece& one = pieces[i][0];
      const TensorView& t = *(*parts)[one.rank][one.group];
      view.storage = t.storage;
      view.storage_offset = t.storage_offset + static_cast<int64_t>(one.offset);
      view.storage_key = files[one.rank + 1].name + ":" + t.storage_key;
    } else {
      const uint64_t nbytes = p.numel * ElementSize(out_dtype);
      view.storage = pieces[i].empty() ? SharedBytes::FromVector({})
                                       : SharedBytes::Deferred(std::make_shared<ZeroAssembly>(o.files, parts, pieces[i], out_dtype), nbytes);
      view.storage_key = "(" + std::to_string(pieces[i].size()) + " pieces)";
      ++assembled;
    }
    view.storage_index = storage_index++;
    WithContext("parameter '" + p.name + "'", [&] { view.Validate(); });
    Value* value = doc.arena->Tensor(std::move(view));
    by_name[p.name] = value;
    root->entries.emplace_back(doc.arena->Str(p.name), value);
  }
  // Buffers: the module's own, named by buffer_names (zero_to_fp32 takes them from the module).
  size_t buffers = 0;
  const Value* module = mroot->Find("module");
  if (const Value* names = mroot->Find("buffer_names"); names && module) {
    for (const Value* n : names->items) {
      if (n->kind != ValueKind::kStr || by_name.count(n->text)) continue;
      const Value* b = module->Find(n->text);
      if (b == nullptr || b->kind != ValueKind::kTensor) continue;
      TensorView view = *b->tensor;
      view.storage_index = storage_index++;
      view.storage_key = model.name + ":" + view.storage_key;
      Value* value = doc.arena->Tensor(std::move(view));
      by_name[n->text] = value;
      root->entries.emplace_back(doc.arena->Str(n->text), value);
      ++buffers;
    }
  }
  // Shared (tied) params: [name, the param it shares] pairs, the same tensor under both names.
  size_t shared = 0;
  if (const Value* pairs = mroot->Find("shared_params")) {
    auto add = [&](const Value* a, const Value* b) {
      if (a->kind != ValueKind::kStr || b->kind != ValueKind::kStr || by_name.count(a->text)) return;
      auto it = by_name.find(b->text);
      if (it == by_name.end()) return;
      TensorView view = *it->second->tensor;  // same storage and storage_index: a tied tensor
      root->entries.emplace_back(doc.arena->Str(a->text), doc.arena->Tensor(std::move(view)));
      ++shared;
    };
    if (pairs->kind == ValueKind::kDict) {
      for (const auto& [a, b] : pairs->entries) add(a, b);
    } else {
      for (const Value* pair : pairs->items) {
        if ((pair->kind == ValueKind::kList || pair->kind == ValueKind::kTuple) && pair->items.size() == 2) {
          add(pair->items[0], pair->items[1]);
        }
      }
    }
  }
  // DeepSpeed before shared_params was stored: a module entry that is neither a param nor a
  // buffer and starts where a param's module entry does (zero_to_fp32 compares data_ptr()) is that
  // param, tied.
  if (module != nullptr && module->kind == ValueKind::kDict) {
    for (const auto& [k, v] : module->entries) {
      if (k->kind != ValueKind::kStr || v->kind != ValueKind::kTensor || by_name.count(k->text)) continue;
      for (const auto& [k2, v2] : module->entries) {
        if (k2 == k || k2->kind != ValueKind::kStr || v2->kind != ValueKind::kTensor || !dims.count(k2->text)) continue;
        if (v2->tensor->storage.identity() != v->tensor->storage.identity() ||
            v2->tensor->storage_offset != v->tensor->storage_offset) {
          continue;
        }
        TensorView view = *by_name[k2->text]->tensor;
        Value* tied = doc.arena->Tensor(std::move(view));
        by_name[k->text] = tied;
        root->entries.emplace_back(doc.arena->Str(k->text), tied);
        ++shared;
        break;
      }
    }
  }
  doc.root = root;
  doc.tensors = CollectTensors(root);
  for (const ReadFile& f : files) {
    for (const auto& w : f.doc.warnings) doc.warnings.push_back(f.name + ": " + w);
    ContainerRecord rec;
    rec.name = f.name;
    rec.size = rec.stored_size = f.size;
    rec.method = "file";
    doc.records.push_back(rec);
  }
  if (const Value* v = mroot->Find("ds_version"); v && v->kind == ValueKind::kStr) doc.properties.emplace_back("ds_version", v->text);
  if (!o.tag.empty()) doc.properties.emplace_back("tag", o.tag);
  doc.properties.emplace_back("zero_stage", PropertyValue::Integer(stage));
  doc.properties.emplace_back("world_size", PropertyValue::Integer(static_cast<int64_t>(world)));
  doc.properties.emplace_back("param_groups", PropertyValue::Integer(static_cast<int64_t>(groups.size())));
  doc.properties.emplace_back("params", PropertyValue::Integer(static_cast<int64_t>(params.size())));
  doc.properties.emplace_back("buffers", PropertyValue::Integer(static_cast<int64_t>(buffers)));
  doc.properties.emplace_back("shared_params", PropertyValue::Integer(static_cast<int64_t>(shared)));
  doc.properties.emplace_back("assembled_tensors", PropertyValue::Integer(static_cast<int64_t>(assembled)));
  doc.properties.emplace_back("files", PropertyValue::Integer(static_cast<int64_t>(files.size())));
  return doc;
}

void VerifyDeepSpeedCheckpoint(const std::string& directory, CheckReport& report) {
  try {
    Document doc = ReadDeepSpeedCheckpoint(directory, {});
    for (const auto& w : doc.warnings) report.Add(Severity::kInfo, "", 0, w);
    auto root = ConfinedDirectory::Open(directory);
    for (const ContainerRecord& rec : doc.records) {
      ConfinedFile file = root->RequireFile(rec.name);
      auto mapped = MappedFile::FromDescriptor(file.fd.release(), file.path, file.size, false);
      ZipReader zip(mapped, ZipDisagreement::kReport);
      for (const ZipEntry& e : zip.entries()) {
        report.entries_checked++;
        report.bytes_checked += e.compressed_size;
        if (!zip.CheckCrc(e)) report.Add(Severity::kMedium, rec.name, e.data_offset, "'" + e.name + "': CRC-32 mismatch");
      }
    }
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo) throw;
    report.AddError(Severity::kMedium, "", e);
  }
}

void ScanDeepSpeedCheckpoint(const std::string& directory, CheckReport& report) {
  std::vector<std::string> names;
  std::shared_ptr<const ConfinedDirectory> root;
  try {
    root = ConfinedDirectory::Open(directory);
    const std::string tag = *FindTag(*root);
    RankFiles listed = ListFiles(root->path(), tag);
    if (!listed.model_states.empty()) names.push_back(listed.model_states);
    for (const auto& [rank, name] : listed.optim) names.push_back(name);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo) throw;
    report.AddError(Severity::kMedium, "", e);
    return;
  }
  for (const std::string& name : names) {
    try {
      ConfinedFile file = root->RequireFile(name);
      auto mapped = MappedFile::FromDescriptor(file.fd.release(), file.path, file.size, false);
      ZipReader zip(mapped, ZipDisagreement::kReport);
      for (const ZipEntry& e : zip.entries()) {
        if (!NamedLikePickle(e.name)) continue;
        const SharedBytes pickle = zip.Read(e);
        ScanTorchPickle(report, name + "/" + e.name, pickle.data(), pickle.size(), 0, false, ZeroEnumMember);
        report.entries_checked++;
        report.bytes_checked += e.compressed_size;
      }
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kIo) throw;
      report.AddError(Severity::kMedium, name, e);
    }
  }
}

}  // namespace trove
