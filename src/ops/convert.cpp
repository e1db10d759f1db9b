#include "trove/convert.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "core/count_text.h"
#include "core/ggml_blocks.h"
#include "formats/format_registry.h"
#include "formats/pt/pt_reader.h"
#include "formats/safetensors/sharded_reader.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/safetensors.h"

namespace trove {
namespace {

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsCastable(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 || d == DType::kBFloat16;
}

// The files beside a model's weights that say how to load them (transformers' from_pretrained
// reads them from the same directory): carried into a directory of shards. The tokenizer, README
// and the rest describe more than the weights and are left to the user.
constexpr const char* kModelSideFiles[] = {"config.json", "generation_config.json"};

std::vector<std::string> ModelSideFiles(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::is_directory(model_path, ec) ? fs::path(model_path) : fs::path(model_path).parent_path();
  if (dir.empty()) dir = ".";
  std::vector<std::string> found;
  for (const char* name : kModelSideFiles) {
    if (fs::is_regular_file(dir / name, ec)) found.push_back((dir / name).string());
  }
  return found;
}

}  // namespace

Format TargetFormat(const std::string& destination, const std::string& to) {
  std::string writable;
  for (const FormatDriver* driver : FormatDrivers()) {
    if (driver->write != nullptr) writable += (writable.empty() ? "" : ", ") + std::string(driver->format.name());
  }
  if (!to.empty()) {
    const FormatDriver* driver = FindFormatDriver(std::string_view(to));
    if (driver != nullptr && driver->write != nullptr) return driver->format;
    Fail(ErrorCode::kUsage, "--to must be one of " + writable + " (not '" + to + "')");
  }
  std::string d = destination;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  for (const FormatDriver* driver : FormatDrivers()) {
    if (driver->write == nullptr) continue;
    for (std::string_view ext : driver->extensions) {
      if (EndsWith(d, ext)) return driver->format;
    }
  }
  // A directory, or a name without extension: a tensordict memmap tree.
  std::error_code ec;
  if (std::filesystem::is_directory(d, ec) || std::filesystem::path(d).extension().empty()) return Format::kTensordictDir;
  std::string names;
  for (const FormatDriver* driver : FormatDrivers()) {
    if (driver->write == nullptr) continue;
    for (std::string_view ext : driver->extensions) names += (names.empty() ? "" : ", ") + std::string(ext);
  }
  Fail(ErrorCode::kUsage, "cannot tell the output format from '" + destination + "': name it " + names +
                              " (or a directory), or pass --to (" + writable + ")");
}

bool KeyMatches(const std::string& pattern, const std::string& key) {
  // Dynamic programming over (pattern position, key position): linear in their product.
  const size_t n = pattern.size(), m = key.size();
  std::vector<char> row(m + 1, 0), next(m + 1, 0);
  row[0] = 1;
  for (size_t i = 0; i < n;) {
    const bool star2 = pattern[i] == '*' && i + 1 < n && pattern[i + 1] == '*';
    const size_t width = star2 ? 2 : 1;
    std::fill(next.begin(), next.end(), 0);
    for (size_t j = 0; j <= m; ++j) {
      if (pattern[i] == '*') {
        // Zero characters, or extend a match by one character (not '/' for a single star).
        if (row[j]) next[j] = 1;
        if (j > 0 && next[j - 1] && (star2 || key[j - 1] != '/')) next[j] = 1;
      } else if (j > 0 && row[j - 1] && (pattern[i] == '?' ? key[j - 1] != '/' : pattern[i] == key[j - 1])) {
        next[j] = 1;
      }
    }
    std::swap(row, next);
    i += width;
  }
  return row[m] != 0;
}

namespace {

bool MatchesAny(const std::vector<std::string>& globs, const std::string& key) {
  for (const auto& g : globs)
    if (KeyMatches(g, key)) return true;
  return false;
}

// Removes the dict entries whose values `dropped` says go (list and tuple items become None, so
// the other indices keep their keys; so do an object's items and arguments), then every dict
// this left empty, up to the root.
void DropValues(Document& doc, const std::function<bool(const Value*)>& dropped) {
  Value* none = doc.arena->None();
  std::unordered_map<const Value*, std::vector<Value*>> parents;  // container -> dicts holding it
  std::vector<Value*> emptied;
  doc.arena->ForEachValue([&](Value& v) {
    if (v.kind == ValueKind::kDict || v.kind == ValueKind::kObject) {
      const size_t before = v.entries.size();
      std::erase_if(v.entries, [&](const auto& e) { return dropped(e.second); });
      for (const auto& e : v.entries)
        if (e.second->kind == ValueKind::kDict) parents[e.second].push_back(&v);
      if (before > 0 && v.entries.empty() && v.kind == ValueKind::kDict) emptied.push_back(&v);
    }
    if (v.kind == ValueKind::kList || v.kind == ValueKind::kTuple || v.kind == ValueKind::kObject) {
      for (auto& item : v.items)
        if (dropped(item)) item = none;
    }
    if (v.kind == ValueKind::kObject && v.state != nullptr && dropped(v.state)) v.state = none;
  });
  // Upward, iteratively (the tree's depth is the file's choice): each dict emptied removes its
  // entry from the dicts holding it, which may empty them in turn.
  std::unordered_set<const Value*> gone(emptied.begin(), emptied.end());
  while (!emptied.empty()) {
    const Value* v = emptied.back();
    emptied.pop_back();
    auto it = parents.find(v);
    if (it == parents.end()) continue;
    for (Value* parent : it->second) {
      if (parent->entries.empty()) continue;
      std::erase_if(parent->entries, [&](const auto& e) { return e.second == v; });
      if (parent->entries.empty() && gone.insert(parent).second) emptied.push_back(parent);
    }
  }
  if (doc.root && dropped(doc.root)) doc.root = none;
}

// Tensors inside an optimizer's state dict (a dict with "state" and "param_groups" entries):
// moments and counters that a cast of the weights must leave as they are.
std::unordered_set<const Value*> OptimizerStateTensors(const Value* root) {
  std::unordered_set<const Value*> out, seen;
  std::vector<std::pair<const Value*, bool>> stack{{root, false}};
  while (!stack.empty()) {
    auto [v, inside] = stack.back();
    stack.pop_back();
    if (v == nullptr || !seen.insert(v).second) continue;
    if (v->kind == ValueKind::kTensor) {
      if (inside) out.insert(v);
      continue;
    }
    bool optimizer = inside;
    if (v->kind == ValueKind::kDict && !inside) {
      bool state = false, groups = false;
      for (const auto& [k, val] : v->entries) {
        if (k->kind != ValueKind::kStr) continue;
        state |= k->text == "state";
        groups |= k->text == "param_groups";
      }
      optimizer = state && groups;
    }
    for (const auto& e : v->entries) stack.push_back({e.second, optimizer});
    for (const Value* i : v->items) stack.push_back({i, optimizer});
    if (v->args) stack.push_back({v->args, optimizer});
    if (v->state) stack.push_back({v->state, optimizer});
  }
  return out;
}

// "'key' (class), ...": the first few of `objects`, for errors and notes.
std::string ObjectListing(const std::vector<UnknownObject>& objects) {
  std::vector<std::string> items;
  for (size_t i = 0; i < objects.size() && i < kNamesListed; ++i) {
    items.push_back("'" + (objects[i].key.empty() ? std::string("(root)") : objects[i].key) + "' (" +
                    objects[i].node->type_name + ")");
  }
  return FirstFew(items, kNamesListed, objects.size());
}

// --drop-unknown: every object of an unknown class goes, with what it holds.
void DropUnknownObjects(Document& doc, const ConvertOptions& options) {
  const std::vector<UnknownObject> objects = FindUnknownObjects(doc);
  if (objects.empty()) return;
  size_t tensors_inside = 0;
  for (const UnknownObject& o : objects) tensors_inside += CollectTensors(o.node).size();
  const size_t tensors_before = CollectTensors(doc.root).size();
  std::unordered_set<const Value*> gone;
  for (const UnknownObject& o : objects) gone.insert(o.node);
  DropValues(doc, [&](const Value* v) { return gone.count(v) > 0; });
  if (tensors_before > 0 && CollectTensors(doc.root).empty()) {
    Fail(ErrorCode::kUsage, "--drop-unknown would leave none of the " + std::to_string(tensors_before) +
                                " tensors: they are all inside objects of classes trove does not know (" +
                                ObjectListing(objects) + "); --keep-unknown writes them back to a .pt file");
  }
  if (options.note) {
    options.note("dropped " + std::to_string(objects.size()) + " object(s) of classes trove does not know" +
                 (tensors_inside ? " (with " + std::to_string(tensors_inside) + " tensor(s) inside)" : std::string()) +
                 ": " + ObjectListing(objects));
  }
}

// What a source says beside its tensors that the target has no place for (a safetensors header's
// __metadata__ in anything but safetensors, a GGUF's key/values in anything but GGUF) is said in
// a note, not left behind unsaid.
void NoteMetadataLeftBehind(const Document& doc, Format target, const ConvertOptions& options) {
  if (!options.note) return;
  const std::string into = std::string(FormatName(target));
  if (doc.format == FormatName(Format::kSafetensors) && target != Format::kSafetensors) {
    constexpr std::string_view kPrefix = "metadata.";  // as the safetensors reader names them
    std::vector<std::string> keys;
    for (const auto& [name, value] : doc.properties)
      if (name.starts_with(kPrefix)) keys.push_back(name.substr(kPrefix.size()));
    if (!keys.empty()) {
      options.note("the source's __metadata__ (" + FirstFew(keys) + ") is not carried: " + into + " has no place for it");
    }
  }
  if (doc.format == "gguf" && target.name() != "gguf") {
    for (const auto& [name, value] : doc.properties) {
      if (name == "metadata entries" && value.integer > 0) {
        options.note("the source's " + std::to_string(value.integer) + " GGUF metadata entries (architecture, "
                     "tokenizer, hyperparameters) are not carried: " + into + " has no place for them "
                     "(`trove info --json` lists them)");
      }
    }
  }
}

}  // namespace

// The path a rename rule gives `path`, or nullopt when the rule does not match.
std::optional<std::string> Renamed(const std::string& path, const std::pair<std::string, std::string>& rule) {
  const auto& [from, to] = rule;
  const size_t star = from.find('*');
  if (star == std::string::npos) {
    if (!path.starts_with(from)) return std::nullopt;
    return to + path.substr(from.size());
  }
  const std::string_view head(from.data(), star), tail(from.data() + star + 1, from.size() - star - 1);
  if (path.size() < head.size() + tail.size() || !path.starts_with(head) || !path.ends_with(tail)) return std::nullopt;
  const std::string middle = path.substr(head.size(), path.size() - head.size() - tail.size());
  const size_t to_star = to.find('*');
  return to_star == std::string::npos ? to : to.substr(0, to_star) + middle + to.substr(to_star + 1);
}

// The dict entry a key path names, reached through dicts with str keys from the root, with the
// dicts on the way (root first); nullopt when the path goes through anything else.
struct DictPlace {
  std::vector<Value*> dicts;
  size_t entry = 0;
};
std::optional<DictPlace> FindDictPlace(Value* root, const std::vector<std::string>& keys) {
  DictPlace place;
  Value* at = root;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (at == nullptr || at->kind != ValueKind::kDict) return std::nullopt;
    place.dicts.push_back(at);
    auto it = std::find_if(at->entries.begin(), at->entries.end(),
                           [&](const auto& e) { return e.first->kind == ValueKind::kStr && e.first->text == keys[i]; });
    if (it == at->entries.end()) return std::nullopt;
    place.entry = static_cast<size_t>(it - at->entries.begin());
    at = it->second;
  }
  return place;
}

std::vector<std::string> DecodedKeys(const std::string& path) {
  std::vector<std::string> keys;
  for (const std::string& c : SplitKeyPath(path)) keys.push_back(DecodeKeyComponent(c));
  return keys;
}

void RenameTensors(Document& doc, const ConvertOptions& options) {
  for (const auto& [from, to] : options.renames) {
    const auto stars = [](const std::string& t) { return std::count(t.begin(), t.end(), '*'); };
    if (from.empty() || stars(from) > 1 || stars(to) > 1 || (stars(to) == 1 && stars(from) == 0)) {
      Fail(ErrorCode::kUsage, "--rename '" + from + "=" + to + "': FROM is not empty, FROM and TO hold at most one '*' "
                              "each, and TO only when FROM has one");
    }
  }
  struct Move {
    std::string from, to;
    Value* tensor;
  };
  std::vector<Move> moves;
  std::map<std::string, std::string> final_paths;  // new path -> the old path it comes from
  std::set<std::string> kept_paths;
  ForEachLeaf(doc.root, [&](const std::string& path, const Value& leaf) {
    std::optional<std::string> to;
    if (leaf.kind == ValueKind::kTensor) {
      for (const auto& rule : options.renames) {
        if ((to = Renamed(path, rule))) break;
      }
    }
    if (!to || *to == path) {
      kept_paths.insert(path);
      return;
    }
    if (to->empty()) Fail(ErrorCode::kUsage, "--rename makes the key path of '" + path + "' empty");
    auto [it, fresh] = final_paths.emplace(*to, path);
    if (!fresh) Fail(ErrorCode::kUsage, "--rename gives '" + it->second + "' and '" + path + "' the same key path '" + *to + "'");
    moves.push_back({path, *to, const_cast<Value*>(&leaf)});
  });
  if (moves.empty()) return;
  for (const Move& m : moves) {
    if (kept_paths.count(m.to)) Fail(ErrorCode::kUsage, "--rename moves '" + m.from + "' onto '" + m.to + "', which the file already holds");
  }
  // Every tensor leaves its place first, so that renames may swap names.
  std::vector<std::vector<Value*>> emptied_chains;
  for (const Move& m : moves) {
    std::optional<DictPlace> place = FindDictPlace(doc.root, DecodedKeys(m.from));
    if (!place || place->dicts.back()->entries[place->entry].second != m.tensor) {
      Fail(ErrorCode::kUsage, "--rename: '" + m.from + "' is not reached through dicts with str keys alone; only such "
                              "tensors can be renamed");
    }
    Value* parent = place->dicts.back();
    parent->entries.erase(parent->entries.begin() + static_cast<std::ptrdiff_t>(place->entry));
    emptied_chains.push_back(std::move(place->dicts));
  }
  for (const Move& m : moves) {
    const std::vector<std::string> keys = DecodedKeys(m.to);
    if (doc.root == nullptr || doc.root->kind != ValueKind::kDict) Fail(ErrorCode::kUsage, "--rename: the file's root is not a dict");
    Value* at = doc.root;
    for (size_t i = 0; i + 1 < keys.size(); ++i) {
      auto it = std::find_if(at->entries.begin(), at->entries.end(),
                             [&](const auto& e) { return e.first->kind == ValueKind::kStr && e.first->text == keys[i]; });
      if (it == at->entries.end()) {
        at->entries.emplace_back(doc.arena->Str(keys[i]), doc.arena->Dict());
        at = at->entries.back().second;
      } else if (it->second->kind == ValueKind::kDict) {
        at = it->second;
      } else {
        Fail(ErrorCode::kUsage, "--rename moves '" + m.from + "' to '" + m.to + "', inside a value that is not a dict");
      }
    }
    if (std::any_of(at->entries.begin(), at->entries.end(),
                    [&](const auto& e) { return e.first->kind == ValueKind::kStr && e.first->text == keys.back(); })) {
      Fail(ErrorCode::kUsage, "--rename moves '" + m.from + "' onto '" + m.to + "', which the file already holds");
    }
    at->entries.emplace_back(doc.arena->Str(keys.back()), m.tensor);
  }
  // Dicts the moves left empty go, innermost first (the root stays).
  for (auto& chain : emptied_chains) {
    for (size_t i = chain.size(); i-- > 1;) {
      if (!chain[i]->entries.empty()) break;
      Value* up = chain[i - 1];
      std::erase_if(up->entries, [&](const auto& e) { return e.second == chain[i]; });
    }
  }
}

// Drops tied tensors but the first of each group (ConvertOptions::dedupe_tied); returns
// "dropped=kept" pairs in tree order.
// One tensor object under several keys (torch.save memoizes it: `{"a": w, "b": w}`) is one Value
// in several places. The options below drop values by identity (DropValues): dropping one place
// of such a value dropped them all (--dedupe-tied kept none of the copies), and keeping one kept
// them all (--exclude b kept b). Each place after the first gets its own copy of the value first
// (the copies share the tensor view, so ties through the storage stay).
void GiveEachPlaceItsOwnTensorValue(Document& doc) {
  std::unordered_set<const Value*> placed;
  std::vector<Value**> repeated;  // copied after the walk: New() must not run inside ForEachValue
  auto note_place = [&](Value*& slot) {
    if (slot != nullptr && slot->kind == ValueKind::kTensor && !placed.insert(slot).second) repeated.push_back(&slot);
  };
  doc.arena->ForEachValue([&](Value& v) {
    for (auto& e : v.entries) note_place(e.second);
    for (Value*& item : v.items) note_place(item);
  });
  for (Value** slot : repeated) {
    Value* copy = doc.arena->New(ValueKind::kTensor);
    *copy = **slot;
    *slot = copy;
  }
}

std::vector<std::pair<std::string, std::string>> DropTiedTensors(Document& doc) {
  using Identity = std::tuple<const void*, int64_t, int64_t, std::vector<int64_t>, std::vector<int64_t>, int>;
  std::map<Identity, std::string> first;
  std::unordered_set<const Value*> dropped;
  std::vector<std::pair<std::string, std::string>> pairs;
  ForEachLeaf(doc.root, [&](const std::string& path, const Value& leaf) {
    if (leaf.kind != ValueKind::kTensor) return;
    const TensorView& t = *leaf.tensor;
    if (!t.has_data || t.storage_index < 0 || t.cast_source) return;
    Identity id{t.storage.owner().get(), t.storage_index, t.storage_offset, t.shape, t.strides, static_cast<int>(t.dtype)};
    auto [it, fresh] = first.emplace(std::move(id), path);
    if (fresh) return;
    if (dropped.insert(&leaf).second) pairs.emplace_back(path, it->second);
  });
  if (!dropped.empty()) DropValues(doc, [&](const Value* v) { return dropped.count(v) > 0; });
  return pairs;
}

std::string NothingSelectedText(const std::vector<std::string>& keys, const std::vector<std::string>& exclude,
                                uint64_t tensors) {
  std::string what;
  for (const auto& k : keys) what += (what.empty() ? "" : " ") + std::string("--keys '") + k + "'";
  for (const auto& k : exclude) what += (what.empty() ? "" : " ") + std::string("--exclude '") + k + "'";
  return what + " select none of the " + Thousands(tensors) + " tensors (trove info lists their keys)";
}

size_t ApplyConvertOptions(Document& doc, const ConvertOptions& options) {
  TorchScriptModulesAsDicts(doc, options.note);
  if (!doc.opt_in_prefixes.empty() || !options.keys.empty() || !options.exclude.empty() || options.dedupe_tied) {
    GiveEachPlaceItsOwnTensorValue(doc);
  }
  if (options.drop_unknown) DropUnknownObjects(doc, options);
  if (!doc.opt_in_prefixes.empty()) {
    // What the document holds beside what it stands for is written only when --keys names it: an
    // opt-in subtree --keys names nothing of is left out whole, values included (a verl
    // directory's scheduler and RNG states), else the tensors in it --keys does not name.
    std::unordered_set<const Value*> left_out;
    std::vector<bool> named(doc.opt_in_prefixes.size(), false);
    ForEachLeaf(doc.root, [&](const std::string& path, const Value& leaf) {
      if (!doc.IsOptIn(path)) return;
      const bool asked = !options.keys.empty() && MatchesAny(options.keys, path);
      if (leaf.kind == ValueKind::kTensor && !asked) left_out.insert(&leaf);
      for (size_t i = 0; i < named.size(); ++i) named[i] = named[i] || (asked && path.starts_with(doc.opt_in_prefixes[i]));
    });
    for (size_t i = 0; i < named.size(); ++i) {
      const std::string& prefix = doc.opt_in_prefixes[i];
      if (named[i] || prefix.empty() || prefix.back() != '/') continue;
      if (const Value* subtree = doc.FindValue(prefix.substr(0, prefix.size() - 1))) left_out.insert(subtree);
    }
    if (!left_out.empty()) DropValues(doc, [&](const Value* v) { return left_out.count(v) > 0; });
  }
  if (!options.keys.empty() || !options.exclude.empty()) {
    std::unordered_set<const Value*> keep;
    size_t tensors = 0;
    ForEachLeaf(doc.root, [&](const std::string& path, const Value& leaf) {
      if (leaf.kind != ValueKind::kTensor) return;
      ++tensors;
      if ((options.keys.empty() || MatchesAny(options.keys, path)) && !MatchesAny(options.exclude, path)) keep.insert(&leaf);
    });
    if (tensors > 0 && keep.empty()) Fail(ErrorCode::kUsage, NothingSelectedText(options.keys, options.exclude, tensors));
    DropValues(doc, [&](const Value* v) { return v->kind == ValueKind::kTensor && !keep.count(v); });
  }
  if (!options.renames.empty()) RenameTensors(doc, options);
  // After the renames: the list names the tensors as they are written.
  if (options.dedupe_tied) {
    const auto pairs = DropTiedTensors(doc);
    if (!pairs.empty()) {
      std::vector<std::string> listing;
      std::string metadata;
      for (size_t i = 0; i < pairs.size(); ++i) {
        if (i < kNamesListed) listing.push_back("'" + pairs[i].first + "' (= '" + pairs[i].second + "')");
        metadata += std::string(i ? "," : "") + pairs[i].first + "=" + pairs[i].second;
      }
      if (options.note) options.note("dropped " + std::to_string(pairs.size()) + " tied tensor(s), each the same bytes as one kept: " + FirstFew(listing, kNamesListed, pairs.size()));
      doc.properties.emplace_back(std::string(kDroppedTiedProperty), PropertyValue{metadata});
    }
  }
  if (options.dequantize) {
    doc.arena->ForEachValue([&](Value& v) {
      if (v.kind == ValueKind::kTensor && Dequantizable(*v.tensor)) {
        v.tensor = doc.arena->AddTensorView(CastView(*v.tensor, DType::kFloat32));
      }
    });
  }
  size_t cast = 0;
  if (options.floating_dtype) {
    const DType to = *options.floating_dtype;
    if (!IsCastable(to)) Fail(ErrorCode::kUsage, "--dtype must be a floating dtype: float16, bfloat16, float32 or float64");
    std::unordered_set<const Value*> optimizer;
    if (options.cast_keys.empty()) optimizer = OptimizerStateTensors(doc.root);
    std::unordered_set<const Value*> selected;
    ForEachLeaf(doc.root, [&](const std::string& path, const Value& leaf) {
      // ggml's blocks have no values but those the cast gives (torch's quantized tensors convert
      // with --dequantize, keeping .pt's quantizer otherwise).
      if (leaf.kind != ValueKind::kTensor) return;
      if (!IsCastable(leaf.tensor->dtype) && !(IsBlockDType(leaf.tensor->dtype) && Dequantizable(*leaf.tensor))) return;
      bool take;
      if (!options.cast_keys.empty()) {
        take = MatchesAny(options.cast_keys, path);
      } else {
        const size_t slash = path.rfind('/');
        take = !optimizer.count(&leaf) && path.substr(slash == std::string::npos ? 0 : slash + 1) != "step";
      }
      if (take) selected.insert(&leaf);
    });
    doc.arena->ForEachValue([&](Value& v) {
      if (selected.count(&v) && v.tensor->dtype != to) {
        v.tensor = doc.arena->AddTensorView(CastView(*v.tensor, to));
        ++cast;
      }
    });
  }
  doc.tensors = CollectTensors(doc.root);
  return cast;
}

void Convert(const std::string& source, const std::string& destination, Format target, const ConvertOptions& options) {
  Document doc = Open(source, options.read);
  ApplyConvertOptions(doc, options);
  ConvertDocument(doc, destination, target, options);
}

void ConvertDocument(const Document& doc, const std::string& destination, Format target,
                     const ConvertOptions& requested) {
  // A single .pt holds every object it was read with: there, objects of classes trove does not
  // know are written back as they were read without being asked (--drop-unknown still leaves
  // them out). Every other target holds data alone.
  ConvertOptions options = requested;
  if (target == Format::kPt && !options.max_shard_bytes && !options.drop_unknown) options.keep_unknown = true;
  // The writers refuse any directory containing the source as a tree destination; the source
  // itself may be converted in place.
  SourceGuard source(doc.path, InPlace::kAllowed);
  WithFile(destination, [&] {
    // Objects trove does not know are never dropped unasked (nothing lost).
    const std::vector<UnknownObject> unknown = FindUnknownObjects(doc);
    if (requested.keep_unknown && (target != Format::kPt || options.max_shard_bytes)) {
      Fail(ErrorCode::kUsage, "--keep-unknown writes objects back only to a single .pt file (the other formats and shards hold data alone)");
    }
    if (!unknown.empty() && !options.keep_unknown) {
      Fail(ErrorCode::kUnsupported, std::to_string(unknown.size()) + " object(s) of classes trove does not know would be "
                                    "lost: " + ObjectListing(unknown) + " (--keep-unknown writes them back as they were "
                                    "read, to .pt only; --drop-unknown leaves them out); nothing was written");
    }
    // ggml's block-quantized tensors (GGUF): their blocks mean something only in GGUF; elsewhere
    // only their values (--dtype) are written. Every one is listed.
    if (const FormatDriver* driver = FindFormatDriver(target); driver == nullptr || !driver->keeps_ggml_blocks) {
      std::vector<std::string> blocks;
      bool all_dequantizable = true;
      for (const auto& t : doc.tensors) {
        if (!IsBlockDType(t.view->dtype)) continue;
        blocks.push_back("'" + t.key + "' (" + std::string(Name(t.view->dtype)) + ")");
        all_dequantizable = all_dequantizable && Dequantizable(*t.view);
      }
      if (!blocks.empty()) {
        Fail(ErrorCode::kUnsupported, std::to_string(blocks.size()) + " block-quantized GGUF tensor(s): " + FirstFew(blocks) +
                                          ": their blocks mean something only in GGUF; --dtype float32 (or float16, "
                                          "bfloat16) writes their values, dequantized as ggml does" +
                                          (all_dequantizable ? "" : " (trove dequantizes " + DequantizedBlockTypes() + ")") +
                                          ", --exclude leaves them out; nothing was written");
      }
    }
    // Only .pt holds a quantizer: elsewhere a quantized tensor's integers would lose their meaning.
    if (target != Format::kPt) {
      for (const auto& t : doc.tensors) {
        if (Info(t.view->dtype).kind != DTypeKind::kQuantized || IsBlockDType(t.view->dtype)) continue;
        Fail(ErrorCode::kUnsupported, "'" + t.key + "' is a quantized tensor (" + std::string(Name(t.view->dtype)) +
                                          (t.view->quantizer ? ", " + QuantizerText(*t.view->quantizer) : std::string()) +
                                          "): " + std::string(FormatName(target)) + " cannot hold its quantizer; "
                                          "--dequantize writes its values as float32 (.pt keeps it quantized); nothing was written");
      }
    }
    NoteMetadataLeftBehind(doc, target, options);
    // A dict's attributes (a dict subclass's __dict__, `%attr:<name>` in key paths) are Python
    // state beside its entries: only .pt holds them, elsewhere their tensors would be lost or
    // become entries they never were.
    if (target != Format::kPt || options.max_shard_bytes) {
      for (const auto& t : doc.tensors) {
        if (t.key.find("%attr:") == std::string::npos) continue;
        Fail(ErrorCode::kUnsupported, "'" + t.key + "' is a tensor in the attributes of a dict (its class's __dict__): " +
                                          std::string(FormatName(target)) + " holds only a dict's entries (.pt keeps "
                                          "its attributes; --exclude '**%attr:**' leaves them out); nothing was written");
      }
    }
    // .pt keeps a view a view and a shared storage shared; the other formats have neither and
    // write each tensor whole. Compressed storages are written inflated by every writer.
    // The rule is about what the source holds: its errors name the source, not the output.
    if (!options.allow_expand)
      WithFile(doc.path, [&] { CheckExpansion(doc.tensors, target == Format::kPt && !options.max_shard_bytes); });
    const FormatDriver* driver = FindFormatDriver(target);
    if (options.max_shard_bytes && !(driver != nullptr && driver->writes_own_parts)) {
      ShardedWriteOptions sharded;
      static_cast<SafetensorsWriteOptions&>(sharded) = SafetensorsPartOf(doc, options);
      sharded.shard_format = target;
      sharded.max_shard_bytes = *options.max_shard_bytes;
      sharded.carried_files = ModelSideFiles(doc.path);
      WriteShardedCheckpoint(doc, destination, sharded);
      return;
    }
    if (driver == nullptr || driver->write == nullptr) {
      Fail(ErrorCode::kUnsupported, "writing " + std::string(FormatName(target)) + " is not available");
    }
    driver->write(doc, destination, options);
  });
}

}  // namespace trove
