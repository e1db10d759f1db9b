// Writing torch.save checkpoints (see trove/pt_writer.h for the layout).
//
// Steps: (1) turn the document's value tree into plain torch data (tensordict levels become
// dicts, NonTensorData its value; anything a torch file cannot hold is an error naming its key);
// (2) pickle it, assigning storage keys "0", "1", ... in pickling order exactly as torch.save
// does, tensors written as _rebuild_tensor_v2/v3 calls of persistent ids; (3) write the zip:
// data.pkl, the small records, each storage streamed from the source, version, serialization id.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <unordered_set>
#include <unordered_map>
#include <vector>

#include "core/cast_pipeline.h"
#include "core/progress.h"
#include "formats/pt/torch_resolver.h"
#include "pickle/global_class.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/pickler.h"
#include "trove/pt_writer.h"
#include "trove/zip_reader.h"
#include "trove/zip_writer.h"

namespace trove {
namespace {

constexpr uint64_t kStorageAlignment = 64;  // torch's kFieldAlignment

// One data/<key> record: either a whole source storage (shared by the views of it) or the
// contiguous bytes of one view (casts, big-endian sources, storages viewed with two dtypes).
struct StorageRecord {
  std::string key;
  DType dtype;
  uint64_t nbytes = 0;
  const TensorView* whole_of = nullptr;  // write view->storage whole
  const TensorView* compact = nullptr;   // write this view's C-contiguous bytes
};

std::string ArchiveName(const std::string& path) {
  std::string stem = std::filesystem::path(path).filename().string();
  size_t dot = stem.rfind('.');
  if (dot != std::string::npos && dot > 0) stem.resize(dot);
  return stem.empty() ? "archive" : stem;
}

// Builds the tree torch will get: a copy in `arena` sharing nothing with the source arena, with
// node identity preserved (a node shared in the source is shared in the copy). The walk is
// iterative, and a node's key path (for errors and tensor names) is a link to its parent's,
// spelled out only when needed: a deep tree costs memory linear in its nodes, not their depth.
class PlainTorchData {
 public:
  PlainTorchData(ValueArena& arena, bool keep_unknown) : arena_(arena), keep_unknown_(keep_unknown) {}

  Value* Convert(const Value* root) {
    links_.push_back({kNoLink, ""});
    std::vector<std::pair<const Value*, size_t>> work{{root, 0}};
    Value* out = Map(root, 0);
    while (!work.empty()) {
      const Value* src = work.back().first;
      const size_t link = work.back().second;
      work.pop_back();
      Value* dst = copies_.at(src);
      if (!pending_.erase(src)) continue;
      auto child = [&](const Value* c, std::string component) {
        links_.push_back({link, std::move(component)});
        Value* mapped = Map(c, links_.size() - 1);
        if (pending_.count(c)) work.push_back({c, links_.size() - 1});
        return mapped;
      };
      auto entries = [&](Value* into) {
        const std::vector<std::string> components =
            HasNonStrKeys(*src) ? DictKeyComponents(*src) : std::vector<std::string>{};
        // A dict's attributes are named as the walks name them (`%attr:<key>`, document.h).
        const std::string prefix = attributes_.count(src) ? "%attr:" : "";
        for (size_t i = 0; i < src->entries.size(); ++i) {
          const auto& [k, v] = src->entries[i];
          into->entries.push_back(
              {child(k, "(key)"), child(v, prefix + (components.empty() ? EncodeKeyComponent(k->text) : components[i]))});
        }
      };
      if (src->kind == ValueKind::kDict && dst->kind == ValueKind::kDict) {
        entries(dst);
        // Attributes: an OrderedDict's (a state_dict's _metadata) and a dict subclass's; the
        // plain dict a tensordict level becomes has none.
        if (src->state && dst->type_name != "dict") {
          attributes_.insert(src->state);
          dst->state = child(src->state, "");
        }
        if (src->args && dst->type_name != "dict") dst->args = child(src->args, "");
      } else if (src->kind == ValueKind::kDict && dst->type_name == kPickledTensorDict) {
        // TensorDict.__setstate__'s dict: its attributes, with the entries as `_tensordict` (a
        // _StringOnlyDict) after the first (`_device`, as TensorDict's __dict__ orders them).
        Value* inner = arena_.Dict("tensordict.utils._StringOnlyDict");
        inner->new_object = true;
        entries(inner);
        Value* state = arena_.Dict();
        attributes_.insert(src->state);
        for (const auto& [k, v] : src->state->entries) {
          if (state->entries.size() == 1) state->entries.emplace_back(arena_.Str("_tensordict"), inner);
          state->entries.emplace_back(child(k, "(key)"), child(v, "%attr:" + EncodeKeyComponent(k->text)));
        }
        if (state->entries.size() <= 1) state->entries.emplace_back(arena_.Str("_tensordict"), inner);
        dst->state = state;
      } else if (src->kind == ValueKind::kDict) {
        // argparse.Namespace: an object whose attributes are the dict's entries (see Map).
        dst->state = arena_.Dict();
        entries(dst->state);
      } else if (src->kind == ValueKind::kObject) {
        // As read: its arguments, state, entries and items (an object is looked through: no
        // component of its own).
        if (src->args) dst->args = child(src->args, "");
        if (src->state) dst->state = child(src->state, "");
        entries(dst);
        for (size_t i = 0; i < src->items.size(); ++i) dst->items.push_back(child(src->items[i], std::to_string(i)));
      } else if (src->kind == ValueKind::kList || src->kind == ValueKind::kTuple || src->kind == ValueKind::kSet ||
                 src->kind == ValueKind::kFrozenSet) {
        for (size_t i = 0; i < src->items.size(); ++i) dst->items.push_back(child(src->items[i], std::to_string(i)));
      }
    }
    return out;
  }

 private:
  static constexpr size_t kNoLink = static_cast<size_t>(-1);
  struct Link {
    size_t parent;
    std::string component;
  };

  std::string PathOf(size_t link) const {
    std::vector<const std::string*> parts;
    for (size_t l = link; l != kNoLink && links_[l].parent != kNoLink; l = links_[l].parent) {
      if (!links_[l].component.empty()) parts.push_back(&links_[l].component);  // "": looked through
    }
    std::string path;
    for (size_t i = parts.size(); i-- > 0;) {
      if (!path.empty()) path += '/';
      path += *parts[i];
    }
    return path;
  }

  Value* Map(const Value* src, size_t link) {
    auto it = copies_.find(src);
    if (it != copies_.end()) return it->second;
    if (StandsFor(*src)) {
      // A wrapper is written as the value it stands for; wrappers of wrappers unwind in a loop.
      std::vector<const Value*> wrappers;
      const Value* s = src;
      for (const Value* inner; (inner = StandsFor(*s)) != nullptr; s = inner) {
        if (wrappers.size() == kMaxValueDepth) {
          Fail(ErrorCode::kLimit, "'" + PathOf(link) + "': value nesting deeper than kMaxValueDepth (" +
                                      std::to_string(kMaxValueDepth) + ")");
        }
        wrappers.push_back(s);
      }
      Value* v = Map(s, link);  // s wraps nothing: this recursion is one level
      for (const Value* w : wrappers) copies_.emplace(w, v);
      return v;
    }
    const Value* s = src;
    Value* d = nullptr;
    switch (s->kind) {
      case ValueKind::kObject: {
        if (s->unknown_class && !keep_unknown_) {
          Fail(ErrorCode::kUnsupported, "'" + PathOf(link) + "': an object of class '" + s->type_name +
                                            "', which trove does not know (--keep-unknown writes it back as it was read)");
        }
        if (s->unknown_class && ClassifyGlobal(s->type_name).klass != GlobalClass::kUnknown) {
          Fail(ErrorCode::kRefused, "'" + PathOf(link) + "': an object of class '" + s->type_name +
                                        "', a dangerous name (read only under --permissive): not written");
        }
        if (!s->unknown_class && !IsDataName(s->type_name)) {
          Fail(ErrorCode::kUnsupported, "'" + PathOf(link) + "': a " + s->type_name + " object cannot be written to a .pt file");
        }
        d = arena_.Object(s->type_name, nullptr);
        d->new_object = s->new_object;
        d->unknown_class = s->unknown_class;
        d->module_size = s->module_size;
        pending_.insert(src);
        break;
      }
      case ValueKind::kGlobal: {
        // A name (a class or function the file refers to, never called) is data; a dangerous
        // one (only a permissive read keeps it) is not written.
        const GlobalVerdict verdict = ClassifyGlobal(s->type_name);
        if (!IsDataName(s->type_name) && verdict.klass != GlobalClass::kUnknown) {
          Fail(ErrorCode::kRefused, "'" + PathOf(link) + "': the name '" + s->type_name + "' resolves to " +
                                        verdict.target + " (" + std::string(GlobalClassName(verdict.klass)) +
                                        "): not written");
        }
        d = arena_.Global(s->type_name);
        d->module_size = s->module_size;
        break;
      }
      case ValueKind::kTensor:
        d = arena_.New(ValueKind::kTensor);
        d->tensor = s->tensor;
        tensor_links_.emplace(d, link);
        break;
      case ValueKind::kDict: {
        const std::string& cls = s->type_name;
        if (cls == "collections.OrderedDict" || cls == "collections.Counter") {
          d = arena_.Dict(cls);
        } else if (cls == kTensorDictLevel && s->state != nullptr && s->state->kind == ValueKind::kDict &&
                   s->state->Find("_batch_size") != nullptr) {
          // A TensorDict the source pickled (torch_resolver.h): a TensorDict again, made as
          // tensordict pickles it (NEWOBJ, then BUILD of its state with the entries).
          d = arena_.Object(std::string(kPickledTensorDict), arena_.Tuple());
          d->new_object = true;
        } else if (cls.empty() || cls == "dict" || cls.find(':') != std::string::npos) {
          d = arena_.Dict();  // tensordict's levels are dicts to torch
        } else if (cls == "argparse.Namespace") {
          d = arena_.Object(cls, nullptr);  // Namespace() and BUILD of its attributes, as pickle writes it
          d->new_object = true;
        } else {
          // defaultdict, a dict subclass of the file's: that class, made as it was (the pickler).
          if (!IsDataName(cls) && ClassifyGlobal(cls).klass != GlobalClass::kUnknown) {
            Fail(ErrorCode::kRefused, "'" + PathOf(link) + "': a dict of class '" + cls +
                                          "', a dangerous name (read only under --permissive): not written");
          }
          d = arena_.Dict(cls);
          d->new_object = s->new_object;
          d->module_size = s->module_size;
        }
        pending_.insert(src);
        break;
      }
      default:
        d = arena_.New(s->kind);
        *d = *s;
        d->items.clear();
        d->entries.clear();
        d->state = nullptr;
        if (s->is_container()) pending_.insert(src);
        break;
    }
    copies_.emplace(src, d);
    return d;
  }

 public:
  std::unordered_map<const Value*, size_t> tensor_links_;  // tensor node of the copy -> its link
  // The key path of a tensor node of the copy.
  std::string PathOfTensor(const Value* node) const { return PathOf(tensor_links_.at(node)); }

 private:
  // A name torch's data allowlist knows (what a weights-only reader gives a meaning).
  static bool IsDataName(const std::string& dotted) {
    const size_t dot = dotted.rfind('.');
    if (dot == std::string::npos) return false;
    bool allowed = false;
    TorchResolver check(PicklePolicy::kPermissive);
    ValueArena scratch;
    check.Global(dotted.substr(0, dot), dotted.substr(dot + 1), allowed, scratch);
    return allowed;
  }

  ValueArena& arena_;
  bool keep_unknown_;
  std::vector<Link> links_;  // [0] is the root
  std::unordered_map<const Value*, Value*> copies_;
  std::unordered_set<const Value*> pending_;
  std::unordered_set<const Value*> attributes_;  // source dicts that are a dict's attributes
};

bool NeedsV3(DType d) { return Info(d).storage_class.empty(); }

}  // namespace

void WritePt(const Document& doc, const std::string& path, const PtWriteOptions& options) {
  ValueArena arena;
  PlainTorchData plain(arena, options.keep_unknown);
  Value* root = doc.root ? plain.Convert(doc.root) : arena.None();

  // Which views may share one record: all views of a source storage with one dtype, a whole
  // number of elements, little-endian, not a cast.
  std::map<int64_t, std::vector<const TensorView*>> by_storage;
  for (const auto& [node, link] : plain.tensor_links_)
    if (node->tensor->storage_index >= 0 && !node->tensor->cast_source) by_storage[node->tensor->storage_index].push_back(node->tensor);
  auto shareable = [&](const TensorView* v) {
    if (v->cast_source || v->storage_index < 0 || v->byte_order == ByteOrder::kBig || !v->has_data) return false;
    if (v->storage.size() % ElementSize(v->dtype) != 0) return false;
    // An untyped storage and typed views of the same bytes would name one record with two
    // storage classes, which neither torch.save writes nor a reader takes: separate records.
    for (const TensorView* o : by_storage[v->storage_index])
      if (o->dtype != v->dtype || o->untyped_storage != v->untyped_storage || !o->storage.SameBytes(v->storage)) return false;
    return true;
  };

  std::vector<StorageRecord> records;
  std::map<int64_t, size_t> record_of_storage;            // shareable source storage -> record
  std::unordered_map<const TensorView*, size_t> record_of_view;  // compact views -> record
  Value* storage_str = arena.Str("storage");
  Value* cpu_str = arena.Str("cpu");
  std::vector<Value*> key_strs;
  auto record_for = [&](const TensorView* v) -> size_t {
    if (shareable(v)) {
      auto it = record_of_storage.find(v->storage_index);
      if (it != record_of_storage.end()) return it->second;
      records.push_back({std::to_string(records.size()), v->dtype, v->storage.size(), v, nullptr});
      record_of_storage.emplace(v->storage_index, records.size() - 1);
      key_strs.push_back(arena.Str(records.back().key));
      return records.size() - 1;
    }
    auto it = record_of_view.find(v);
    if (it != record_of_view.end()) return it->second;
    records.push_back({std::to_string(records.size()), v->dtype, v->nbytes(), nullptr, v});
    record_of_view.emplace(v, records.size() - 1);
    key_strs.push_back(arena.Str(records.back().key));
    return records.size() - 1;
  };
  auto ints = [&](const std::vector<int64_t>& xs) {
    Value* t = arena.Tuple();
    for (int64_t x : xs) t->items.push_back(arena.Int(x));
    return t;
  };
  std::unordered_map<const Value*, Value*> storage_pid;  // placeholder node -> persistent id

  Pickler pickler([&](const Value& node) -> std::optional<PickleOverride> {
    if (node.kind == ValueKind::kTuple && node.type_name == "torch.Size") {
      // torch.Size((d0, d1, ...)), as torch pickles a Size.
      PickleOverride o;
      o.module = "torch";
      o.name = "Size";
      o.args = arena.Tuple({arena.Tuple(node.items)});
      return o;
    }
    if (node.kind == ValueKind::kObject && node.type_name == "<storage-ref>") {
      PickleOverride o;
      o.persistent_id = storage_pid.at(&node);
      return o;
    }
    if (node.kind == ValueKind::kObject && node.type_name == "<tensor-call>") {  // a Parameter's data
      PickleOverride o;
      o.module = "torch._utils";
      o.name = node.integer == 3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2";
      o.args = node.args;
      return o;
    }
    if (node.kind != ValueKind::kTensor) return std::nullopt;
    const TensorView* v = node.tensor;
    if (!Info(v->dtype).readable && !v->quantizer) {
      Fail(ErrorCode::kUnsupported, "'" + plain.PathOfTensor(&node) + "': a quantized tensor without its quantizer cannot be written");
    }
    PickleOverride o;
    o.module = "torch._utils";
    Value* hooks = arena.Dict("collections.OrderedDict");
    if (!v->has_data) {
      o.name = "_rebuild_meta_tensor_no_storage";
      o.args = arena.Tuple({arena.Global("torch." + std::string(Info(v->dtype).torch_name)), ints(v->shape),
                            ints(v->strides), arena.Bool(v->requires_grad)});
      return o;
    }
    const size_t r = record_for(v);
    const StorageRecord& rec = records[r];
    // Dtypes without a typed storage class, and storages saved untyped, name UntypedStorage
    // (numel in bytes), as torch.save does.
    const bool v3 = NeedsV3(v->dtype);
    const bool untyped = v3 || (v->bare_storage && v->untyped_storage && v->dtype == DType::kUInt8);
    Value* placeholder = arena.Object("<storage-ref>", nullptr);
    Value* cls = untyped ? arena.Global("torch.storage.UntypedStorage")
                         : arena.Global("torch." + std::string(Info(v->dtype).storage_class));
    uint64_t numel = untyped ? rec.nbytes : rec.nbytes / ElementSize(rec.dtype);
    storage_pid[placeholder] = arena.Tuple({storage_str, cls, key_strs[r], cpu_str, arena.Int(static_cast<int64_t>(numel))});
    int64_t offset = rec.whole_of ? v->storage_offset : 0;
    std::vector<int64_t> strides = v->strides;
    if (rec.compact) strides = ContiguousStrides(v->shape);  // its own contiguous record
    if (v->bare_storage) {
      // A storage saved by itself: its persistent id alone, as torch.save writes one.
      if (offset != 0 || v->nbytes() != rec.nbytes) {
        Fail(ErrorCode::kUnsupported, "'" + plain.PathOfTensor(&node) + "': a window of a storage saved by itself cannot be written");
      }
      PickleOverride bare;
      bare.persistent_id = storage_pid.at(placeholder);
      return bare;
    }
    if (v->quantizer) {
      // _rebuild_qtensor(storage, offset, size, stride, quantizer_params, requires_grad, hooks),
      // as torch.save writes a quantized tensor; per-channel scales and zero points are tensors.
      const Quantizer& q = *v->quantizer;
      // torch writes per_channel_affine for the float-qparams scheme too (the zero points' dtype tells).
      Value* scheme = arena.Global(q.per_channel() ? "torch.per_channel_affine" : "torch.per_tensor_affine");
      Value* params = q.per_channel()
                          ? arena.Tuple({scheme, arena.Tensor(*q.scales), arena.Tensor(*q.zero_points), arena.Int(q.axis)})
                          : arena.Tuple({scheme, arena.Float(q.scale), arena.Int(q.zero_point)});
      o.name = "_rebuild_qtensor";
      o.args = arena.Tuple({placeholder, arena.Int(offset), ints(v->shape), ints(strides), params,
                            arena.Bool(v->requires_grad), hooks});
      return o;
    }
    Value* tensor_args = arena.Tuple({placeholder, arena.Int(offset), ints(v->shape), ints(strides),
                                      arena.Bool(v->requires_grad && !v->is_parameter), hooks});
    if (v3) tensor_args->items.push_back(arena.Global("torch." + std::string(Info(v->dtype).torch_name)));
    if (v->is_parameter) {
      // Parameter(data, requires_grad): the data tensor is a plain rebuild call of its own.
      Value* data = arena.Object("<tensor-call>", tensor_args);
      data->integer = v3 ? 3 : 2;
      o.name = "_rebuild_parameter";
      o.args = arena.Tuple({data, arena.Bool(v->requires_grad), arena.Dict("collections.OrderedDict")});
      return o;
    }
    o.name = v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2";
    o.args = tensor_args;
    return o;
  });
  std::string pkl = pickler.Dump(root);

  const std::string prefix = ArchiveName(path);
  // Dtypes torch added in 2.3 and later (uint16/32/64, float8, ...) have no typed storage: they
  // are written as torch 2.x writes them (_rebuild_tensor_v3), which torch before that cannot
  // load; the user hears so once, by dtype.
  if (options.note) {
    std::map<std::string, size_t> newer;
    for (const auto& t : doc.tensors)
      if (NeedsV3(t.view->dtype)) ++newer[std::string(Name(t.view->dtype))];
    if (!newer.empty()) {
      std::string list;
      for (const auto& [name, n] : newer) list += (list.empty() ? "" : ", ") + std::to_string(n) + " " + name;
      options.note("tensors of dtypes torch before 2.3 does not have (" + list + ") are written as torch 2.x writes "
                   "them (_rebuild_tensor_v3): torch 1.x and 2.0-2.2 cannot load this file");
    }
  }
  AtomicFile file(path, options.durability);
  ZipWriter zip(file, ZipLayout::kPyTorch);
  zip.AddEntry(prefix + "/data.pkl", pkl.data(), pkl.size(), ZipMethod::kStored, kStorageAlignment);
  zip.AddEntry(prefix + "/.format_version", "1", 1, ZipMethod::kStored, kStorageAlignment);
  zip.AddEntry(prefix + "/.storage_alignment", "64", 2, ZipMethod::kStored, kStorageAlignment);
  zip.AddEntry(prefix + "/byteorder", "little", 6, ZipMethod::kStored, kStorageAlignment);
  uint64_t payload_bytes = 0;
  for (const StorageRecord& rec : records) payload_bytes += rec.nbytes;
  ProgressReporter progress(options.progress, payload_bytes);
  // The records in order; cast ones are converted on every thread while earlier ones are written
  // (core/cast_pipeline.h), the others copied in their turn.
  std::vector<std::optional<SharedBytes>> stored(records.size());
  std::vector<OrderedWrite> writes(records.size());
  for (size_t r = 0; r < records.size(); ++r) {
    const StorageRecord& rec = records[r];
    stored[r] = rec.whole_of ? std::optional<SharedBytes>(rec.whole_of->storage) : rec.compact->StoredBytes();
    writes[r].begin = [&, r] {
      const ZipPlacement at = stored[r] ? PlacementFor(*stored[r], kStorageAlignment) : ZipPlacement{kStorageAlignment, 0};
      zip.BeginEntry(prefix + "/data/" + records[r].key, ZipMethod::kStored, at.align, records[r].nbytes, at.phase);
    };
    if (stored[r]) {
      writes[r].body = [&, r] {
        zip.WriteBytes(*stored[r]);
        progress.Add(records[r].nbytes);
      };
    } else {
      writes[r].view = rec.compact;
    }
    writes[r].end = [&] { zip.EndEntry(); };
  }
  // The casts' pieces are checksummed by the threads that convert them (core/cast_pipeline.h).
  const PieceChecksum crc32{
      [](const uint8_t* p, size_t n) { return Crc32(p, n); },
      [](uint32_t a, uint32_t b, uint64_t n) { return static_cast<uint32_t>(crc32_combine(a, b, static_cast<z_off_t>(n))); },
      [&](const uint8_t* p, size_t n, uint32_t crc) {
        zip.WriteChecksummed(p, n, crc);
        progress.Add(n);
      }};
  RunOrderedWrites(
      writes,
      [&](const uint8_t* p, size_t n) {
        zip.Write(p, n);
        progress.Add(n);
      },
      &crc32);
  progress.Finish();
  zip.AddEntry(prefix + "/version", "3\n", 2, ZipMethod::kStored, kStorageAlignment);
  // 20 digits naming the records (FNV-1a of their names) and 20 of their combined CRC-32s.
  uint64_t name_hash = 1469598103934665603ull;
  uLong crc = 0;
  for (const auto& e : zip.written()) {
    for (unsigned char c : e.name) name_hash = (name_hash ^ c) * 1099511628211ull;
    crc = crc32_combine(crc, e.crc32, static_cast<z_off_t>(e.uncompressed_size));
  }
  char id[48];
  std::snprintf(id, sizeof id, "%020llu%020llu", static_cast<unsigned long long>(name_hash),
                static_cast<unsigned long long>(crc));
  zip.AddEntry(prefix + "/.data/serialization_id", id, 40, ZipMethod::kStored, kStorageAlignment);
  zip.Finish();
  file.Commit();
}

}  // namespace trove
