#include "trove/document.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "core/float_text.h"
#include "trove/error.h"

namespace trove {

const NamedTensor* Document::FindTensor(std::string_view key) const {
  for (const auto& t : tensors)
    if (t.key == key) return &t;
  return nullptr;
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
  // The containers a component is looked up in: `from` itself, or what objects wrap (state, then
  // args, depth first), as ForEachLeaf walks them. `seen` breaks object cycles.
  auto look_through = [&](const Value* from) {
    std::vector<const Value*> out, stack{from};
    std::unordered_set<const Value*> seen;
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      if (const Value* inner = StandsFor(*v)) v = inner;
      if (!seen.insert(v).second) continue;
      visit();
      if (v->kind == ValueKind::kObject) {
        if (v->args) stack.push_back(v->args);
        if (v->state) stack.push_back(v->state);
      } else {
        out.push_back(v);
      }
    }
    return out;
  };
  const Value* at = root;
  for (const std::string& component : SplitKeyPath(key_path)) {
    const Value* next = nullptr;
    for (const Value* c : look_through(at)) {
      if (c->kind == ValueKind::kDict) {
        for (const auto& [k, v] : c->entries) {
          visit();
          if (EncodeKeyComponent(KeyComponentText(*k)) == component) {
            next = v;
            break;
          }
        }
      } else if ((c->kind == ValueKind::kList || c->kind == ValueKind::kTuple) && !component.empty() &&
                 component.size() <= 19 && component.find_first_not_of("0123456789") == std::string::npos &&
                 (component == "0" || component[0] != '0')) {
        const uint64_t i = std::stoull(component);
        if (i < c->items.size()) next = c->items[i];
      }
      if (next) break;
    }
    if (!next) return nullptr;
    at = next;
  }
  if (const Value* inner = StandsFor(*at)) at = inner;
  return at;
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
  for (unsigned char c : key) {
    if (NeedsEscape(c)) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string DecodeKeyComponent(std::string_view encoded) {
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

void ForEachLeaf(const Value* root, const std::function<void(const std::string& path, const Value& leaf)>& fn) {
  if (root == nullptr) return;
  // Depth-first with an explicit stack: the stack *is* the current path, kept spelled out in
  // `path` (each frame remembers where its component starts), so a leaf costs O(1) beyond its
  // callback whatever its depth. `on_path` breaks cycles.
  struct Frame {
    const Value* node;
    size_t next = 0;          // next child to visit
    size_t path_size = 0;     // path.size() before this node's component
  };
  std::vector<Frame> stack;
  std::string path;
  std::unordered_set<const Value*> on_path;
  uint64_t visits = 0, path_bytes = 0;
  // Appends a node's component (none for transparent object state/args) and checks the bounds.
  auto enter = [&](const std::string& component, bool transparent) {
    if (++visits > kMaxTreeVisits) {
      Fail(ErrorCode::kLimit, "value tree has more than kMaxTreeVisits (" + std::to_string(kMaxTreeVisits) +
                                  ") paths to walk (shared subtrees repeated too often)");
    }
    if (stack.size() >= kMaxValueDepth) FailTooDeep();
    const size_t before = path.size();
    if (!transparent) {
      if (!path.empty()) path += '/';
      path += component;
    }
    path_bytes += path.size();
    if (path_bytes > kMaxTreePathBytes) {
      Fail(ErrorCode::kLimit, "key paths of the value tree add up to more than kMaxTreePathBytes (" +
                                  std::to_string(kMaxTreePathBytes) + ") (shared subtrees under long keys)");
    }
    return before;
  };
  auto push = [&](const Value* node, const std::string& component, bool transparent) {
    if (const Value* inner = StandsFor(*node)) node = inner;
    const bool walk = node->kind == ValueKind::kDict || node->kind == ValueKind::kList ||
                      node->kind == ValueKind::kTuple || node->kind == ValueKind::kObject;
    if (walk && on_path.count(node)) return;  // a cycle: the node contains itself
    const size_t before = enter(component, transparent);
    if (!walk) {
      fn(path, *node);
      path.resize(before);
      return;
    }
    on_path.insert(node);
    stack.push_back({node, 0, before});
  };
  push(root, "", true);
  std::string component;
  while (!stack.empty()) {
    const Value* v = stack.back().node;
    const size_t i = stack.back().next++;
    const Value* child = nullptr;
    bool transparent = false;
    bool done = false;
    switch (v->kind) {
      case ValueKind::kDict:
        if (i < v->entries.size()) {
          child = v->entries[i].second;
          component = EncodeKeyComponent(KeyComponentText(*v->entries[i].first));
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
      case ValueKind::kObject:  // transparent: its state, then its constructor arguments
        if (i < 2) {
          child = i == 0 ? v->state : v->args;
          transparent = true;
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
      path.resize(stack.back().path_size);
      stack.pop_back();
    } else if (child) {
      push(child, component, transparent);
    }
  }
}

}  // namespace trove
