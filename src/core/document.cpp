#include "trove/document.h"

#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "trove/error.h"

namespace trove {

const NamedTensor* Document::FindTensor(std::string_view key) const {
  for (const auto& t : tensors)
    if (t.key == key) return &t;
  return nullptr;
}

const std::string* Document::Property(std::string_view name) const {
  for (const auto& [k, v] : properties)
    if (k == name) return &v;
  return nullptr;
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

std::string KeyComponentText(const Value& key) {
  switch (key.kind) {
    case ValueKind::kStr: return key.text;
    case ValueKind::kInt: return key.IntToString();
    case ValueKind::kBool: return key.boolean ? "True" : "False";
    case ValueKind::kNone: return "None";
    case ValueKind::kFloat: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", key.real);
      return buf;
    }
    case ValueKind::kBytes: return "b'" + key.text + "'";
    case ValueKind::kTuple: {
      std::string s = "(";
      for (size_t i = 0; i < key.items.size(); ++i) {
        if (i) s += ", ";
        s += KeyComponentText(*key.items[i]);
      }
      if (key.items.size() == 1) s += ",";
      return s + ")";
    }
    case ValueKind::kGlobal: case ValueKind::kObject: return key.type_name;
    default: return std::string(KindName(key.kind));
  }
}

std::vector<NamedTensor> CollectTensors(const Value* root) {
  std::vector<NamedTensor> out;
  if (root == nullptr) return out;
  // Explicit stack of (node, path, depth); `on_path` holds the nodes of the current path to
  // break cycles. Children are pushed in reverse so that they pop in tree order.
  struct Frame {
    const Value* node;
    std::string path;
    bool exit;  // pop marker: remove node from on_path
  };
  std::vector<Frame> stack;
  std::unordered_multiset<const Value*> on_path;
  stack.push_back({root, "", false});
  uint64_t visits = 0;
  auto child_path = [](const std::string& parent, const std::string& component) {
    std::string enc = EncodeKeyComponent(component);
    return parent.empty() ? enc : parent + "/" + enc;
  };
  while (!stack.empty()) {
    Frame f = std::move(stack.back());
    stack.pop_back();
    if (f.exit) {
      on_path.erase(on_path.find(f.node));
      continue;
    }
    if (++visits > kMaxTreeVisits) {
      Fail(ErrorCode::kLimit, "value tree has more than kMaxTreeVisits (" + std::to_string(kMaxTreeVisits) +
                                  ") paths to walk (shared subtrees repeated too often)");
    }
    const Value* v = f.node;
    if (v->kind == ValueKind::kTensor) {
      out.push_back({f.path, v->tensor});
      continue;
    }
    if (on_path.count(v)) continue;  // a cycle: the node contains itself
    std::vector<Frame> children;
    switch (v->kind) {
      case ValueKind::kDict:
        for (const auto& [k, val] : v->entries) children.push_back({val, child_path(f.path, KeyComponentText(*k)), false});
        break;
      case ValueKind::kList: case ValueKind::kTuple:
        for (size_t i = 0; i < v->items.size(); ++i) children.push_back({v->items[i], child_path(f.path, std::to_string(i)), false});
        break;
      case ValueKind::kObject:
        if (v->state) children.push_back({v->state, f.path, false});
        if (v->args) children.push_back({v->args, f.path, false});
        break;
      default:
        break;
    }
    if (children.empty()) continue;
    on_path.insert(v);
    stack.push_back({v, "", true});
    for (size_t i = children.size(); i-- > 0;) stack.push_back(std::move(children[i]));
  }
  return out;
}

}  // namespace trove
