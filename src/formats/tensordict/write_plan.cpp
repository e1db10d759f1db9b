#include "formats/tensordict/write_plan.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "core/count_text.h"
#include "core/little_endian.h"
#include "formats/tensordict/level_reader.h"
#include "formats/tensordict/meta_json.h"
#include "formats/tensordict/td_classes.h"
#include "formats/tensordict/td_names.h"
#include "trove/error.h"
#include "trove/tensordict.h"

namespace trove::tensordict {

bool PlannedFile::is_memmap() const {
  return IsMemmapName(name);
}

void PlannedFile::Emit(const std::function<void(const uint8_t*, size_t)>& fn,
                       const std::function<void(const SharedBytes&)>& stored) const {
  if (!bytes.empty()) fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  for (const TensorView* t : tensors) {
    std::optional<SharedBytes> view = t->StoredBytes();
    if (view && stored) {
      stored(*view);
    } else if (view) {
      view->ForEachRun(fn);  // mapped runs whole (an assembled tensor's pieces too): kernel copies
    } else {
      t->ForEachChunk(fn);
    }
  }
}

uint64_t TensorBytes(const PlannedDir& dir) {
  uint64_t total = 0;
  for (const auto& f : dir.files)
    if (!f.tensors.empty()) total += f.size;
  for (const auto& d : dir.dirs) total += TensorBytes(*d);
  return total;
}

namespace {

constexpr const char* kPickledNotRead = "pickled, not read";

std::string Display(const std::string& path) { return path.empty() ? "the root" : "key '" + path + "'"; }

std::string ChildPath(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "/" + key;
}

// tensordict's _STR_DTYPE_TO_DTYPE: what load_memmap can read back.
void CheckWritableDType(DType dtype, const std::string& where) {
  const DTypeInfo& info = Info(dtype);
  if (info.kind == DTypeKind::kQuantized || info.kind == DTypeKind::kBits ||
      (dtype >= DType::kFloat8E4M3FN && dtype <= DType::kFloat4E2M1FNx2)) {
    Fail(ErrorCode::kUnsupported, where + ": dtype " + std::string(info.name) +
                                      " is not in tensordict's dtype table (tensordict could not load it)");
  }
}

// A converting view (trove convert --dtype, --dequantize) has no storage of its own: its source
// (a dequantized view's, for a cast of one) is what must lie inside its bytes.
void ValidateSource(const TensorView& t, const std::string& path) {
  const TensorView* stored = &t;
  while (stored->cast_source) stored = stored->cast_source.get();
  WithContext(Display(path), [&] { stored->Validate(); });
}

bool IsScalar(const Value& v) {
  return v.kind == ValueKind::kNone || v.kind == ValueKind::kBool || v.kind == ValueKind::kInt ||
         v.kind == ValueKind::kFloat || v.kind == ValueKind::kStr;
}

bool IsPickledMarker(const Value& v) { return v.kind == ValueKind::kObject && v.type_name == kPickledNotRead; }

// A kObject that is a tensorclass read from tensordict: "module:qualname" with a dict state.
bool IsTensorclass(const Value& v) {
  return v.kind == ValueKind::kObject && v.type_name.find(':') != std::string::npos && !IsKnownClass(v.type_name) &&
         v.type_name != kNestedTensorClass && v.state != nullptr && v.state->kind == ValueKind::kDict;
}

std::vector<int64_t> IntList(const Value* v, const std::string& where) {
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  if (v->kind != ValueKind::kList && v->kind != ValueKind::kTuple)
    Fail(ErrorCode::kUsage, where + ": batch_size is not a list of ints");
  for (const Value* d : v->items) {
    if (d->kind != ValueKind::kInt || d->is_big_int() || d->integer < 0)
      Fail(ErrorCode::kUsage, where + ": batch_size holds something other than a non-negative int");
    out.push_back(d->integer);
  }
  return out;
}

class Planner {
 public:
  std::unique_ptr<PlannedDir> PlanRoot(const Value* root) {
    if (root == nullptr) Fail(ErrorCode::kUsage, "the document is empty");
    auto dir = std::make_unique<PlannedDir>();
    if (!PlanCollection(*root, "", 0, *dir)) {
      Fail(ErrorCode::kUsage, std::string("the root is a ") + std::string(KindName(root->kind)) +
                                  ", not a mapping: a tensordict needs keys");
    }
    return dir;
  }

  // The keys of plain dicts that were not str, as "'state/0' (int)", in tree order.
  const std::vector<std::string>& retyped_keys() const { return retyped_keys_; }

 private:
  std::vector<std::string> retyped_keys_;
  // Fills `dir` from a value that is a collection; false when the value is a leaf or a scalar
  // (which only make sense under a key).
  bool PlanCollection(const Value& v, const std::string& path, int depth, PlannedDir& dir) {
    if (depth > kMaxLevelDepth) {
      Fail(ErrorCode::kLimit, Display(path) + ": nested deeper than kMaxLevelDepth (" + std::to_string(kMaxLevelDepth) +
                                  ") levels (or a cycle)");
    }
    switch (v.kind) {
      case ValueKind::kDict: {
        if (KindOfClass(v.type_name) == ClassKind::kLazyStack) {
          PlanLazyStack(v, path, depth, dir);
        } else {
          std::vector<std::pair<std::string, const Value*>> entries;
          std::vector<std::string> int_keys;
          for (const auto& [k, val] : v.entries) {
            entries.emplace_back(KeyComponentText(*k), val);
            if (k->kind == ValueKind::kInt) {
              int_keys.push_back(entries.back().first);
            } else if (k->kind != ValueKind::kStr) {
              retyped_keys_.push_back("'" + ChildPath(path, entries.back().first) + "' (" + std::string(KindName(k->kind)) + ")");
            }
          }
          // Any other dict class (OrderedDict, dict, a TensorDict subclass trove does not know)
          // is written as a TensorDict: that is what it means to tensordict.
          const std::string cls = KindOfClass(v.type_name) == ClassKind::kTensorDict ? v.type_name
                                                                                    : std::string(kTensorDictClass);
          // Only a level read from tensordict has tensordict entries in its state; another
          // dict's state (an OrderedDict's _metadata) is not the level's.
          PlanTensorDict(cls, entries, KindOfClass(v.type_name) == ClassKind::kTensorDict ? v.state : nullptr, "",
                         path, depth, dir, int_keys);
        }
        return true;
      }
      case ValueKind::kList: case ValueKind::kTuple: {
        if (v.type_name == "torch.Size") {
          // It would read back as a tuple of ints: refused rather than changed.
          Fail(ErrorCode::kUnsupported, Display(path) + ": a torch.Size cannot be stored as one in a tensordict "
                                        "(it would read back as a tuple)");
        }
        std::vector<std::pair<std::string, const Value*>> entries;
        for (size_t i = 0; i < v.items.size(); ++i) entries.emplace_back(std::to_string(i), v.items[i]);
        PlanTensorDict(std::string(kTensorDictClass), entries, nullptr, v.kind == ValueKind::kList ? "list" : "tuple",
                       path, depth, dir);
        return true;
      }
      case ValueKind::kObject: {
        if (IsPickledMarker(v)) {
          Fail(ErrorCode::kUnsupported, Display(path) + ": a pickled sidecar trove did not read (read with "
                                        "allow_pickle to convert it)");
        }
        switch (KindOfClass(v.type_name)) {
          case ClassKind::kNonTensorData: PlanNonTensorData(v.type_name, v.state, nullptr, path, dir); return true;
          case ClassKind::kNonTensorStack: case ClassKind::kSubTensorDict: case ClassKind::kLazyView:
            PlanFieldsLevel(v, path, depth, dir);
            return true;
          default: break;
        }
        if (IsTensorclass(v)) {
          PlanTensorclass(v, path, depth, dir);
          return true;
        }
        if (v.type_name == kNestedTensorClass) return false;
        Fail(ErrorCode::kUnsupported, Display(path) + ": an object of class '" + v.type_name +
                                          "' (only data can be written: tensors, containers, plain values)");
      }
      default:
        return false;
    }
  }

  // Registers a file or directory name in one directory; two keys landing on one name is an error.
  static void Claim(std::map<std::string, std::string>& names, const std::string& name, const std::string& path) {
    auto [it, inserted] = names.emplace(name, path);
    if (!inserted) {
      Fail(ErrorCode::kUsage, Display(path) + ": its file '" + name + "' collides with " + Display(it->second) +
                                  " (one of them would be lost)");
    }
  }

  void PlanTensorDict(const std::string& cls, const std::vector<std::pair<std::string, const Value*>>& entries,
                      const Value* state, const std::string& sequence, const std::string& path, int depth,
                      PlannedDir& dir, const std::vector<std::string>& int_keys = {}) {
    if (entries.size() > kMaxEntriesPerLevel) {
      Fail(ErrorCode::kLimit, Display(path) + ": more than kMaxEntriesPerLevel (" + std::to_string(kMaxEntriesPerLevel) +
                                  ") keys");
    }
    Json meta = Json::object();
    std::map<std::string, std::string> names{{"meta.json", "meta.json"}};
    // ordered_json finds a key by a linear search (operator[], contains): the level's keys are
    // checked against a hash set and appended to the object's vector directly, so a level of n keys
    // costs n, not n^2/2 string compares (40,000 keys took 3.3 s, 20,000 0.8 s).
    std::unordered_set<std::string> written_keys;
    auto& level = static_cast<Json::object_t::Container&>(meta.get_ref<Json::object_t&>());
    for (const auto& [key, value] : entries) {
      const std::string kpath = ChildPath(path, key);
      if (key == "shape" || key == "device" || key == "_type") {
        Fail(ErrorCode::kUsage, Display(kpath) + ": a key named '" + key +
                                    "' would be overwritten by the tensordict's own meta.json entry");
      }
      if (!written_keys.insert(key).second) Fail(ErrorCode::kUsage, Display(kpath) + ": two keys are both written as '" + key + "'");
      level.emplace_back(key, PlanEntry(key, *value, kpath, depth, dir, names));
    }
    // The level's own entries, in the spec's order.
    const Value* batch = state != nullptr ? state->Find("batch_size") : nullptr;
    meta["shape"] = IntList(batch, Display(path));
    const Value* device = state != nullptr ? state->Find("device") : nullptr;
    if (device == nullptr) {
      meta["device"] = "cpu";
    } else if (device->kind == ValueKind::kNone) {
      meta["device"] = kNoDevice;
    } else if (device->kind == ValueKind::kStr) {
      meta["device"] = device->text;
    } else {
      Fail(ErrorCode::kUsage, Display(path) + ": device is not a string");
    }
    meta["_type"] = TypeReprFromClass(cls);
    // A key of one of these names keeps its entry (spec): the level's entry is then left out.
    if (!meta.contains("_format_version")) meta["_format_version"] = kTensordictFormatVersion;
    if (!meta.contains("_class")) meta["_class"] = cls;
    const Value* names_v = state != nullptr ? state->Find("names") : nullptr;
    if (names_v != nullptr && names_v->kind != ValueKind::kNone && !meta.contains("_names")) {
      Json jn = ValueToJson(*names_v, Display(path) + ": names");
      bool any = false;
      for (const auto& n : jn) {
        if (!n.is_string() && !n.is_null()) Fail(ErrorCode::kUsage, Display(path) + ": names must be strings or None");
        any = any || n.is_string();
      }
      if (any) meta["_names"] = jn;
    }
    if (!sequence.empty()) meta[kSequenceMarker] = sequence;
    if (!int_keys.empty()) meta[kIntKeysMarker] = int_keys;
    // Other entries a reader kept verbatim (tensordict skips non-object entries): kept too,
    // except objects, which would read back as keys.
    if (state != nullptr) {
      for (const auto& [k, val] : state->entries) {
        if (k->kind != ValueKind::kStr) continue;
        const std::string& name = k->text;
        if (name == "batch_size" || name == "device" || name == "names" || name == "_type" || name == "shape" ||
            name == "_format_version" || name == "_class" || name == "_names" || name == kSequenceMarker ||
            name == kIntKeysMarker ||
            written_keys.count(name) != 0 || !JsonCanHold(*val) || val->kind == ValueKind::kDict) {
          continue;
        }
        written_keys.insert(name);
        level.emplace_back(name, ValueToJson(*val, Display(path)));
      }
    }
    Finish(dir, meta);
  }

  // One key of a TensorDict level: a leaf (files here) or a collection (a sub-directory).
  Json PlanEntry(const std::string& key, const Value& value, const std::string& kpath, int depth, PlannedDir& dir,
                 std::map<std::string, std::string>& names) {
    const std::string enc = EncodeKeyComponent(key);
    if (value.kind == ValueKind::kTensor) return PlanLeaf(*value.tensor, enc, kpath, dir, names);
    if (value.kind == ValueKind::kObject && value.type_name == kNestedTensorClass)
      return PlanNestedLeaf(value, enc, kpath, dir, names);
    Claim(names, enc, kpath);
    auto sub = std::make_unique<PlannedDir>();
    sub->name = enc;
    std::string type_name;
    if (IsScalar(value)) {
      PlanNonTensorData(std::string(kNonTensorDataClass), nullptr, &value, kpath, *sub);
      type_name = "NonTensorData";
    } else if (PlanCollection(value, kpath, depth + 1, *sub)) {
      type_name = value.kind == ValueKind::kDict && KindOfClass(value.type_name) == ClassKind::kLazyStack
                      ? "LazyStackedTensorDict"
                  : value.kind == ValueKind::kObject ? ShortName(value.type_name)
                                                     : "TensorDict";
    } else {
      Fail(ErrorCode::kUnsupported, Display(kpath) + ": a " + std::string(KindName(value.kind)) +
                                        " value cannot be stored exactly (not a tensor, container or JSON value)");
    }
    dir.dirs.push_back(std::move(sub));
    return Json{{"type", type_name}};
  }

  Json PlanLeaf(const TensorView& t, const std::string& enc, const std::string& kpath, PlannedDir& dir,
                std::map<std::string, std::string>& names) {
    if (++leaves_ > kMaxLeaves) {
      Fail(ErrorCode::kLimit, Display(kpath) + ": more than kMaxLeaves (" + std::to_string(kMaxLeaves) +
                                  ") tensors to write (a tensordict reader would refuse them)");
    }
    CheckWritableDType(t.dtype, Display(kpath));
    if (!t.has_data) Fail(ErrorCode::kUnsupported, Display(kpath) + ": a tensor without data (meta tensor)");
    ValidateSource(t, kpath);
    Claim(names, enc + kMemmapSuffix, kpath);
    if (t.numel() > 0) {
      PlannedFile f;
      f.name = enc + kMemmapSuffix;
      f.tensors.push_back(&t);
      f.size = t.nbytes();
      dir.files.push_back(std::move(f));
    }
    // Zero-element leaves get no file, as tensordict writes them (and reads them back).
    return Json{{"device", "cpu"}, {"shape", t.shape}, {"dtype", TorchDtypeString(t.dtype)},
                {"is_nested", false}};
  }

  Json PlanNestedLeaf(const Value& v, const std::string& enc, const std::string& kpath, PlannedDir& dir,
                      std::map<std::string, std::string>& names) {
    if (v.state == nullptr || v.state->kind != ValueKind::kList || v.state->items.empty()) {
      Fail(ErrorCode::kUsage, Display(kpath) + ": a nested tensor needs a list of component tensors");
    }
    PlannedFile data, sizes;
    data.name = enc + kMemmapSuffix;
    sizes.name = enc + kShapeMemmapSuffix;
    const TensorView* first = nullptr;
    for (const Value* c : v.state->items) {
      if (c->kind != ValueKind::kTensor) Fail(ErrorCode::kUsage, Display(kpath) + ": a nested component is not a tensor");
      const TensorView& t = *c->tensor;
      if (first == nullptr) first = &t;
      if (t.dtype != first->dtype || t.shape.size() != first->shape.size())
        Fail(ErrorCode::kUsage, Display(kpath) + ": nested components differ in dtype or rank");
      if (!t.has_data) Fail(ErrorCode::kUnsupported, Display(kpath) + ": a tensor without data (meta tensor)");
      ValidateSource(t, kpath);
      for (int64_t d : t.shape)
        AppendLe(sizes.bytes, static_cast<uint64_t>(d), 8);
      data.tensors.push_back(&t);
      data.size += t.nbytes();
    }
    CheckWritableDType(first->dtype, Display(kpath));
    sizes.size = sizes.bytes.size();
    Claim(names, data.name, kpath);
    Claim(names, sizes.name, kpath);
    const int64_t n = static_cast<int64_t>(v.state->items.size()), ndim = static_cast<int64_t>(first->shape.size());
    dir.files.push_back(std::move(data));
    dir.files.push_back(std::move(sizes));
    return Json{{"device", "cpu"}, {"shape", {n, ndim}}, {"dtype", TorchDtypeString(first->dtype)},
                {"is_nested", true}};
  }

  void PlanLazyStack(const Value& v, const std::string& path, int depth, PlannedDir& dir) {
    for (size_t i = 0; i < v.entries.size(); ++i) {
      const std::string key = KeyComponentText(*v.entries[i].first);
      const std::string kpath = ChildPath(path, key);
      if (key != std::to_string(i)) {
        Fail(ErrorCode::kUsage, Display(kpath) + ": a lazy stack's members must be keyed 0, 1, ... in order");
      }
      auto sub = std::make_unique<PlannedDir>();
      sub->name = key;
      if (!PlanCollection(*v.entries[i].second, kpath, depth + 1, *sub))
        Fail(ErrorCode::kUsage, Display(kpath) + ": a lazy stack member must be a tensordict");
      dir.dirs.push_back(std::move(sub));
    }
    const Value* sd = v.state != nullptr ? v.state->Find("stack_dim") : nullptr;
    const Value* sdn = v.state != nullptr ? v.state->Find("stack_dim_name") : nullptr;
    Json meta = Json::object();
    meta["_type"] = TypeReprFromClass(v.type_name);
    meta["stack_dim"] = sd != nullptr ? ValueToJson(*sd, Display(path) + ": stack_dim") : Json(0);
    meta["stack_dim_name"] = sdn != nullptr ? ValueToJson(*sdn, Display(path) + ": stack_dim_name") : Json(nullptr);
    meta["_format_version"] = kTensordictFormatVersion;
    meta["_class"] = v.type_name;
    Finish(dir, meta);
  }

  // NonTensorData: from a tensordict read (its fields) or from a plain value (`data`).
  void PlanNonTensorData(const std::string& cls, const Value* fields, const Value* data, const std::string& path,
                         PlannedDir& dir) {
    Json meta = Json::object();
    meta["_type"] = TypeReprFromClass(cls);
    if (data != nullptr) {
      meta["data"] = ValueToJson(*data, Display(path));
      meta["_metadata"] = nullptr;
      meta["_is_non_tensor"] = true;
    } else if (fields != nullptr && fields->kind == ValueKind::kDict) {
      for (const auto& [k, val] : fields->entries) {
        if (IsPickledMarker(*val)) {
          Fail(ErrorCode::kUnsupported, Display(path) + ": a pickled sidecar trove did not read (read with "
                                        "allow_pickle to convert it)");
        }
        meta[KeyComponentText(*k)] = ValueToJson(*val, Display(ChildPath(path, KeyComponentText(*k))));
      }
    }
    Finish(dir, meta);
  }

  // NonTensorStack, _SubTensorDict, lazy views: fields verbatim; collections become sub-dirs.
  void PlanFieldsLevel(const Value& v, const std::string& path, int depth, PlannedDir& dir) {
    Json meta = Json::object();
    meta["_type"] = TypeReprFromClass(v.type_name);
    if (v.state != nullptr && v.state->kind == ValueKind::kDict) {
      for (const auto& [k, val] : v.state->entries) {
        const std::string key = KeyComponentText(*k);
        const std::string kpath = ChildPath(path, key);
        if (IsPickledMarker(*val)) {
          Fail(ErrorCode::kUnsupported, Display(kpath) + ": a pickled sidecar trove did not read (read with "
                                        "allow_pickle to convert it)");
        }
        if (JsonCanHold(*val)) {
          meta[key] = ValueToJson(*val, Display(kpath));
          continue;
        }
        if (key != "_source" && !std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          Fail(ErrorCode::kUnsupported, Display(kpath) + ": a field that is neither JSON nor a stacked member");
        }
        auto sub = std::make_unique<PlannedDir>();
        sub->name = key;
        if (!PlanCollection(*val, kpath, depth + 1, *sub)) {
          Fail(ErrorCode::kUnsupported, Display(kpath) + ": must be a tensordict");
        }
        dir.dirs.push_back(std::move(sub));
      }
    }
    meta["_format_version"] = kTensordictFormatVersion;
    meta["_class"] = v.type_name;
    Finish(dir, meta);
  }

  // A tensorclass: plain JSON fields in its meta.json (no _format_version/_class: older
  // tensordict would take them for fields), everything else in _tensordict/.
  void PlanTensorclass(const Value& v, const std::string& path, int depth, PlannedDir& dir) {
    const Value& td = *v.state;
    std::vector<std::pair<std::string, const Value*>> inner;
    Json meta = Json::object();
    meta["_type"] = TypeReprFromClass(v.type_name);
    for (const auto& [k, val] : td.entries) {
      const std::string key = KeyComponentText(*k);
      if (key == "_type") Fail(ErrorCode::kUsage, Display(ChildPath(path, key)) + ": a field named '_type'");
      if (val->kind != ValueKind::kTensor && !IsPickledMarker(*val) && val->kind != ValueKind::kObject &&
          !(val->kind == ValueKind::kDict && val->type_name.find(':') != std::string::npos) && JsonCanHold(*val)) {
        meta[key] = ValueToJson(*val, Display(ChildPath(path, key)));
      } else {
        inner.emplace_back(key, val);
      }
    }
    auto sub = std::make_unique<PlannedDir>();
    sub->name = "_tensordict";
    PlanTensorDict(KindOfClass(td.type_name) == ClassKind::kTensorDict ? td.type_name : std::string(kTensorDictClass),
                   inner, td.state, "", ChildPath(path, "_tensordict"), depth + 1, *sub);
    dir.dirs.push_back(std::move(sub));
    Finish(dir, meta);
  }

  // Every planned directory ends here. A tree whose subtrees are shared (pickle memo) plans one
  // directory per path to them, so the count is bounded by what the reader accepts.
  void Finish(PlannedDir& dir, const Json& meta) {
    if (++levels_ > kMaxLevels) {
      Fail(ErrorCode::kLimit, "more than kMaxLevels (" + std::to_string(kMaxLevels) +
                                  ") levels to write (a tensordict reader would refuse them)");
    }
    dir.meta.name = "meta.json";
    dir.meta.bytes = DumpCompact(meta);
    dir.meta.size = dir.meta.bytes.size();
    std::sort(dir.files.begin(), dir.files.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    std::sort(dir.dirs.begin(), dir.dirs.end(), [](const auto& a, const auto& b) { return a->name < b->name; });
  }

  uint64_t levels_ = 0;
  uint64_t leaves_ = 0;
};

}  // namespace

std::unique_ptr<PlannedDir> PlanTensordict(const Document& doc, const std::function<void(const std::string&)>& note) {
  Planner planner;
  std::unique_ptr<PlannedDir> plan = planner.PlanRoot(doc.root);
  if (const std::vector<std::string>& keys = planner.retyped_keys(); !keys.empty() && note) {
    const std::string listed = FirstFew(keys);
    note(std::to_string(keys.size()) + " dict key(s) that are neither str nor int written as their text (a "
         "tensordict's keys are str; they read back as str): " + listed);
  }
  return plan;
}

}  // namespace trove::tensordict
