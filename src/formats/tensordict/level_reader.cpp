#include "formats/tensordict/level_reader.h"

#include <nettle/sha2.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "core/little_endian.h"
#include "formats/tensordict/meta_json.h"
#include "formats/tensordict/td_classes.h"
#include "formats/tensordict/td_names.h"
#include "formats/tensordict/write_plan.h"
#include "trove/error.h"
#include "trove/tensordict.h"
#include "trove/unpickler.h"

namespace trove::tensordict {
namespace {

// type_name of the node that stands for a pickled sidecar trove did not decode.
constexpr const char* kPickledNotRead = "pickled, not read";

int64_t CheckedMul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) Fail(ErrorCode::kCorrupt, what + " overflows 64 bits");
  return r;
}

std::string Sha256Hex(const SharedBytes& bytes) {
  sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, bytes.size(), bytes.data());
  unsigned char md[SHA256_DIGEST_SIZE];
  sha256_digest(&ctx, sizeof md, md);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < sizeof md; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

// tensordict's _is_safe_legacy_key: the unencoded name is tried only for one path component.
bool IsSafeLegacyKey(const std::string& key, bool collection) {
  if (key.find('/') != std::string::npos || key.find('\\') != std::string::npos ||
      key.find('\0') != std::string::npos)
    return false;
  if (key.size() >= 2 && std::isalpha(static_cast<unsigned char>(key[0])) && key[1] == ':') return false;
  if (collection && (key.empty() || key == "." || key == "..")) return false;
  return true;
}

void SetField(ValueArena& arena, Value* dict, const std::string& key, Value* value) {
  for (auto& [k, v] : dict->entries) {
    if (k->kind == ValueKind::kStr && k->text == key) {
      v = value;
      return;
    }
  }
  dict->entries.emplace_back(arena.Str(key), value);
}

class LevelReader {
 public:
  LevelReader(TreeSource& source, Document& doc, const ReadOptions& options)
      : src_(source), doc_(doc), arena_(*doc.arena), options_(options) {}

  TreeStats stats;

  Value* ReadLevel(const std::string& dir, int depth) {
    if (depth > kMaxLevelDepth) {
      Fail(ErrorCode::kLimit, src_.Describe(dir, "") + ": levels nested deeper than kMaxLevelDepth (" +
                                  std::to_string(kMaxLevelDepth) + ")");
    }
    if (++stats.levels > kMaxLevels) {
      Fail(ErrorCode::kLimit, src_.Describe(dir, "") + ": more than kMaxLevels (" + std::to_string(kMaxLevels) +
                                  ") nested levels");
    }
    const std::string meta_name = src_.Describe(dir, "meta.json");
    auto bytes = src_.ReadSmallFile(dir, "meta.json", kMaxMetaJsonBytes);
    if (!bytes) Fail(ErrorCode::kNotFound, meta_name + ": missing");
    Json meta = ParseMetaJson(bytes->view(), meta_name);
    if (!meta.is_object()) Fail(ErrorCode::kCorrupt, meta_name + ": not a JSON object");
    if (meta.size() > kMaxEntriesPerLevel) {
      Fail(ErrorCode::kLimit, meta_name + ": " + std::to_string(meta.size()) + " entries exceed kMaxEntriesPerLevel (" +
                                  std::to_string(kMaxEntriesPerLevel) + ")");
    }
    const int version = FormatVersion(meta, meta_name);
    const std::string cls = ResolveClass(meta, meta_name);
    if (depth == 0) {
      stats.root_format_version = version;
      stats.root_class = cls;
    }
    switch (KindOfClass(cls)) {
      case ClassKind::kTensorDict: return ReadTensorDict(dir, meta, meta_name, cls, version, depth);
      case ClassKind::kLazyStack: return ReadLazyStack(dir, meta, meta_name, cls, depth);
      case ClassKind::kNonTensorData: return ReadNonTensorData(dir, meta, cls);
      case ClassKind::kNonTensorStack: return ReadNonTensorStack(dir, meta, meta_name, cls, depth);
      case ClassKind::kSubTensorDict:
        return ReadWithSource(dir, meta, meta_name, cls, {"index"}, depth);
      case ClassKind::kLazyView:
        return ReadWithSource(dir, meta, meta_name, cls, {"custom_op", "inv_op", "custom_op_kwargs", "inv_op_kwargs"},
                              depth);
      case ClassKind::kOther: break;
    }
    if (src_.HasDir(dir, "_tensordict")) return ReadTensorclass(dir, meta, cls, depth);
    auto shape = meta.find("shape");
    if (shape != meta.end() && !shape->is_object()) {
      // A TensorDict subclass trove does not know: its layout is a TensorDict's.
      return ReadTensorDict(dir, meta, meta_name, cls, version, depth);
    }
    Fail(ErrorCode::kUnsupported, meta_name + ": class '" + cls +
                                      "' is not a tensordict class trove knows, and has no _tensordict/ (not a "
                                      "tensorclass)");
  }

 private:
  static int FormatVersion(const Json& meta, const std::string& meta_name) {
    auto it = meta.find("_format_version");
    if (it == meta.end() || it->is_object()) return 0;  // an object there is a key named so
    if (!it->is_number_integer()) Fail(ErrorCode::kCorrupt, meta_name + ": _format_version is not an integer");
    if (it->is_number_unsigned() ? it->get<uint64_t>() > uint64_t(kTensordictFormatVersion)
                                 : it->get<int64_t>() > kTensordictFormatVersion) {
      Fail(ErrorCode::kUnsupported, meta_name + ": format version " + it->dump() +
                                        " is newer than version " + std::to_string(kTensordictFormatVersion) +
                                        ", the newest trove reads");
    }
    int64_t v = it->get<int64_t>();
    if (v < 0) Fail(ErrorCode::kCorrupt, meta_name + ": negative _format_version " + std::to_string(v));
    return static_cast<int>(v);
  }

  // load_memmap's rule: `_class` when it names a known class, else `_type`.
  static std::string ResolveClass(const Json& meta, const std::string& meta_name) {
    std::string from_class, from_type;
    auto c = meta.find("_class");
    if (c != meta.end() && c->is_string()) from_class = c->get<std::string>();
    auto t = meta.find("_type");
    if (t != meta.end() && !t->is_object()) {
      if (!t->is_string()) Fail(ErrorCode::kCorrupt, meta_name + ": _type is not a string");
      from_type = ClassFromTypeRepr(t->get_ref<const std::string&>());
      if (from_type.empty()) {
        Fail(ErrorCode::kCorrupt, meta_name + ": _type '" + t->get<std::string>() + "' is not a class (\"<class '...'>\")");
      }
    }
    if (!from_class.empty() && IsKnownClass(from_class)) return from_class;
    if (!from_type.empty()) return from_type;
    if (!from_class.empty()) return from_class;
    Fail(ErrorCode::kCorrupt, meta_name + ": no '_type' entry (the class of this level is unknown)");
  }

  Value* ReadTensorDict(const std::string& dir, const Json& meta, const std::string& meta_name, const std::string& cls,
                        int version, int depth) {
    Value* level = arena_.Dict(cls);
    Value* state = arena_.Dict("dict");
    level->state = state;
    // The level's own entries first, in a fixed order, then the rest verbatim.
    Value* batch = arena_.List();
    auto shape = meta.find("shape");
    if (shape != meta.end() && !shape->is_object()) {
      for (int64_t d : ParseShape(*shape, meta_name + ": shape")) batch->items.push_back(arena_.Int(d));
    }
    state->entries.emplace_back(arena_.Str("batch_size"), batch);
    Value* device = arena_.None();
    auto dev = meta.find("device");
    if (dev != meta.end() && !dev->is_object()) {
      if (dev->is_string() && dev->get_ref<const std::string&>() != kNoDevice) {
        device = arena_.Str(dev->get<std::string>());
      } else if (!dev->is_string() && !dev->is_null()) {
        Fail(ErrorCode::kCorrupt, meta_name + ": device is not a string");
      }
    }
    state->entries.emplace_back(arena_.Str("device"), device);
    auto names = meta.find("_names");
    if (names != meta.end() && !names->is_object()) {
      if (!names->is_array()) Fail(ErrorCode::kCorrupt, meta_name + ": _names is not a list");
      for (const auto& n : *names)
        if (!n.is_string() && !n.is_null()) Fail(ErrorCode::kCorrupt, meta_name + ": _names holds a non-string");
      state->entries.emplace_back(arena_.Str("names"), JsonToValue(*names, arena_));
    }
    bool has_type_entries = false, has_is_nested = false;
    for (auto it = meta.begin(); it != meta.end(); ++it) {
      const std::string& k = it.key();
      if (!it->is_object()) {
        if (k != "shape" && k != "device" && k != "_names") state->entries.emplace_back(arena_.Str(k), JsonToValue(*it, arena_));
        continue;
      }
      if (it->contains("type")) {
        has_type_entries = true;
      } else if (it->contains("dtype") && it->contains("shape")) {
        has_is_nested = has_is_nested || it->contains("is_nested");
      } else {
        Fail(ErrorCode::kCorrupt, meta_name + ": entry '" + k +
                                      "' is neither a leaf (dtype, shape) nor a collection (type)");
      }
    }
    for (auto it = meta.begin(); it != meta.end(); ++it) {
      if (!it->is_object()) continue;
      const std::string& k = it.key();
      Value* child = nullptr;
      if (it->contains("type")) {
        child = ReadLevel(JoinRel(dir, FindDir(dir, k)), depth + 1);
      } else {
        child = ReadLeaf(dir, k, *it, meta_name);  // its messages name the file and the key
      }
      level->entries.emplace_back(arena_.Str(k), child);
    }
    // tensordict 0.3 wrote no "type" entries and found nested levels by listing sub-directories.
    if (!has_type_entries && !has_is_nested && version == 0) {
      for (const std::string& name : src_.ListDirs(dir)) {
        if (level->Find(name) != nullptr || !src_.HasFile(JoinRel(dir, name), "meta.json")) continue;
        level->entries.emplace_back(arena_.Str(name), ReadLevel(JoinRel(dir, name), depth + 1));
      }
    }
    // Keys trove wrote from Python ints (see kIntKeysMarker): each listed key that is an int's
    // canonical decimal text and names an entry becomes that int again; anything else listed is
    // left a str.
    if (auto ints = meta.find(kIntKeysMarker); ints != meta.end() && ints->is_array()) {
      std::unordered_map<std::string_view, size_t> at;
      for (size_t i = 0; i < level->entries.size(); ++i) at.emplace(level->entries[i].first->text, i);
      for (const Json& key : *ints) {
        if (!key.is_string()) continue;
        const std::string& text = key.get_ref<const std::string&>();
        int64_t value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        auto entry = at.find(text);
        if (ec != std::errc() || end != text.data() + text.size() || std::to_string(value) != text || entry == at.end()) continue;
        level->entries[entry->second].first = arena_.Int(value);
        at.erase(entry);
      }
      // Said by the keys themselves now, not an attribute of the level.
      if (level->state != nullptr) {
        std::erase_if(level->state->entries, [](const auto& e) { return e.first->kind == ValueKind::kStr && e.first->text == kIntKeysMarker; });
      }
    }
    // A level trove wrote from a Python list or tuple (see kSequenceMarker).
    auto seq = meta.find(kSequenceMarker);
    if (seq != meta.end() && seq->is_string() && (*seq == "list" || *seq == "tuple")) {
      bool in_order = true;
      for (size_t i = 0; i < level->entries.size() && in_order; ++i) in_order = level->entries[i].first->text == std::to_string(i);
      if (in_order) {
        Value* sequence = *seq == "list" ? arena_.List() : arena_.Tuple();
        for (auto& entry : level->entries) sequence->items.push_back(entry.second);
        return sequence;
      }
      doc_.warnings.push_back(meta_name + ": marked as a " + seq->get<std::string>() +
                              " but its keys are not 0, 1, ...; read as a TensorDict");
    }
    return level;
  }

  Value* ReadLazyStack(const std::string& dir, const Json& meta, const std::string& meta_name, const std::string& cls,
                       int depth) {
    auto sd = meta.find("stack_dim");
    if (sd == meta.end() || !sd->is_number_integer()) {
      Fail(ErrorCode::kCorrupt, meta_name + ": lazy stack without an integer 'stack_dim'");
    }
    Value* level = arena_.Dict(cls);
    level->state = Fields(meta, /*skip_type=*/false);
    ReadStackChildren(dir, level, depth);
    return level;
  }

  // Children 0/, 1/, ... until the first missing one, as load_memmap does.
  void ReadStackChildren(const std::string& dir, Value* into, int depth) {
    uint64_t i = 0;
    for (; src_.HasDir(dir, std::to_string(i)); ++i) {
      if (i >= kMaxEntriesPerLevel) {
        Fail(ErrorCode::kLimit, src_.Describe(dir, "") + ": more than kMaxEntriesPerLevel (" +
                                    std::to_string(kMaxEntriesPerLevel) + ") stacked members");
      }
      std::string name = std::to_string(i);
      into->entries.emplace_back(arena_.Str(name), ReadLevel(JoinRel(dir, name), depth + 1));
    }
    if (src_.HasDir(dir, std::to_string(i + 1))) {
      doc_.warnings.push_back(src_.Describe(dir, std::to_string(i)) + ": missing; the stacked members after it are "
                              "ignored (tensordict stops at the first gap)");
    }
  }

  Value* ReadNonTensorData(const std::string& dir, const Json& meta, const std::string& cls) {
    Value* obj = arena_.Object(cls, nullptr);
    obj->state = Fields(meta, /*skip_type=*/true);
    ReadSidecars(dir, obj->state);
    return obj;
  }

  Value* ReadNonTensorStack(const std::string& dir, const Json& meta, const std::string& meta_name,
                            const std::string& cls, int depth) {
    Value* obj = arena_.Object(cls, nullptr);
    obj->state = Fields(meta, /*skip_type=*/true);
    auto data = meta.find("data");
    if (data != meta.end() && data->is_string()) {
      if (data->get_ref<const std::string&>() != kPickleSidecar) {
        Fail(ErrorCode::kRefused, meta_name + ": data names file '" + data->get<std::string>() +
                                      "'; only \"pickle.pkl\" is allowed");
      }
      auto pk = src_.ReadSmallFile(dir, kPickleSidecar, kMaxSidecarBytes);
      if (!pk) Fail(ErrorCode::kNotFound, src_.Describe(dir, kPickleSidecar) + ": missing (meta.json says data is there)");
      SetField(arena_, obj->state, "data", Pickled(dir, kPickleSidecar, *pk));
    } else if (data == meta.end() || data->is_null()) {
      ReadStackChildren(dir, obj->state, depth);
    }
    return obj;
  }

  Value* ReadWithSource(const std::string& dir, const Json& meta, const std::string& meta_name,
                        const std::string& cls, std::initializer_list<const char*> required, int depth) {
    for (const char* field : required) {
      if (!meta.contains(field)) Fail(ErrorCode::kCorrupt, meta_name + ": '" + std::string(field) + "' is missing");
    }
    if (!src_.HasDir(dir, "_source")) {
      Fail(ErrorCode::kNotFound, src_.Describe(dir, "_source") + ": missing (the source of this lazy tensordict)");
    }
    Value* obj = arena_.Object(cls, nullptr);
    obj->state = Fields(meta, /*skip_type=*/true);
    obj->state->entries.emplace_back(arena_.Str("_source"), ReadLevel(JoinRel(dir, "_source"), depth + 1));
    return obj;
  }

  Value* ReadTensorclass(const std::string& dir, const Json& meta, const std::string& cls, int depth) {
    Value* td = ReadLevel(JoinRel(dir, "_tensordict"), depth + 1);
    if (td->kind != ValueKind::kDict) {
      Fail(ErrorCode::kCorrupt, src_.Describe(dir, "_tensordict") + ": is not a TensorDict");
    }
    Value* obj = arena_.Object(cls, nullptr);
    obj->state = td;  // the _tensordict level is transparent: its keys are the fields
    for (auto it = meta.begin(); it != meta.end(); ++it) {
      if (it.key() == "_type") continue;
      if (td->Find(it.key()) != nullptr) {
        Fail(ErrorCode::kCorrupt, src_.Describe(dir, "meta.json") + ": field '" + it.key() +
                                      "' is also a key of _tensordict/");
      }
      td->entries.emplace_back(arena_.Str(it.key()), JsonToValue(*it, arena_));
    }
    ReadSidecars(dir, td);
    return obj;
  }

  // Every entry of meta.json as a field (optionally without _type), values verbatim.
  Value* Fields(const Json& meta, bool skip_type) {
    Value* state = arena_.Dict("dict");
    for (auto it = meta.begin(); it != meta.end(); ++it) {
      if (skip_type && it.key() == "_type") continue;
      state->entries.emplace_back(arena_.Str(it.key()), JsonToValue(*it, arena_));
    }
    return state;
  }

  // other.pickle (fields JSON could not hold) and json_types.json (its plain-type names).
  void ReadSidecars(const std::string& dir, Value* fields) {
    auto pk = src_.ReadSmallFile(dir, kOtherPickleSidecar, kMaxSidecarBytes);
    if (!pk) return;
    const std::string types_name = src_.Describe(dir, "json_types.json");
    if (auto jt = src_.ReadSmallFile(dir, "json_types.json", kMaxMetaJsonBytes)) {
      if (ApplyJsonTypes(ParseMetaJson(jt->view(), types_name), Sha256Hex(*pk), fields)) return;
      doc_.warnings.push_back(types_name + ": ignored (its SHA-256 does not match other.pickle, or its layout is unknown)");
    }
    Value* decoded = Pickled(dir, kOtherPickleSidecar, *pk);
    if (decoded->kind == ValueKind::kObject && decoded->type_name == kPickledNotRead) {
      SetField(arena_, fields, kOtherPickleSidecar, decoded);
      return;
    }
    if (decoded->kind != ValueKind::kDict) {
      Fail(ErrorCode::kCorrupt, src_.Describe(dir, kOtherPickleSidecar) + ": does not hold a dict of fields");
    }
    for (const auto& [k, v] : decoded->entries) {
      if (k->kind != ValueKind::kStr) Fail(ErrorCode::kCorrupt, src_.Describe(dir, kOtherPickleSidecar) + ": non-str field name");
      SetField(arena_, fields, k->text, v);
    }
  }

  // json_types.json: {"sha256": "<hex of other.pickle>", "types": {"field": "tuple", ...}} (also
  // accepted: the hash under kOtherPickleSidecar and the fields at top level). True when applied.
  bool ApplyJsonTypes(const Json& jt, const std::string& sha, Value* fields) {
    if (!jt.is_object()) return false;
    const Json* hash = nullptr;
    for (const char* k : {"sha256", kOtherPickleSidecar})
      if (jt.contains(k) && jt[k].is_string()) hash = &jt[k];
    if (hash == nullptr || hash->get<std::string>() != sha) return false;
    const Json& types = jt.contains("types") && jt["types"].is_object() ? jt["types"] : jt;
    std::vector<std::pair<std::string, std::string>> found;
    for (auto it = types.begin(); it != types.end(); ++it) {
      if (it.key() == "sha256" || it.key() == kOtherPickleSidecar) continue;
      if (!it->is_string()) return false;
      const std::string& t = it->get_ref<const std::string&>();
      std::string global = t == "dict" ? "builtins.dict" : t == "list" ? "builtins.list" : t == "tuple" ? "builtins.tuple"
                           : t == "OrderedDict" ? "collections.OrderedDict" : "";
      if (global.empty()) return false;  // only the four plain classes may be named without pickle
      found.emplace_back(it.key(), global);
    }
    for (auto& [field, global] : found) SetField(arena_, fields, field, arena_.Global(global));
    return true;
  }

  // A pickled sidecar: decoded as data when allowed, else a "pickled, not read" node.
  Value* Pickled(const std::string& dir, const std::string& name, const SharedBytes& bytes) {
    const std::string where = src_.Describe(dir, name);
    if (!options_.allow_pickle) {
      doc_.warnings.push_back(where + ": pickled, not read (allow_pickle is off)");
      Value* marker = arena_.Object(kPickledNotRead, nullptr);
      marker->state = arena_.Dict("dict");
      marker->state->entries.emplace_back(arena_.Str("file"), arena_.Str(JoinRel(dir, name)));
      marker->state->entries.emplace_back(arena_.Str("bytes"), arena_.Int(static_cast<int64_t>(bytes.size())));
      return marker;
    }
    return WithContext(where, [&] {
      DataResolver resolver(options_.pickle_policy);
      Unpickler unpickler(bytes.data(), bytes.size(), arena_, resolver);
      return unpickler.Load();
    });
  }

  std::string FindDir(const std::string& dir, const std::string& key) {
    const std::string enc = EncodeKeyComponent(key);
    if (src_.HasDir(dir, enc)) return enc;
    if (enc != key && IsSafeLegacyKey(key, /*collection=*/true) && src_.HasDir(dir, key)) return key;
    Fail(ErrorCode::kNotFound, src_.Describe(dir, enc) + ": directory of collection '" + key +
                                   "' is missing (tensordict would drop the key silently)");
  }

  std::optional<LeafBytes> OpenLeafFile(const std::string& dir, const std::string& key, const std::string& suffix,
                                        uint64_t needed, uint64_t element_size) {
    const std::string enc = EncodeKeyComponent(key) + suffix;
    if (auto leaf = src_.OpenLeaf(dir, enc, needed, element_size)) return leaf;
    if (enc != key + suffix && IsSafeLegacyKey(key, /*collection=*/false))
      return src_.OpenLeaf(dir, key + suffix, needed, element_size);
    return std::nullopt;
  }

  static std::vector<int64_t> ParseShape(const Json& shape, const std::string& what) {
    if (!shape.is_array()) Fail(ErrorCode::kCorrupt, what + " is not a list");
    if (shape.size() > kMaxTensorRank) {
      Fail(ErrorCode::kLimit, what + " has " + std::to_string(shape.size()) + " dims, more than kMaxTensorRank (" +
                                  std::to_string(kMaxTensorRank) + ")");
    }
    std::vector<int64_t> dims;
    for (const auto& d : shape) {
      if ((d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX)) || d.is_binary())
        Fail(ErrorCode::kCorrupt, what + " has a size beyond 64 bits");
      if (!d.is_number_integer()) Fail(ErrorCode::kCorrupt, what + " holds " + d.dump() + ", not an integer");
      int64_t v = d.get<int64_t>();
      if (v < 0) Fail(ErrorCode::kCorrupt, what + " has the negative size " + std::to_string(v));
      dims.push_back(v);
    }
    return dims;
  }

  static DType LeafDType(const Json& entry, const std::string& where) {
    const Json& d = entry["dtype"];
    if (!d.is_string()) Fail(ErrorCode::kCorrupt, where + ": dtype is not a string");
    const std::string& s = d.get_ref<const std::string&>();
    auto dtype = DTypeFromTorchString(s);
    if (!dtype) Fail(ErrorCode::kCorrupt, where + ": unknown dtype string '" + s + "'");
    const DTypeInfo& info = Info(*dtype);
    if (info.kind == DTypeKind::kQuantized) {
      Fail(ErrorCode::kUnsupported, where + ": quantized dtype '" + s + "' (its scale and zero point are not stored)");
    }
    // tensordict's table (_STR_DTYPE_TO_DTYPE) has no float8/float4/bits types: it cannot load
    // them back, so trove does not pretend either.
    if (info.kind == DTypeKind::kBits || (*dtype >= DType::kFloat8E4M3FN && *dtype <= DType::kFloat4E2M1FNx2)) {
      Fail(ErrorCode::kUnsupported, where + ": dtype '" + s + "' is not in tensordict's dtype table");
    }
    return *dtype;
  }

  void CountLeaf(const std::string& dir) {
    if (++stats.leaves > kMaxLeaves) {
      Fail(ErrorCode::kLimit, src_.Describe(dir, "") + ": more than kMaxLeaves (" + std::to_string(kMaxLeaves) +
                                  ") leaves");
    }
  }

  Value* ReadLeaf(const std::string& dir, const std::string& key, const Json& entry, const std::string& meta_name) {
    const std::string where = meta_name + ": leaf '" + key + "'";
    const DType dtype = LeafDType(entry, where);
    const int64_t esize = static_cast<int64_t>(ElementSize(dtype));
    std::vector<int64_t> shape = ParseShape(entry["shape"], where + ": shape");
    int64_t numel = 1;
    for (int64_t d : shape) numel = CheckedMul(numel, d, where + ": element count");
    const int64_t nbytes = CheckedMul(numel, esize, where + ": byte size");
    bool nested = false;
    if (auto n = entry.find("is_nested"); n != entry.end()) {
      if (!n->is_boolean()) Fail(ErrorCode::kCorrupt, where + ": is_nested is not a bool");
      nested = n->get<bool>();
    }
    CountLeaf(dir);
    if (nested) return ReadNestedLeaf(dir, key, dtype, shape, where);
    TensorView view;
    view.dtype = dtype;
    view.shape = shape;
    view.strides = WithContext(where, [&] { return ContiguousStrides(shape); });
    auto leaf = OpenLeafFile(dir, key, kMemmapSuffix, static_cast<uint64_t>(nbytes), static_cast<uint64_t>(esize));
    if (!leaf) {
      if (numel != 0) {
        Fail(ErrorCode::kNotFound, src_.Describe(dir, EncodeKeyComponent(key) + kMemmapSuffix) + ": missing, but leaf '" +
                                       key + "' has " + std::to_string(numel) +
                                       " elements (tensordict would drop the key silently)");
      }
      // A leaf without elements has no file: rebuilt from its entry (tensordict >= 0.14).
    } else {
      view.storage = leaf->bytes;
      view.storage_key = leaf->location;
      if (!leaf->zero_copy) ++stats.copied_leaves;
    }
    view.storage_index = next_storage_++;
    WithContext(where, [&] { view.Validate(); });
    return arena_.Tensor(std::move(view));
  }

  // Nested (strided-layout) tensor: data file plus an int64 [n, ndim] sizes file. Each component
  // is its own view into the shared data file, reachable as <key>/<i>.
  Value* ReadNestedLeaf(const std::string& dir, const std::string& key, DType dtype, const std::vector<int64_t>& shape,
                        const std::string& where) {
    if (shape.size() != 2) Fail(ErrorCode::kCorrupt, where + ": a nested leaf's shape must be [n, ndim]");
    const int64_t n = shape[0], ndim = shape[1];
    if (ndim > static_cast<int64_t>(kMaxTensorRank)) {
      Fail(ErrorCode::kLimit, where + ": components of rank " + std::to_string(ndim) + " exceed kMaxTensorRank");
    }
    // The narrower cap first, so that its name is the one reported.
    if (static_cast<uint64_t>(n) > kMaxNestedComponents - stats.nested_components) {
      Fail(ErrorCode::kLimit, where + ": " + std::to_string(n) + " components (with " +
                                  std::to_string(stats.nested_components) + " before) exceed kMaxNestedComponents (" +
                                  std::to_string(kMaxNestedComponents) + ")");
    }
    if (static_cast<uint64_t>(n) > kMaxLeaves - std::min(stats.leaves, kMaxLeaves)) {
      Fail(ErrorCode::kLimit, where + ": " + std::to_string(n) + " components exceed kMaxLeaves (" +
                                  std::to_string(kMaxLeaves) + ")");
    }
    stats.nested_components += static_cast<uint64_t>(n);
    const int64_t sizes_bytes = CheckedMul(CheckedMul(n, ndim, where), 8, where);
    auto sizes = OpenLeafFile(dir, key, kShapeMemmapSuffix, static_cast<uint64_t>(sizes_bytes), 8);
    if (!sizes) {
      Fail(ErrorCode::kNotFound, src_.Describe(dir, EncodeKeyComponent(key) + kShapeMemmapSuffix) +
                                     ": missing (the sizes of nested leaf '" + key + "')");
    }
    const int64_t esize = static_cast<int64_t>(ElementSize(dtype));
    std::vector<std::vector<int64_t>> comps(static_cast<size_t>(n));
    int64_t total = 0;
    const uint8_t* p = sizes->bytes.data();
    for (int64_t i = 0; i < n; ++i) {
      int64_t count = 1;
      for (int64_t j = 0; j < ndim; ++j) {
        int64_t d = static_cast<int64_t>(LoadLe64(p + (i * ndim + j) * 8));
        if (d < 0) Fail(ErrorCode::kCorrupt, where + ": component " + std::to_string(i) + " has a negative size");
        comps[static_cast<size_t>(i)].push_back(d);
        count = CheckedMul(count, d, where + ": component size");
      }
      if (__builtin_add_overflow(total, count, &total)) Fail(ErrorCode::kCorrupt, where + ": total size overflows");
    }
    const int64_t data_bytes = CheckedMul(total, esize, where + ": data size");
    auto data = OpenLeafFile(dir, key, kMemmapSuffix, static_cast<uint64_t>(data_bytes), static_cast<uint64_t>(esize));
    if (!data) {
      Fail(ErrorCode::kNotFound, src_.Describe(dir, EncodeKeyComponent(key) + kMemmapSuffix) + ": missing (nested leaf '" +
                                     key + "')");
    }
    if (!data->zero_copy) ++stats.copied_leaves;
    Value* obj = arena_.Object(kNestedTensorClass, nullptr);
    obj->state = arena_.List();
    int64_t offset = 0;
    for (auto& comp : comps) {
      CountLeaf(dir);
      TensorView view;
      view.dtype = dtype;
      view.strides = WithContext(where, [&] { return ContiguousStrides(comp); });
      view.shape = std::move(comp);
      view.storage = data->bytes;
      view.storage_key = data->location;
      view.storage_offset = offset;
      view.storage_index = next_storage_;
      WithContext(where, [&] { view.Validate(); });
      offset += view.numel();
      obj->state->items.push_back(arena_.Tensor(std::move(view)));
    }
    ++next_storage_;
    return obj;
  }

  TreeSource& src_;
  Document& doc_;
  ValueArena& arena_;
  const ReadOptions& options_;
  int64_t next_storage_ = 0;
};

}  // namespace

TreeStats ReadTree(TreeSource& source, Document& doc, const ReadOptions& options) {
  LevelReader reader(source, doc, options);
  doc.root = reader.ReadLevel("", 0);
  return reader.stats;
}

}  // namespace trove::tensordict
