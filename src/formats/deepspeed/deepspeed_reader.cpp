// DeepSpeed ZeRO checkpoints read as one document (formats/deepspeed/deepspeed_reader.h).
#include "formats/deepspeed/deepspeed_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <functional>
#include <regex>
#include <set>

#include "core/confined_directory.h"
#include "core/count_text.h"
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
  std::map<uint64_t, std::string> rank_model_states;  // stage 3: rank -> its model-states file
  // Files of model-parallel ranks past 00 and of pipeline stages: what trove does not read.
  std::vector<std::string> model_parallel, pipeline;
};

// The checkpoint's files by name (listed only; each is opened by the rule when read).
RankFiles ListFiles(const std::string& root, const std::string& tag) {
  static const std::regex optim_name(R"((bf16_)?zero_pp_rank_([0-9]{1,9})_mp_rank_([0-9]{2,9})_optim_states\.pt)");
  static const std::regex rank_model_name(R"(zero_pp_rank_([0-9]{1,9})_mp_rank_([0-9]{2,9})_model_states\.pt)");
  static const std::regex model_name(R"(mp_rank_([0-9]{2,9})_model_states\.pt)");
  static const std::regex layer_name(R"(layer_[0-9]+-model_[0-9]+-model_states\.pt)");
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
    if (std::regex_match(name, layer_name)) out.pipeline.push_back(name);
    if (std::regex_match(name, m, model_name) && m[1].str() != "00") out.model_parallel.push_back(name);
    if (std::regex_match(name, m, rank_model_name)) {
      if (m[2].str() != "00") {
        out.model_parallel.push_back(name);
      } else if (const uint64_t rank = std::stoull(m[1].str()); rank < kMaxZeroRanks) {
        out.rank_model_states.emplace(rank, Join(tag, name));
      }
    }
    if (!std::regex_match(name, m, optim_name)) continue;
    if (m[3].str() != "00") {
      out.model_parallel.push_back(name);
      continue;
    }
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
  std::sort(out.model_parallel.begin(), out.model_parallel.end());
  std::sort(out.pipeline.begin(), out.pipeline.end());
  return out;
}

// Names a few of `names` ("'a', 'b' and 3 more").
std::string SomeOf(const std::vector<std::string>& names) {
  std::vector<std::string> quoted;
  for (const std::string& name : names) quoted.push_back("'" + name + "'");
  return FirstFew(quoted);
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
  view.strides = ContiguousStrides(shape);
  return view;
}

using PartTable = std::vector<std::vector<const TensorView*>>;  // [rank][group]

// A tensor of `dims` made of `pieces` of `parts`: a view into one piece's mapping, or assembled
// when read (ZeroAssembly) when it spans several. `keep` keeps the parts' documents alive.
TensorView PlacedTensor(const std::shared_ptr<const std::vector<ReadFile>>& keep,
                        const std::shared_ptr<const PartTable>& parts, const std::vector<std::string>& file_names,
                        const std::vector<ZeroPiece>& pieces, DType dtype, const std::vector<int64_t>& dims,
                        uint64_t numel, uint64_t& assembled) {
  TensorView view = Contiguous(dtype, dims);
  if (pieces.size() == 1) {
    const ZeroPiece& one = pieces[0];
    const TensorView& t = *(*parts)[one.rank][one.group];
    view.storage = t.storage;
    view.storage_offset = t.storage_offset + static_cast<int64_t>(one.offset);
    view.storage_key = file_names[one.rank] + ":" + t.storage_key;
  } else {
    view.storage = pieces.empty() ? SharedBytes::FromVector({})
                                  : SharedBytes::Deferred(std::make_shared<ZeroAssembly>(keep, parts, pieces, dtype),
                                                          numel * ElementSize(dtype));
    view.storage_key = "(" + std::to_string(pieces.size()) + " pieces)";
    ++assembled;
  }
  return view;
}

// A flat (1-D, contiguous, little-endian) tensor with its bytes, or null.
const TensorView* FlatTensor(const Value* v) {
  if (v == nullptr || v->kind != ValueKind::kTensor) return nullptr;
  const TensorView& t = *v->tensor;
  if (t.shape.size() != 1 || !t.is_contiguous() || t.byte_order != ByteOrder::kLittle || !t.has_data || t.quantizer) {
    return nullptr;
  }
  return &t;
}

// A dict's entry under int key `index` (torch's optimizer state is keyed by param index).
const Value* FindIndex(const Value* dict, int64_t index) {
  if (dict == nullptr || dict->kind != ValueKind::kDict) return nullptr;
  for (const auto& [k, v] : dict->entries) {
    if (k->kind == ValueKind::kInt && !k->is_big_int() && k->integer == index) return v;
  }
  return nullptr;
}

// Rank file `f`'s optimizer state of its fp32 partition `g`: a dict of per-element tensors
// (exp_avg, exp_avg_sq) and scalars (step). Stages 1/2 keep it in base_optimizer_state (torch's
// state_dict, or a list per group in elastic checkpoints); stage 3 in the optimizer_state_dict
// inside the ZeRO one.
const Value* GroupState(const Value* osd, int64_t stage, size_t g) {
  const Value* base = osd->Find(stage >= 3 ? "optimizer_state_dict" : "base_optimizer_state");
  if (base == nullptr) return nullptr;
  if (base->kind == ValueKind::kList || base->kind == ValueKind::kTuple) {
    return g < base->items.size() ? base->items[g] : nullptr;
  }
  if (base->kind != ValueKind::kDict) return nullptr;
  return FindIndex(base->Find("state"), static_cast<int64_t>(g));
}

struct Opened {
  std::shared_ptr<const ConfinedDirectory> root;
  std::string tag;
  std::shared_ptr<std::vector<ReadFile>> files;  // [0]: model states, then rank 0, 1, ...
  std::map<uint64_t, std::string> rank_model_states;  // stage 3: read when frozen params need them
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
  // Tensor and pipeline parallelism split the tensors further than the data-parallel ranks do:
  // reading mp_rank_00 alone would give pieces of them as if whole.
  if (!names.model_parallel.empty()) {
    FailIn(where, ErrorCode::kUnsupported,
           "holds files of model-parallel ranks past mp_rank_00 (tensor parallelism: " + SomeOf(names.model_parallel) +
               "); trove reads the ZeRO checkpoint of one model-parallel rank only and does not join tensor-parallel "
               "slices");
  }
  if (!names.pipeline.empty()) {
    FailIn(where, ErrorCode::kUnsupported,
           "holds pipeline-parallel layer files (" + SomeOf(names.pipeline) +
               "); trove does not read DeepSpeed pipeline checkpoints (their weights are in these per-layer files)");
  }
  if (names.optim.empty()) {
    FailIn(where, ErrorCode::kNotFound, "holds no zero_pp_rank_<R>_mp_rank_00_optim_states.pt");
  }
  o.rank_model_states = names.rank_model_states;
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

// Frozen params (requires_grad=False) are not in the optimizer: frozen_param_shapes names them and
// frozen_param_fragments holds their 16-bit weights, each whole in rank 0's model states (stages
// 1/2), or each rank's ceil(numel / world) elements of it in that rank's model states (stage 3,
// the last ranks' tails padding), joined as zero_to_fp32 joins them. Calls `add` for each, in
// frozen_param_shapes' order; `extra` keeps the further files read (stage 3). Returns how many.
size_t AddFrozenParams(const Opened& o, const ReadOptions& options, int64_t stage, size_t world,
                       const std::map<std::string, std::vector<int64_t>>& trainable,
                       const std::function<void(const std::string&, TensorView)>& add, uint64_t& assembled,
                       std::shared_ptr<std::vector<ReadFile>>& extra) {
  const ReadFile& model = (*o.files)[0];
  const Value* shapes = model.doc.root->Find("frozen_param_shapes");
  if (shapes == nullptr || shapes->kind == ValueKind::kNone) return 0;
  if (shapes->kind != ValueKind::kDict) FailIn(model.path, ErrorCode::kCorrupt, "frozen_param_shapes is not a dict");
  if (shapes->entries.empty()) return 0;
  struct Frozen {
    std::string name;
    std::vector<int64_t> dims;
    uint64_t numel = 0;
  };
  std::vector<Frozen> frozen;
  std::set<std::string> seen;
  for (const auto& [k, v] : shapes->entries) {
    if (k->kind != ValueKind::kStr) FailIn(model.path, ErrorCode::kCorrupt, "frozen_param_shapes has a non-str name");
    if (trainable.count(k->text)) {
      FailIn(model.path, ErrorCode::kCorrupt, "'" + k->text + "' is in both param_shapes and frozen_param_shapes");
    }
    if (!seen.insert(k->text).second) FailIn(model.path, ErrorCode::kCorrupt, "frozen_param_shapes names '" + k->text + "' twice");
    Frozen f;
    f.name = k->text;
    f.numel = NumelOf(model, k->text, v, f.dims);
    frozen.push_back(std::move(f));
  }
  extra = std::make_shared<std::vector<ReadFile>>();
  const std::string where = (fs::path(o.root->path()) / o.tag).string();
  if (stage < 3) {
    const Value* fragments = model.doc.root->Find("frozen_param_fragments");
    for (const Frozen& f : frozen) {
      const Value* v = fragments && fragments->kind == ValueKind::kDict ? fragments->Find(f.name) : nullptr;
      if (v == nullptr || v->kind != ValueKind::kTensor || !v->tensor->is_contiguous() || !v->tensor->has_data ||
          v->tensor->quantizer) {
        FailIn(model.path, ErrorCode::kCorrupt, "frozen_param_fragments has no whole tensor for frozen parameter '" + f.name + "'");
      }
      if (static_cast<uint64_t>(v->tensor->numel()) != f.numel) {
        FailIn(model.path, ErrorCode::kCorrupt,
               "frozen parameter '" + f.name + "': its fragment holds " + std::to_string(v->tensor->numel()) +
                   " elements, frozen_param_shapes declares " +
                   (f.numel >= (uint64_t{1} << 62) ? std::string("more than 2^62") : std::to_string(f.numel)));
      }
      TensorView view = Contiguous(v->tensor->dtype, f.dims);
      view.storage = v->tensor->storage;
      view.storage_offset = v->tensor->storage_offset;
      view.byte_order = v->tensor->byte_order;
      view.storage_key = model.name + ":" + v->tensor->storage_key;
      add(f.name, std::move(view));
    }
    return frozen.size();
  }
  // Stage 3: every rank's model states (rank 0's read again: the assembled tensors keep one list
  // of documents alive).
  extra->reserve(world);
  for (size_t r = 0; r < world; ++r) {
    auto it = o.rank_model_states.find(r);
    if (it == o.rank_model_states.end()) {
      FailIn(where, ErrorCode::kNotFound, "rank " + std::to_string(r) + "'s model-states file (zero_pp_rank_" +
                                              std::to_string(r) + "_mp_rank_00_model_states.pt) is missing: it holds the rank's "
                                              "fragments of the frozen parameters");
    }
    extra->push_back(ReadCheckpointFile(*o.root, it->second, options));
  }
  std::vector<std::string> names;
  for (const ReadFile& f : *extra) names.push_back(f.name);
  auto parts = std::make_shared<PartTable>(world);
  std::vector<DType> dtypes(frozen.size());
  for (size_t r = 0; r < world; ++r) {
    const ReadFile& file = (*extra)[r];
    const Value* fragments = file.doc.root->Find("frozen_param_fragments");
    for (size_t k = 0; k < frozen.size(); ++k) {
      const Frozen& f = frozen[k];
      const TensorView* t = FlatTensor(fragments && fragments->kind == ValueKind::kDict ? fragments->Find(f.name) : nullptr);
      if (t == nullptr) {
        FailIn(file.path, ErrorCode::kCorrupt, "frozen_param_fragments has no flat tensor for frozen parameter '" + f.name + "'");
      }
      // Each rank holds ceil(numel / world) elements: fragments of any other size leave a hole or
      // overlap their neighbours'.
      const uint64_t share = (std::min(f.numel, uint64_t{1} << 62) + world - 1) / world;
      if (static_cast<uint64_t>(t->numel()) != share) {
        FailIn(file.path, ErrorCode::kCorrupt,
               "frozen parameter '" + f.name + "': rank " + std::to_string(r) + "'s fragment holds " +
                   std::to_string(t->numel()) + " elements, its shape needs ceil(numel / " + std::to_string(world) +
                   ") = " + (share >= (uint64_t{1} << 60) ? std::string("more than 2^60") : std::to_string(share)) +
                   " per rank");
      }
      if (r > 0 && t->dtype != dtypes[k]) {
        FailIn(file.path, ErrorCode::kCorrupt, "frozen parameter '" + f.name + "': rank " + std::to_string(r) + "'s fragment is " +
                                                   std::string(Name(t->dtype)) + ", rank 0's " + std::string(Name(dtypes[k])));
      }
      dtypes[k] = t->dtype;
      (*parts)[r].push_back(t);
    }
  }
  for (size_t k = 0; k < frozen.size(); ++k) {
    const Frozen& f = frozen[k];
    const uint64_t share = (f.numel + world - 1) / world;
    std::vector<ZeroPiece> pieces;
    for (size_t r = 0; r < world && r * share < f.numel; ++r) pieces.push_back({r, k, 0, std::min(share, f.numel - r * share)});
    add(f.name, PlacedTensor(extra, parts, names, pieces, dtypes[k], f.dims, f.numel, assembled));
  }
  return frozen.size();
}

// The optimizer state keys every rank holds for every fp32 partition as a flat tensor (Adam's
// exp_avg, exp_avg_sq; not the scalar step): `emit(key, parts, dtype)` for each, in rank 0's
// order, its parts laid out as the masters' (`sizes[r][g]`). A rank's state of a partition holds
// the partition's elements, or up to rank 0's partition size (stages 1/2 save the state with the
// alignment padding the masters were saved without). A key some partition lacks is not offered.
void AddOptimizerState(const Opened& o, int64_t stage, const std::vector<std::vector<uint64_t>>& sizes,
                       const std::function<void(const std::string&, const std::shared_ptr<const PartTable>&, DType)>& emit) {
  const std::vector<ReadFile>& files = *o.files;
  const size_t world = sizes.size();
  if (world == 0 || sizes[0].empty()) return;
  const Value* first = GroupState(files[1].doc.root->Find("optimizer_state_dict"), stage, 0);
  if (first == nullptr || first->kind != ValueKind::kDict) return;
  for (const auto& [k, v] : first->entries) {
    if (k->kind != ValueKind::kStr || FlatTensor(v) == nullptr) continue;
    auto table = std::make_shared<PartTable>(world);
    bool complete = true;
    for (size_t r = 0; r < world && complete; ++r) {
      const ReadFile& f = files[r + 1];
      const Value* osd = f.doc.root->Find("optimizer_state_dict");
      for (size_t g = 0; g < sizes[r].size() && complete; ++g) {
        const Value* state = GroupState(osd, stage, g);
        const TensorView* t = FlatTensor(state && state->kind == ValueKind::kDict ? state->Find(k->text) : nullptr);
        if (t == nullptr) {
          complete = false;
          break;
        }
        const uint64_t n = static_cast<uint64_t>(t->numel());
        if (n < sizes[r][g] || n > sizes[0][g]) {
          FailIn(f.path, ErrorCode::kCorrupt, "optimizer state '" + k->text + "' of fp32 partition " + std::to_string(g) +
                                                  " holds " + std::to_string(n) + " elements, the partition " +
                                                  std::to_string(sizes[r][g]));
        }
        if (t->dtype != FlatTensor(v)->dtype) {
          FailIn(f.path, ErrorCode::kCorrupt, "optimizer state '" + k->text + "' of fp32 partition " + std::to_string(g) +
                                                  " is " + std::string(Name(t->dtype)) + ", rank 0's " +
                                                  std::string(Name(FlatTensor(v)->dtype)));
        }
        (*table)[r].push_back(t);
      }
    }
    if (complete) emit(k->text, table, FlatTensor(v)->dtype);
  }
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
  std::vector<std::string> rank_names;
  for (size_t r = 0; r < world; ++r) rank_names.push_back(files[r + 1].name);
  const std::shared_ptr<const PartTable> master_parts = parts;
  auto list_tensor = [&](Value* dict, const std::string& name, TensorView view) {
    view.storage_index = storage_index++;
    WithContext("parameter '" + name + "'", [&] { view.Validate(); });
    Value* value = doc.arena->Tensor(std::move(view));
    dict->entries.emplace_back(doc.arena->Str(name), value);
    return value;
  };
  for (size_t i = 0; i < params.size(); ++i) {
    const ZeroParam& p = params[i];
    by_name[p.name] = list_tensor(root, p.name, PlacedTensor(o.files, master_parts, rank_names, pieces[i], out_dtype, dims[p.name], p.numel, assembled));
  }
  std::shared_ptr<std::vector<ReadFile>> frozen_files;
  const size_t frozen = AddFrozenParams(
      o, options, stage, world, dims, [&](const std::string& name, TensorView view) { by_name[name] = list_tensor(root, name, std::move(view)); },
      assembled, frozen_files);
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
  // The module's 16-bit weights, under "module/" (opt-in: the fp32 masters are what the checkpoint
  // stands for). Stages 1/2 save them whole; stage 3 saves placeholders (its params' 0-element
  // stand-ins), so then none are listed and the property says so.
  std::string module_weights = "none saved";
  if (module != nullptr && module->kind == ValueKind::kDict && !module->entries.empty()) {
    std::string placeholder;
    for (const auto& [k, v] : module->entries) {
      if (k->kind != ValueKind::kStr || v->kind != ValueKind::kTensor || !placeholder.empty()) continue;
      auto it = by_name.find(k->text);
      if (it != by_name.end() && it->second->tensor->shape != v->tensor->shape) placeholder = k->text;
    }
    if (!placeholder.empty()) {
      module_weights = "placeholders ('" + placeholder + "' is " + std::to_string(module->Find(placeholder)->tensor->numel()) +
                       " elements): the 16-bit weights are not saved whole, only the fp32 masters";
    } else if (by_name.count("module")) {
      doc.warnings.push_back("a parameter is named 'module': the module's 16-bit weights are not listed");
    } else {
      Value* dict = doc.arena->Dict("dict");
      std::map<std::pair<const void*, uint64_t>, int64_t> index_of;  // tied entries (one storage) keep one storage index
      std::optional<DType> seen;
      bool mixed = false;
      for (const auto& [k, v] : module->entries) {
        if (k->kind != ValueKind::kStr || v->kind != ValueKind::kTensor) continue;
        TensorView view = *v->tensor;
        view.storage_key = model.name + ":" + view.storage_key;
        auto [at, fresh] = index_of.emplace(view.storage.identity(), storage_index);
        const int64_t index = at->second;
        WithContext("module entry '" + k->text + "'", [&] { view.Validate(); });
        view.storage_index = index;
        if (fresh) ++storage_index;
        if (Info(view.dtype).kind == DTypeKind::kFloat) {
          mixed |= seen && *seen != view.dtype;
          seen = view.dtype;
        }
        dict->entries.emplace_back(doc.arena->Str(k->text), doc.arena->Tensor(std::move(view)));
      }
      if (!dict->entries.empty()) {
        root->entries.emplace_back(doc.arena->Str("module"), dict);
        doc.opt_in_prefixes.push_back("module/");
        module_weights = (mixed || !seen ? std::string("mixed dtypes") : std::string(Name(*seen))) + ", " +
                         std::to_string(dict->entries.size()) + " tensors under module/ (convert --keys 'module/**')";
      }
    }
  }
  // The optimizer's per-element state (Adam's exp_avg and exp_avg_sq), flat per rank like the
  // masters, under "optimizer/<state>/<param>" (opt-in).
  std::string moments;
  if (by_name.count("optimizer")) {
    doc.warnings.push_back("a parameter is named 'optimizer': the optimizer state is not listed");
  } else {
    Value* dict = doc.arena->Dict("dict");
    AddOptimizerState(o, stage, sizes, [&](const std::string& key, const std::shared_ptr<const PartTable>& table, DType state_dtype) {
      Value* per_key = doc.arena->Dict("dict");
      for (size_t i = 0; i < params.size(); ++i) {
        const ZeroParam& p = params[i];
        list_tensor(per_key, p.name, PlacedTensor(o.files, table, rank_names, pieces[i], state_dtype, dims[p.name], p.numel, assembled));
      }
      dict->entries.emplace_back(doc.arena->Str(key), per_key);
      moments += (moments.empty() ? "" : ", ") + key;
    });
    if (!dict->entries.empty()) {
      root->entries.emplace_back(doc.arena->Str("optimizer"), dict);
      doc.opt_in_prefixes.push_back("optimizer/");
      moments += " under optimizer/<state>/ (convert --keys 'optimizer/**')";
    }
  }
  doc.root = root;
  doc.tensors = CollectTensors(root);
  std::vector<const ReadFile*> read(1, &files[0]);
  for (size_t r = 0; r < world; ++r) read.push_back(&files[r + 1]);
  if (frozen_files) {
    for (const ReadFile& f : *frozen_files) {
      if (f.name != model.name) read.push_back(&f);
    }
  }
  for (const ReadFile* fp : read) {
    const ReadFile& f = *fp;
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
  doc.properties.emplace_back("frozen_params", PropertyValue::Integer(static_cast<int64_t>(frozen)));
  doc.properties.emplace_back("buffers", PropertyValue::Integer(static_cast<int64_t>(buffers)));
  doc.properties.emplace_back("shared_params", PropertyValue::Integer(static_cast<int64_t>(shared)));
  doc.properties.emplace_back("assembled_tensors", PropertyValue::Integer(static_cast<int64_t>(assembled)));
  doc.properties.emplace_back("files", PropertyValue::Integer(static_cast<int64_t>(read.size())));
  doc.properties.emplace_back("module_weights", module_weights);
  if (!moments.empty()) doc.properties.emplace_back("optimizer_state", moments);
  return doc;
}

void VerifyDeepSpeedCheckpoint(const std::string& directory, CheckReport& report,
                               const ProgressReporter::Callback& progress) {
  try {
    Document doc = ReadDeepSpeedCheckpoint(directory, {});
    for (const auto& w : doc.warnings) report.Add(Severity::kInfo, "", 0, w);
    auto root = ConfinedDirectory::Open(directory);
    std::vector<std::string> names;
    for (const ContainerRecord& rec : doc.records) names.push_back(rec.name);
    CheckTorchArchiveCrcsIn(report, *root, names, progress);
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
    for (const auto& [rank, name] : listed.rank_model_states) {
      if (name != listed.model_states) names.push_back(name);  // stage 3: read for frozen params
    }
    for (const auto& [rank, name] : listed.optim) names.push_back(name);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo) throw;
    report.AddError(Severity::kMedium, "", e);
    return;
  }
  ScanTorchArchivesIn(report, *root, names, ZeroEnumMember);
}

}  // namespace trove
