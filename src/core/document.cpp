#include "trove/document.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/display_escape.h"
#include "core/float_text.h"
#include "trove/error.h"

namespace trove {

const NamedTensor* Document::FindTensor(std::string_view key) const {
  for (const auto& t : tensors)
    if (t.key == key) return &t;
  // A name that holds '/' (safetensors and .npz names often do: "model/layer.weight") is one
  // key component, its '/' %-encoded; asked for by its own name, it is found so too.
  if (key.find('/') != std::string_view::npos) {
    const std::string whole = EncodeKeyComponent(key);
    for (const auto& t : tensors)
      if (t.key == whole) return &t;
  }
  // Any name as info shows it (VerbatimNames: "a/b/c" for the key path "a/b%2Fc", a name with a
  // '%' or '.' spelled as itself). Names are unique, so the one that matches is the tensor.
  std::vector<std::string> keys;
  keys.reserve(tensors.size());
  for (const auto& t : tensors) keys.push_back(t.key);
  const std::vector<std::string> names = VerbatimNames(keys);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == key) return &tensors[i];
  return nullptr;
}

std::string_view PicklePolicyName(PicklePolicy policy) {
  switch (policy) {
    case PicklePolicy::kStrict: return "strict";
    case PicklePolicy::kDefault: return "default";
    case PicklePolicy::kPermissive: return "permissive";
  }
  return "?";
}

bool Document::IsOptIn(std::string_view key_path) const {
  for (const std::string& prefix : opt_in_prefixes) {
    if (key_path.starts_with(prefix)) return true;
  }
  return false;
}

const std::string* Document::Property(std::string_view name) const {
  for (const auto& [k, v] : properties)
    if (k == name) return &v.text;
  return nullptr;
}

PropertyValue PropertyValue::Integer(int64_t value) {
  PropertyValue p(std::to_string(value));
  p.type = Type::kInteger;
  p.integer = value;
  return p;
}

PropertyValue PropertyValue::Boolean(bool value) {
  PropertyValue p(value ? "true" : "false");
  p.type = Type::kBoolean;
  p.boolean = value;
  return p;
}

PropertyValue PropertyValue::IntegerOrText(std::string text) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool canonical = !text.empty() && ec == std::errc() && end == text.data() + text.size() &&
                         (text == "0" || (text[0] != '0' && text.rfind("-0", 0) != 0));
  return canonical ? Integer(value) : PropertyValue(std::move(text));
}

namespace {

bool NeedsEscape(unsigned char c) {
  if (c < 32 || c == 127) return true;
  switch (c) {
    case '/': case '\\': case '<': case '>': case ':': case '"': case '|': case '?': case '*': case ' ': case '%':
      return true;
    default:
      return false;
  }
}

// The length of the UTF-8 sequence of one code point starting at key[i] (strict: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 when the bytes there are not one.
size_t Utf8SequenceLength(std::string_view key, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(key[k]); };
  const unsigned char c = byte(i);
  size_t n = 0;
  uint32_t cp = 0, min = 0;
  if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; min = 0x80; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; min = 0x10000; }
  else return 0;
  if (key.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string EncodeKeyComponent(std::string_view key) {
  if (key.empty()) return "%";
  if (key == ".") return "%2E";
  if (key == "..") return "%2E%2E";
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (size_t i = 0; i < key.size();) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c >= 0x80) {
      // Non-ASCII text stays as it is; bytes that are not UTF-8 (a bytes key, a lone surrogate of
      // a pickled str) are escaped, so that a key path is always text.
      if (const size_t n = Utf8SequenceLength(key, i)) {
        out.append(key.substr(i, n));
        i += n;
        continue;
      }
    }
    if (c >= 0x80 || NeedsEscape(c)) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

namespace {

// The kind prefix of a typed component ("%int:" of "%int:1"), or 0 when it has none: '%', a
// letter and word characters (the kind, maybe "#<index>"), then ':'. A str key's component never
// starts so: its '%' is followed by two uppercase hex digits or ends it.
size_t TypedPrefixLength(std::string_view c) {
  if (c.size() < 3 || c[0] != '%' || !((c[1] >= 'a' && c[1] <= 'z') || (c[1] >= 'A' && c[1] <= 'Z'))) return 0;
  for (size_t i = 2; i < c.size(); ++i) {
    const char ch = c[i];
    if (ch == ':') return i + 1;
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '#')) return 0;
  }
  return 0;
}

}  // namespace

std::string FlatName(std::string_view key_path) {
  const std::vector<std::string> components = SplitKeyPath(key_path);
  std::string name;
  for (size_t i = 0; i < components.size(); ++i) name += (i ? "/" : "") + DecodeKeyComponent(components[i]);
  return name;
}

std::string DecodeKeyComponent(std::string_view encoded) {
  // `%entry:%int:1` (an object's entry that another part's component shadowed, keyed by int 1)
  // carries two prefixes: the key's text is what is left after all of them.
  while (const size_t prefix = TypedPrefixLength(encoded)) encoded.remove_prefix(prefix);
  if (encoded == "%") return "";
  std::string out;
  for (size_t i = 0; i < encoded.size(); ++i) {
    if (encoded[i] != '%') {
      out += encoded[i];
      continue;
    }
    if (i + 2 >= encoded.size()) {
      Fail(ErrorCode::kUsage, "malformed escape in key component '" + std::string(encoded) + "'");
    }
    int hi = HexValue(encoded[i + 1]), lo = HexValue(encoded[i + 2]);
    if (hi < 0 || lo < 0) Fail(ErrorCode::kUsage, "malformed escape in key component '" + std::string(encoded) + "'");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

namespace {

// A key path component as its str key spells it, or null when it is no plain str key's (a
// typed component, `%int:1`) or its text is not UTF-8 (a bytes key, a lone surrogate).
std::optional<std::string> VerbatimComponent(std::string_view component) {
  if (component.find('%') == std::string_view::npos) return std::string(component);
  if (TypedPrefixLength(component)) return std::nullopt;
  std::string text;
  try {
    text = DecodeKeyComponent(component);
  } catch (const Error&) {
    return std::nullopt;
  }
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) return std::nullopt;
    i += n;
  }
  return text;
}

}  // namespace

std::vector<std::string> VerbatimNames(const std::vector<std::string>& key_paths) {
  std::vector<std::string> names;
  names.reserve(key_paths.size());
  for (const std::string& key : key_paths) {
    std::string name;
    bool verbatim = true;
    for (size_t at = 0;;) {
      const size_t slash = key.find('/', at);
      const std::string_view component = std::string_view(key).substr(at, slash == std::string::npos ? std::string::npos : slash - at);
      auto text = VerbatimComponent(component);
      if (!text) {
        verbatim = false;
        break;
      }
      if (at) name += '/';
      name += *text;
      if (slash == std::string::npos) break;
      at = slash + 1;
    }
    names.push_back(verbatim ? std::move(name) : key);
  }
  // Names two key paths would share (a file holding both {"a/b": t} and {"a": {"b": u}}) keep
  // their key paths, which are unique; if even that collides with another's name, all do.
  std::unordered_map<std::string_view, size_t> counts;
  for (const auto& n : names) ++counts[n];
  std::vector<std::string> out(names.size());
  for (size_t i = 0; i < names.size(); ++i) out[i] = counts[names[i]] == 1 ? names[i] : key_paths[i];
  std::unordered_set<std::string_view> seen;
  for (const auto& n : out)
    if (!seen.insert(n).second) return key_paths;
  return out;
}

bool HasNonStrKeys(const Value& dict) {
  for (const auto& e : dict.entries)
    if (e.first->kind != ValueKind::kStr) return true;
  return false;
}

std::vector<std::string> DictKeyComponents(const Value& dict) {
  std::vector<std::string> out;
  out.reserve(dict.entries.size());
  for (const auto& e : dict.entries) {
    out.push_back(e.first->kind == ValueKind::kStr ? EncodeKeyComponent(e.first->text)
                                                   : EncodeKeyComponent(KeyComponentText(*e.first)));
  }
  if (!HasNonStrKeys(dict)) return out;  // str keys encode one-to-one
  std::unordered_map<std::string, size_t> uses;
  for (const std::string& c : out) ++uses[c];
  // Non-str keys that share their component with another key get their kind as a prefix.
  std::vector<size_t> typed;
  for (size_t i = 0; i < out.size(); ++i) {
    if (dict.entries[i].first->kind != ValueKind::kStr && uses[out[i]] > 1) typed.push_back(i);
  }
  if (typed.empty()) return out;
  std::unordered_map<std::string, size_t> typed_uses;
  std::vector<std::string> names(typed.size());
  for (size_t j = 0; j < typed.size(); ++j) {
    names[j] = "%" + std::string(KindName(dict.entries[typed[j]].first->kind)) + ":" + out[typed[j]];
    ++typed_uses[names[j]];
  }
  for (size_t j = 0; j < typed.size(); ++j) {
    const size_t i = typed[j];
    if (typed_uses[names[j]] > 1) {
      // Two keys of one kind that spell one text: the entry's index tells them apart.
      names[j] = "%" + std::string(KindName(dict.entries[i].first->kind)) + "#" + std::to_string(i) + ":" + out[i];
    }
    out[i] = std::move(names[j]);
  }
  return out;
}

namespace {

// The components of a dict's entries, in order: plain encoding unless some key is not a str.
std::vector<std::string> EntryComponents(const Value& dict) {
  if (HasNonStrKeys(dict)) return DictKeyComponents(dict);
  std::vector<std::string> out;
  out.reserve(dict.entries.size());
  for (const auto& e : dict.entries) out.push_back(EncodeKeyComponent(e.first->text));
  return out;
}

// A dict's attributes (an OrderedDict's or a dict subclass's BUILD state, its __dict__) are no
// entries of the dict: each is listed beside them as `%attr:<component>`, which no key spells.
constexpr std::string_view kAttrPrefix = "%attr:";

}  // namespace

bool HasAttributes(const Value& v) {
  return v.kind == ValueKind::kDict && v.state != nullptr && v.state->kind == ValueKind::kDict &&
         !v.state->entries.empty();
}

std::vector<std::string> AttributeComponents(const Value& dict) {
  std::vector<std::string> out = EntryComponents(*dict.state);
  for (std::string& c : out) c.insert(0, kAttrPrefix);
  return out;
}

std::vector<ObjectPart> ObjectParts(const Value& object) {
  std::vector<ObjectPart> out;
  std::unordered_set<std::string> used;
  if (const Value* state = object.state) {
    const Value* inner = StandsFor(*state) ? StandsFor(*state) : state;
    if (inner->kind == ValueKind::kDict) {
      for (std::string& c : EntryComponents(*inner)) used.insert(std::move(c));
      if (HasAttributes(*inner)) {
        for (std::string& c : AttributeComponents(*inner)) used.insert(std::move(c));
      }
      out.push_back({state, "", true});
    } else if (inner->kind == ValueKind::kList || (inner->kind == ValueKind::kTuple && inner->type_name != "torch.Size")) {
      for (size_t i = 0; i < inner->items.size(); ++i) used.insert(std::to_string(i));
      out.push_back({state, "", true});
    } else if (inner->kind == ValueKind::kObject) {
      used.insert("%state");
      out.push_back({state, "%state", false});
    } else {
      out.push_back({state, "", true});
    }
  }
  auto add = [&](const Value* node, std::string component, std::string_view part) {
    if (used.count(component)) component = "%" + std::string(part) + ":" + component;
    used.insert(component);
    out.push_back({node, std::move(component), false});
  };
  if (const Value* args = object.args) {
    if (args->kind == ValueKind::kTuple && args->type_name.empty()) {
      for (size_t i = 0; i < args->items.size(); ++i) add(args->items[i], std::to_string(i), "arg");
    } else {
      add(args, "%args", "arg");
    }
  }
  const std::vector<std::string> entries = EntryComponents(object);
  for (size_t i = 0; i < entries.size(); ++i) add(object.entries[i].second, entries[i], "entry");
  for (size_t i = 0; i < object.items.size(); ++i) add(object.items[i], std::to_string(i), "item");
  return out;
}

const Value* Document::FindValue(std::string_view key_path) const {
  if (root == nullptr) return nullptr;
  uint64_t visits = 0;
  auto visit = [&] {
    if (++visits > kMaxTreeVisits) {
      Fail(ErrorCode::kLimit, "key path lookup visited more than kMaxTreeVisits (" + std::to_string(kMaxTreeVisits) +
                                  ") nodes");
    }
  };
  auto is_index = [](const std::string& c) {
    return !c.empty() && c.size() <= 19 && c.find_first_not_of("0123456789") == std::string::npos &&
           (c == "0" || c[0] != '0');
  };
  auto in_entries = [&](const std::vector<std::string>& components, const std::string& component,
                        const Value* of) -> const Value* {
    for (size_t i = 0; i < components.size(); ++i) {
      visit();
      if (components[i] == component) return of->entries[i].second;
    }
    return nullptr;
  };
  // The child of a dict, list or tuple (what an object's transparent parts are) by component.
  auto container_child = [&](const Value* c, const std::string& component) -> const Value* {
    if (c->kind == ValueKind::kDict) {
      if (const Value* v = in_entries(EntryComponents(*c), component, c)) return v;
      if (component.starts_with(kAttrPrefix) && HasAttributes(*c)) {
        return in_entries(AttributeComponents(*c), component, c->state);
      }
      return nullptr;
    }
    if ((c->kind == ValueKind::kList || c->kind == ValueKind::kTuple) && is_index(component)) {
      const uint64_t i = std::stoull(component);
      if (i < c->items.size()) return c->items[i];
    }
    return nullptr;
  };
  const Value* at = root;
  for (const std::string& component : SplitKeyPath(key_path)) {
    if (const Value* inner = StandsFor(*at)) at = inner;
    visit();
    const Value* next = nullptr;
    if (at->kind == ValueKind::kObject) {
      // The walks' parts (ObjectParts); a transparent part is a dict, a list or a leaf, never
      // another object, so the lookup goes one level down at most.
      for (const ObjectPart& part : ObjectParts(*at)) {
        visit();
        if (!part.transparent) {
          if (part.component == component) next = part.node;
        } else {
          const Value* inner = StandsFor(*part.node) ? StandsFor(*part.node) : part.node;
          next = container_child(inner, component);
        }
        if (next) break;
      }
    } else {
      next = container_child(at, component);
    }
    if (!next) return nullptr;
    at = next;
  }
  if (const Value* inner = StandsFor(*at)) at = inner;
  return at;
}

std::string JoinKeyPath(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += '/';
    out += parts[i];
  }
  return out;
}

std::vector<std::string> SplitKeyPath(std::string_view key_path) {
  std::vector<std::string> parts;
  if (key_path.empty()) return parts;
  size_t start = 0;
  for (;;) {
    size_t slash = key_path.find('/', start);
    parts.emplace_back(key_path.substr(start, slash == std::string_view::npos ? slash : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return parts;
}

namespace {

std::string ScalarKeyText(const Value& key) {
  switch (key.kind) {
    case ValueKind::kStr: return key.text;
    case ValueKind::kInt: return key.IntToString();
    case ValueKind::kBool: return key.boolean ? "True" : "False";
    case ValueKind::kNone: return "None";
    case ValueKind::kFloat: return FloatText(key.real);
    case ValueKind::kBytes: return "b'" + key.text + "'";
    case ValueKind::kGlobal: case ValueKind::kObject: return key.type_name;
    default: return std::string(KindName(key.kind));
  }
}

[[noreturn]] void FailTooDeep() {
  Fail(ErrorCode::kLimit, "value nesting deeper than kMaxValueDepth (" + std::to_string(kMaxValueDepth) + ")");
}

}  // namespace

std::string KeyComponentText(const Value& key) {
  // Tuples as (a, b) and (a,), written with an explicit stack of open tuples: a key is file data
  // and may nest as deep as the pickle stack allows.
  struct Open {
    const Value* tuple;
    size_t next = 0;
  };
  std::vector<Open> open;
  std::string out;
  const Value* v = &key;
  while (v != nullptr) {
    if (v->kind == ValueKind::kTuple) {
      if (open.size() >= kMaxValueDepth) FailTooDeep();
      out += '(';
      open.push_back({v});
    } else {
      out += ScalarKeyText(*v);
    }
    if (out.size() > kMaxKeyTextBytes) {
      Fail(ErrorCode::kLimit, "a key longer than kMaxKeyTextBytes (" + std::to_string(kMaxKeyTextBytes) + ")");
    }
    v = nullptr;
    while (v == nullptr && !open.empty()) {
      Open& o = open.back();
      if (o.next < o.tuple->items.size()) {
        if (o.next > 0) out += ", ";
        v = o.tuple->items[o.next++];
      } else {
        if (o.tuple->items.size() == 1) out += ',';
        out += ')';
        open.pop_back();
      }
    }
  }
  return out;
}

const Value* StandsFor(const Value& node) {
  if (node.kind == ValueKind::kObject && node.type_name == "tensordict:NonTensorData" && node.state) {
    return node.state->Find("data");
  }
  return nullptr;
}

std::vector<NamedTensor> CollectTensors(const Value* root) {
  std::vector<NamedTensor> out;
  ForEachLeaf(root, [&](const std::string& path, const Value& leaf) {
    if (leaf.kind == ValueKind::kTensor) out.push_back({path, leaf.tensor});
  });
  return out;
}

namespace {

// The walk behind ForEachLeaf and FindUnknownObjects. `leaf` gets every tensor, scalar, set and
// global; `object` is asked at every object node whether to look through it (false: it is not
// entered).
void WalkTree(const Value* root, const std::function<void(const std::string& path, const Value& leaf)>& leaf,
              const std::function<bool(const std::string& path, const Value& object)>& object) {
  if (root == nullptr) return;
  // Depth-first with an explicit stack: the stack *is* the current path, kept spelled out in
  // `path` (each frame remembers where its component starts), so a leaf costs O(1) beyond its
  // callback whatever its depth. `on_path` breaks cycles.
  struct Frame {
    const Value* node;
    size_t next = 0;          // next child to visit
    size_t path_size = 0;     // path.size() before this node's component
    bool attributes = false;  // inside a dict's attributes: only tensors are leaves there
    std::vector<std::string> components;  // a dict's keys with non-str keys among them
    std::vector<std::string> attribute_components;  // a dict's attributes (`%attr:<key>`)
    std::vector<ObjectPart> parts;                  // an object's (ObjectParts)
    bool repeated = false;                          // walked before, under another path
  };
  std::vector<Frame> stack;
  std::string path;
  std::unordered_set<const Value*> on_path;
  // Containers entered so far, and how many frames on the stack are a second walk of one.
  std::unordered_set<const Value*> walked;
  size_t repeated_frames = 0;
  uint64_t visits = 0, repeated_visits = 0, path_bytes = 0;
  auto count_visit = [&] {
    if (++visits > kMaxTreeVisits) {
      Fail(ErrorCode::kLimit, "value tree has more than kMaxTreeVisits (" + std::to_string(kMaxTreeVisits) +
                                  ") paths to walk (shared subtrees repeated too often)");
    }
    if (repeated_frames == 0) return;
    ++repeated_visits;  // before the comparison reads it: the two sides are unsequenced
    if (repeated_visits > RepeatedVisitsAllowed(visits - repeated_visits)) {
      Fail(ErrorCode::kLimit, "value tree reaches " + std::to_string(repeated_visits) +
                                  " nodes again through shared subtrees after " +
                                  std::to_string(visits - repeated_visits) +
                                  " distinct ones (RepeatedVisitsAllowed in trove/document.h: a pickle memo that "
                                  "multiplies one list or dict)");
    }
  };
  auto count_bytes = [&](uint64_t n) {
    path_bytes += n;
    if (path_bytes > kMaxTreePathBytes) {
      Fail(ErrorCode::kLimit, "key paths of the value tree add up to more than kMaxTreePathBytes (" +
                                  std::to_string(kMaxTreePathBytes) + ") (shared subtrees under long keys)");
    }
  };
  // Appends a node's component (none for transparent object state) and checks the bounds.
  auto enter = [&](const std::string& component, bool transparent) {
    count_visit();
    if (stack.size() >= kMaxValueDepth) FailTooDeep();
    const size_t before = path.size();
    if (!transparent) {
      if (!path.empty()) path += '/';
      path += component;
    }
    count_bytes(path.size());
    return before;
  };
  // Components computed at once count as visits and their bytes as path bytes, so a shared
  // node cannot multiply the work.
  auto count_components = [&](const std::vector<std::string>& components) {
    for (const std::string& c : components) {
      count_visit();
      count_bytes(c.size());
    }
  };
  auto push = [&](const Value* node, const std::string& component, bool transparent, bool attributes) {
    if (const Value* inner = StandsFor(*node)) node = inner;
    // A torch.Size is one value (a shape), not a tuple to look into.
    const bool walk = node->kind == ValueKind::kDict || node->kind == ValueKind::kList ||
                      (node->kind == ValueKind::kTuple && node->type_name != "torch.Size") ||
                      node->kind == ValueKind::kObject;
    if (walk && on_path.count(node)) return;  // a cycle: the node contains itself
    const bool repeated = walk && !walked.insert(node).second;
    if (repeated) ++repeated_frames;  // the node's own visit counts as a repeat too
    const size_t before = enter(component, transparent);
    if (!walk) {
      // A dict's attributes are searched for tensors; their other values (a state_dict's
      // _metadata) are the class's bookkeeping, not the checkpoint's values.
      if (!attributes || node->kind == ValueKind::kTensor) leaf(path, *node);
      path.resize(before);
      return;
    }
    if (node->kind == ValueKind::kObject && !object(path, *node)) {
      if (repeated) --repeated_frames;
      path.resize(before);
      return;
    }
    Frame frame{node, 0, before, attributes, {}, {}, {}, repeated};
    if (node->kind == ValueKind::kObject) {
      frame.parts = ObjectParts(*node);
      for (const ObjectPart& p : frame.parts) {
        count_visit();
        count_bytes(p.component.size());
      }
    } else {
      if (!node->entries.empty() && HasNonStrKeys(*node)) {
        // Every key's component at once, to tell apart keys that spell the same one.
        frame.components = DictKeyComponents(*node);
        count_components(frame.components);
      }
      if (HasAttributes(*node)) {
        frame.attribute_components = AttributeComponents(*node);
        count_components(frame.attribute_components);
      }
    }
    on_path.insert(node);
    stack.push_back(std::move(frame));
  };
  // The i-th entry's component of a frame's node.
  auto entry_component = [](const Frame& f, size_t i) {
    return f.components.empty() ? EncodeKeyComponent(f.node->entries[i].first->text) : f.components[i];
  };
  push(root, "", true, false);
  std::string component;
  while (!stack.empty()) {
    Frame& top = stack.back();
    const Value* v = top.node;
    const size_t i = top.next++;
    const Value* child = nullptr;
    bool transparent = false;
    bool attributes = top.attributes;
    bool done = false;
    switch (v->kind) {
      case ValueKind::kDict:
        if (i < v->entries.size()) {
          child = v->entries[i].second;
          component = entry_component(top, i);
        } else if (i - v->entries.size() < top.attribute_components.size()) {
          // Its attributes, after its entries.
          const size_t a = i - v->entries.size();
          child = v->state->entries[a].second;
          component = top.attribute_components[a];
          attributes = true;
        } else {
          done = true;
        }
        break;
      case ValueKind::kList: case ValueKind::kTuple:
        if (i < v->items.size()) {
          child = v->items[i];
          component = std::to_string(i);
        } else {
          done = true;
        }
        break;
      case ValueKind::kObject:
        if (i < top.parts.size()) {
          child = top.parts[i].node;
          component = top.parts[i].component;
          transparent = top.parts[i].transparent;
        } else {
          done = true;
        }
        break;
      default:
        done = true;
        break;
    }
    if (done) {
      on_path.erase(v);
      if (top.repeated) --repeated_frames;
      path.resize(stack.back().path_size);
      stack.pop_back();
    } else if (child) {
      push(child, component, transparent, attributes);
    }
  }
}

}  // namespace

void ForEachLeaf(const Value* root, const std::function<void(const std::string& path, const Value& leaf)>& fn) {
  WalkTree(root, fn, [](const std::string&, const Value&) { return true; });
}

std::vector<UnknownObject> FindUnknownObjects(const Value* root) {
  std::vector<UnknownObject> out;
  std::unordered_set<const Value*> listed;
  WalkTree(
      root, [](const std::string&, const Value&) {},
      [&](const std::string& path, const Value& object) {
        if (!object.unknown_class) return true;
        if (listed.insert(&object).second) out.push_back({path, &object});
        return false;
      });
  return out;
}

std::vector<UnknownObject> FindUnknownObjects(const Document& doc) {
  bool any = false;
  if (doc.arena) {
    doc.arena->ForEachValue([&](const Value& v) { any = any || (v.kind == ValueKind::kObject && v.unknown_class); });
  }
  return any ? FindUnknownObjects(doc.root) : std::vector<UnknownObject>{};
}

std::string UnknownClassesText(const std::vector<UnknownObject>& objects, size_t max_classes) {
  std::vector<std::pair<std::string, size_t>> classes;
  std::unordered_map<std::string, size_t> index;
  for (const UnknownObject& o : objects) {
    std::string name = o.node->type_name;
    // A defaultdict is inert because of its factory (a callable trove gives no data meaning):
    // the factory is what the reader has to know about.
    if (name == "collections.defaultdict" && o.node->args && !o.node->args->items.empty() &&
        o.node->args->items[0]->kind == ValueKind::kGlobal) {
      name += " of " + o.node->args->items[0]->type_name;
    }
    auto [it, fresh] = index.emplace(name, classes.size());
    if (fresh) classes.emplace_back(std::move(name), 0);
    ++classes[it->second].second;
  }
  std::string text;
  for (size_t i = 0; i < classes.size() && i < max_classes; ++i) {
    if (i) text += ", ";
    text += EscapeForDisplay(classes[i].first);
    if (classes[i].second > 1) text += " (" + std::to_string(classes[i].second) + ")";
  }
  if (classes.size() > max_classes) text += " and " + std::to_string(classes.size() - max_classes) + " more classes";
  return text;
}

namespace {

uint64_t Times(uint64_t bytes, uint64_t ratio) { return bytes > UINT64_MAX / ratio ? UINT64_MAX : bytes * ratio; }
uint64_t Plus(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

void CheckExpansion(const std::vector<NamedTensor>& tensors, bool views_kept) {
  struct Stored {
    const std::string* key = nullptr;  // the first tensor viewing it
    const TensorView* view = nullptr;
    uint64_t written = 0;              // by every view of it
    uint64_t views = 0;
  };
  // By where the storage's bytes start and their length (an empty storage may start where the
  // next one does).
  struct StorageId {
    const void* at;
    uint64_t offset, size;
    bool operator==(const StorageId&) const = default;
  };
  struct StorageIdHash {
    size_t operator()(const StorageId& id) const {
      return std::hash<const void*>()(id.at) ^ (std::hash<uint64_t>()(id.offset) * 31) ^ (std::hash<uint64_t>()(id.size) * 131);
    }
  };
  std::unordered_map<StorageId, Stored, StorageIdHash> storages;
  struct Entry {
    const Stored* first = nullptr;
    uint64_t compressed = 0, inflated = 0;
  };
  std::unordered_map<const void*, Entry> entries;  // compressed entries, each counted once
  uint64_t written = 0, viewed = 0, occupied = 0, inflated = 0;
  for (const NamedTensor& t : tensors) {
    if (!t.view->has_data) continue;
    const TensorView* stored = t.view;  // the stored view under any converting views
    while (stored->cast_source) stored = stored->cast_source.get();
    const SharedBytes& bytes = stored->storage;
    if (!views_kept && t.view->nbytes() > std::max(kExpandFreeBytes, Times(bytes.size(), kMaxExpandRatio))) {
      Fail(ErrorCode::kLimit, "tensor '" + t.key + "' is a view of " + ShapeString(t.view->shape) + " (" +
                                  std::to_string(t.view->nbytes()) + " bytes) over " + std::to_string(bytes.size()) +
                                  " stored bytes: writing it whole would expand it more than kMaxExpandRatio (" +
                                  std::to_string(kMaxExpandRatio) + "x); --allow-expand writes it anyway");
    }
    const auto [at, offset] = bytes.identity();
    auto [it, first] = storages.try_emplace(StorageId{at == nullptr ? static_cast<const void*>(stored) : at, offset, bytes.size()});
    Stored& s = it->second;
    if (first) {
      s.key = &t.key;
      s.view = stored;
      viewed = Plus(viewed, bytes.size());
      const std::optional<SharedBytes::Compression> c = bytes.compression();
      if (!c) {
        occupied = Plus(occupied, bytes.size());
      } else if (auto [e, new_entry] = entries.try_emplace(bytes.owner().get()); new_entry) {
        e->second = {&s, c->compressed, c->inflated};
        occupied = Plus(occupied, c->compressed);
        inflated = Plus(inflated, c->inflated);
      }
    }
    // A view kept a view writes its storage once, whichever keys share it.
    s.written = views_kept ? bytes.size() : Plus(s.written, t.view->nbytes());
    ++s.views;
  }
  for (const auto& [id, s] : storages) written = Plus(written, s.written);
  if (!views_kept && written > std::max(kExpandFreeBytes, Times(viewed, kMaxExpandRatio))) {
    const Stored* most = nullptr;
    for (const auto& [id, s] : storages)
      if (most == nullptr || s.written > most->written) most = &s;
    Fail(ErrorCode::kLimit, std::to_string(tensors.size()) + " tensors would write " + std::to_string(written) +
                                " bytes from the " + std::to_string(viewed) + " bytes of the " +
                                std::to_string(storages.size()) + " storages they view (storage '" +
                                most->view->storage_key + "' of '" + *most->key + "' alone " +
                                std::to_string(most->views) + " times, " + std::to_string(most->written) +
                                " bytes): more than kMaxExpandRatio (" + std::to_string(kMaxExpandRatio) +
                                "x); this format cannot share a storage between tensors, so each one is written "
                                "whole (.pt keeps shared storages shared; --keys/--exclude select fewer); "
                                "--allow-expand writes it anyway");
  }
  if (InflatesBeyondRule(inflated, occupied)) {
    const Entry* most = nullptr;
    for (const auto& [id, e] : entries)
      if (most == nullptr || e.inflated / std::max<uint64_t>(e.compressed, 1) > most->inflated / std::max<uint64_t>(most->compressed, 1)) most = &e;
    auto ratio = [](uint64_t to, uint64_t from) { return " (" + std::to_string(to / std::max<uint64_t>(from, 1)) + ":1)"; };
    std::string why = "compressed storage '" + most->first->view->storage_key + "' (tensor '" + *most->first->key +
                      "') inflates " + std::to_string(most->compressed) + " bytes to " + std::to_string(most->inflated) +
                      ratio(most->inflated, most->compressed);
    // With other storages, the rule is about them all: the ratio of all that is written to all
    // that is stored.
    if (most->compressed != occupied || most->inflated != inflated) {
      why += "; the compressed storages would write " + std::to_string(inflated) + " bytes from the " +
             std::to_string(occupied) + " bytes the storages occupy" + ratio(inflated, occupied);
    }
    Fail(ErrorCode::kLimit, why + ", more than kMaxInflateRatio (" + std::to_string(kMaxInflateRatio) +
                                ":1), a decompression bomb's ratio; --allow-expand writes it anyway");
  }
}

}  // namespace trove
