#include "cli/value_printer.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "trove/document.h"

namespace trove::cli {
namespace {

std::string FloatText(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  // Shortest text that reads back to the same double, like Python's repr.
  for (int prec = 1; prec <= 17; ++prec) {
    char tryb[64];
    std::snprintf(tryb, sizeof tryb, "%.*g", prec, d);
    if (std::strtod(tryb, nullptr) == d) {
      std::string s = tryb;
      if (s.find_first_of(".en") == std::string::npos) s += ".0";
      return s;
    }
  }
  return buf;
}

std::string Quote(const std::string& s, size_t max_chars) {
  std::string out = "'";
  for (unsigned char c : s) {
    if (out.size() > max_chars) {
      out += "...";
      break;
    }
    if (c == '\'' || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c < 32 || c == 127) { char b[8]; std::snprintf(b, sizeof b, "\\x%02x", c); out += b; }
    else out += static_cast<char>(c);
  }
  return out + "'";
}

std::string TypeLabel(const Value& v) {
  if (!v.type_name.empty() && v.type_name != "dict" && v.type_name != "bytes") return v.type_name;
  return std::string(KindName(v.kind));
}

std::string TensorSummary(const TensorView& t) {
  return std::string(Name(t.dtype)) + ShapeString(t.shape);
}

// Scalars and containers of scalars fit on one line.
bool IsInline(const Value& v) {
  if (v.kind == ValueKind::kTensor) return false;
  if (StandsFor(v)) return true;
  if (!v.is_container()) return v.kind != ValueKind::kObject || v.args == nullptr;
  if (v.kind == ValueKind::kDict) return false;
  if (v.items.size() > 8) return false;
  for (const Value* i : v.items)
    if (i->is_container() || i->kind == ValueKind::kTensor || i->kind == ValueKind::kObject) return false;
  return true;
}

size_t CountTensors(const Value* v, size_t budget) {
  // Bounded count of tensor nodes below v (for summaries only).
  size_t n = 0, seen = 0;
  std::vector<const Value*> stack{v};
  while (!stack.empty() && seen < budget) {
    const Value* x = stack.back();
    stack.pop_back();
    ++seen;
    if (x->kind == ValueKind::kTensor) { ++n; continue; }
    for (const Value* i : x->items) stack.push_back(i);
    for (const auto& e : x->entries) stack.push_back(e.second);
    if (x->kind == ValueKind::kObject) {
      if (x->args) stack.push_back(x->args);
      if (x->state) stack.push_back(x->state);
    }
  }
  return n;
}

bool OnlyTensors(const Value& v) {
  if (v.kind == ValueKind::kDict) {
    for (const auto& e : v.entries)
      if (e.second->kind != ValueKind::kTensor) return false;
    return true;
  }
  if (v.kind == ValueKind::kList || v.kind == ValueKind::kTuple) {
    for (const Value* i : v.items)
      if (i->kind != ValueKind::kTensor) return false;
    return true;
  }
  return false;
}

void Describe(const Value* v, const std::string& label, int depth, std::vector<std::string>& out, size_t max_lines) {
  if (out.size() >= max_lines) return;
  if (const Value* inner = StandsFor(*v)) v = inner;
  std::string indent(static_cast<size_t>(depth) * 2, ' ');
  std::string head = indent + (label.empty() ? "" : label + ": ");
  if (depth >= kMaxPrintDepth) {
    out.push_back(head + "...");
    return;
  }
  if (v->kind == ValueKind::kTensor) {
    out.push_back(head + "tensor " + TensorSummary(*v->tensor));
    return;
  }
  if (IsInline(*v)) {
    out.push_back(head + ScalarText(*v));
    return;
  }
  if (v->kind == ValueKind::kObject) {
    out.push_back(head + "<" + v->type_name + ">");
    if (v->args) Describe(v->args, "args", depth + 1, out, max_lines);
    if (v->state) Describe(v->state, "state", depth + 1, out, max_lines);
    return;
  }
  size_t count = v->kind == ValueKind::kDict ? v->entries.size() : v->items.size();
  std::string summary = head + TypeLabel(*v) + " of " + std::to_string(count);
  if (OnlyTensors(*v)) {
    out.push_back(summary + " tensors");
    return;
  }
  size_t tensors = CountTensors(v, 100000);
  out.push_back(summary + (tensors ? " (" + std::to_string(tensors) + " tensors inside)" : ""));
  if (v->kind == ValueKind::kDict) {
    size_t skipped = 0;
    // Scalars first (epoch, step, a learning rate), then containers without tensors (a config,
    // hyperparameters), then the rest: the short facts a person looks for are never cut off by
    // a long subtree of weights or optimizer state before them.
    // Bounded: the first kReorderedEntries entries are ranked, each by a look at no more than
    // kRankNodes nodes; later entries keep their order, after them.
    constexpr size_t kReorderedEntries = 4096, kRankNodes = 64;
    std::vector<uint8_t> ranks(std::min(v->entries.size(), kReorderedEntries));
    for (size_t i = 0; i < ranks.size(); ++i) {
      const Value& e = *v->entries[i].second;
      const Value* shown = StandsFor(e) ? StandsFor(e) : &e;
      ranks[i] = IsInline(*shown) ? 0 : CountTensors(shown, kRankNodes) == 0 ? 1 : 2;
    }
    const std::vector<std::string> components = HasNonStrKeys(*v) ? DictKeyComponents(*v) : std::vector<std::string>{};
    for (int pass = 0; pass < 3; ++pass) {
      for (size_t i = 0; i < v->entries.size(); ++i) {
        const auto& [k, val] = v->entries[i];
        if (val->kind == ValueKind::kTensor) {
          skipped += pass == 0;
          continue;
        }
        if ((i < ranks.size() ? ranks[i] : 2) != pass) continue;
        if (out.size() >= max_lines) return;
        Describe(val, components.empty() ? EncodeKeyComponent(k->text) : components[i], depth + 1, out, max_lines);
      }
    }
    if (skipped && out.size() < max_lines) out.push_back(indent + "  (" + std::to_string(skipped) + (skipped == 1 ? " tensor)" : " tensors)"));
  } else {
    size_t skipped = 0;
    for (size_t i = 0; i < v->items.size(); ++i) {
      if (v->items[i]->kind == ValueKind::kTensor) { ++skipped; continue; }
      if (out.size() >= max_lines) return;
      Describe(v->items[i], std::to_string(i), depth + 1, out, max_lines);
    }
    if (skipped && out.size() < max_lines) out.push_back(indent + "  (" + std::to_string(skipped) + (skipped == 1 ? " tensor)" : " tensors)"));
  }
  if (v->state && out.size() < max_lines) Describe(v->state, "attributes", depth + 1, out, max_lines);
}

nlohmann::ordered_json ToJson(const Value* v, int depth, size_t& budget) {
  using J = nlohmann::ordered_json;
  if (budget == 0 || depth >= kMaxPrintDepth) return "...";
  --budget;
  if (const Value* inner = StandsFor(*v)) v = inner;
  switch (v->kind) {
    case ValueKind::kNone: return nullptr;
    case ValueKind::kBool: return v->boolean;
    case ValueKind::kInt: return v->is_big_int() ? J(v->IntToString()) : J(v->integer);
    case ValueKind::kFloat: return DoubleJson(v->real);
    case ValueKind::kComplex: return J::array({DoubleJson(v->real), DoubleJson(v->imag)});
    case ValueKind::kStr: return v->text;
    case ValueKind::kBytes: return J{{v->type_name.empty() ? "bytes" : v->type_name, v->text.size()}};
    case ValueKind::kGlobal: return J{{"global", v->type_name}};
    case ValueKind::kTensor:
      return J{{"tensor", J{{"dtype", Name(v->tensor->dtype)}, {"shape", v->tensor->shape}}}};
    case ValueKind::kObject: {
      J o{{"object", v->type_name}};
      if (v->args) o["args"] = ToJson(v->args, depth + 1, budget);
      if (v->state) o["state"] = ToJson(v->state, depth + 1, budget);
      return o;
    }
    case ValueKind::kDict: {
      J o = J::object();
      // Keys that spell one text (1 and "1") keep their distinct key path components.
      const std::vector<std::string> components = HasNonStrKeys(*v) ? DictKeyComponents(*v) : std::vector<std::string>{};
      for (size_t i = 0; i < v->entries.size(); ++i) {
        const auto& [k, val] = v->entries[i];
        if (budget == 0) { o["..."] = "..."; break; }
        const bool typed = !components.empty() && components[i].size() > 1 && components[i][0] == '%' &&
                           std::isalpha(static_cast<unsigned char>(components[i][1]));
        o[typed ? components[i] : KeyComponentText(*k)] = ToJson(val, depth + 1, budget);
      }
      return o;
    }
    case ValueKind::kTuple:
      if (v->type_name == "torch.Size") {
        J dims = J::array();
        for (const Value* i : v->items) dims.push_back(ToJson(i, depth + 1, budget));
        return J{{"size", dims}};
      }
      [[fallthrough]];
    case ValueKind::kList: case ValueKind::kSet: case ValueKind::kFrozenSet: {
      J a = J::array();
      for (const Value* i : v->items) {
        if (budget == 0) { a.push_back("..."); break; }
        a.push_back(ToJson(i, depth + 1, budget));
      }
      return a;
    }
  }
  return nullptr;
}

}  // namespace

nlohmann::ordered_json DoubleJson(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return d;
}

std::string ScalarText(const Value& wrapped, size_t max_chars) {
  // A wrapper shows the value it stands for; wrappers of wrappers unwind in a loop.
  const Value* shown = &wrapped;
  for (int hops = 0; const Value* inner = StandsFor(*shown); ++hops) {
    if (hops == kMaxPrintDepth) return "...";
    shown = inner;
  }
  const Value& v = *shown;
  switch (v.kind) {
    case ValueKind::kNone: return "None";
    case ValueKind::kBool: return v.boolean ? "True" : "False";
    case ValueKind::kInt: return v.IntToString();
    case ValueKind::kFloat: return FloatText(v.real);
    case ValueKind::kComplex: return "(" + FloatText(v.real) + (v.imag < 0 ? "" : "+") + FloatText(v.imag) + "j)";
    case ValueKind::kStr: return Quote(v.text, max_chars);
    case ValueKind::kBytes: return (v.type_name == "bytearray" ? "bytearray(" : "b") + std::to_string(v.text.size()) + " bytes" + (v.type_name == "bytearray" ? ")" : "");
    case ValueKind::kGlobal: return v.type_name;
    case ValueKind::kTensor: return "tensor " + TensorSummary(*v.tensor);
    case ValueKind::kObject: return "<" + v.type_name + ">";
    case ValueKind::kList: case ValueKind::kTuple: case ValueKind::kSet: case ValueKind::kFrozenSet: {
      if (v.kind == ValueKind::kTuple && v.type_name == "torch.Size") {
        std::string s = "torch.Size([";
        for (size_t i = 0; i < v.items.size(); ++i) s += (i ? ", " : "") + ScalarText(*v.items[i], max_chars);
        return s + "])";
      }
      const char* open = v.kind == ValueKind::kList ? "[" : v.kind == ValueKind::kTuple ? "(" : "{";
      const char* close = v.kind == ValueKind::kList ? "]" : v.kind == ValueKind::kTuple ? ")" : "}";
      std::string s = open;
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) s += ", ";
        if (s.size() > max_chars) { s += "..."; break; }
        const Value& item = *v.items[i];
        s += item.is_container() ? std::string(KindName(item.kind)) + "(...)" : ScalarText(item, max_chars);
      }
      if (v.kind == ValueKind::kTuple && v.items.size() == 1) s += ",";
      return s + close;
    }
    case ValueKind::kDict: return TypeLabel(v) + " of " + std::to_string(v.entries.size());
  }
  return "?";
}

std::vector<std::string> DescribeValues(const Value* root, size_t max_lines) {
  std::vector<std::string> out;
  if (root) Describe(root, "", 0, out, max_lines);
  if (out.size() >= max_lines) out.push_back("...");
  return out;
}

nlohmann::ordered_json ValueToJson(const Value* v, size_t node_budget) {
  if (v == nullptr) return nullptr;
  return ToJson(v, 0, node_budget);
}

}  // namespace trove::cli
