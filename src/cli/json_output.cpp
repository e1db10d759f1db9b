#include "cli/json_output.h"

#include <charconv>
#include <cstdio>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "cli/value_printer.h"
#include "core/display_escape.h"
#include "core/float_text.h"
#include "core/utf8.h"
#include "trove/document.h"

namespace trove::cli {
namespace {

std::string Base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t n = uint32_t{static_cast<uint8_t>(bytes[i])} << 16 | uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  if (const size_t left = bytes.size() - i; left > 0) {
    uint32_t n = uint32_t{static_cast<uint8_t>(bytes[i])} << 16;
    if (left == 2) n |= uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8;
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += left == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Json Tagged(const char* tag, Json value) {
  Json o = Json::object();
  o[tag] = std::move(value);
  return o;
}

Json Elided() { return Tagged("$elided", true); }

// A dict is a plain JSON object when JSON cannot mistake it: every key a str, none starting with
// '$' (the tags' mark). Its class is then not shown: dict and OrderedDict both keep their order.
bool PlainObject(const Value& dict) {
  if (dict.type_name != "dict" && dict.type_name != "collections.OrderedDict" && !dict.type_name.empty()) return false;
  for (const auto& [k, v] : dict.entries) {
    if (k->kind != ValueKind::kStr || k->text.starts_with("$")) return false;
  }
  return true;
}

struct Encoder {
  ValueJsonLimits limits;
  size_t nodes = 0;
  // A container encoded twice is a shared subtree (the pickle memo): its second and later
  // encodings count against RepeatedVisitsAllowed (trove/document.h) whatever `limits` allow, so no limit lets a
  // memo-built DAG spell its exponential expansion.
  std::unordered_set<const Value*> encoded = {};
  size_t repeated_depth = 0;
  uint64_t repeated_nodes = 0;

  Json Items(const Value& v, int depth) {
    Json a = Json::array();
    for (const Value* item : v.items) {
      if (nodes >= limits.nodes) {
        a.push_back(Elided());
        break;
      }
      a.push_back(Encode(item, depth + 1));
    }
    return a;
  }

  // A dict's (or object's) entries as [key, value] pairs, cut by the node budget.
  Json Pairs(const Value& v, int depth) {
    Json pairs = Json::array();
    for (const auto& [k, val] : v.entries) {
      if (nodes >= limits.nodes) {
        pairs.push_back(Elided());
        break;
      }
      Json key = Encode(k, depth + 1);
      pairs.push_back(Json::array({std::move(key), Encode(val, depth + 1)}));
    }
    return pairs;
  }

  Json Encode(const Value* v, int depth) {
    if (nodes >= limits.nodes || depth >= kMaxPrintDepth) return Elided();
    ++nodes;
    // A wrapper (tensordict's NonTensorData) is encoded as the value it stands for.
    for (int hops = 0; const Value* inner = StandsFor(*v); ++hops) {
      if (hops == kMaxPrintDepth) return Elided();
      v = inner;
    }
    const bool container = !v->items.empty() || !v->entries.empty() || v->args || v->state;
    const bool again = container && !encoded.insert(v).second;
    if (repeated_depth + (again ? 1 : 0) > 0) {
      ++repeated_nodes;  // before the comparison reads it: the two sides are unsequenced
      if (repeated_nodes > RepeatedVisitsAllowed(nodes - repeated_nodes)) return Elided();
    }
    if (!again) return EncodeNode(v, depth);
    ++repeated_depth;
    Json j = EncodeNode(v, depth);
    --repeated_depth;
    return j;
  }

  Json EncodeNode(const Value* v, int depth) {
    switch (v->kind) {
      case ValueKind::kNone: return nullptr;
      case ValueKind::kBool: return v->boolean;
      case ValueKind::kInt: return v->is_big_int() ? Tagged("$int", v->IntToString()) : Json(v->integer);
      case ValueKind::kFloat: return v->real;
      case ValueKind::kComplex: return Tagged("$complex", Json::array({v->real, v->imag}));
      case ValueKind::kStr: return v->text;
      case ValueKind::kBytes: {
        const bool whole = v->text.size() <= limits.bytes;
        Json o = Tagged("$bytes", Base64(whole ? std::string_view(v->text) : std::string_view(v->text).substr(0, limits.bytes)));
        if (!whole) o["$length"] = v->text.size();
        if (v->type_name == "bytearray") o["$class"] = "bytearray";
        return o;
      }
      case ValueKind::kList: return Items(*v, depth);
      case ValueKind::kTuple: {
        Json o = Tagged("$tuple", Items(*v, depth));
        // torch.Size is the one tuple subclass trove reads; a Size and a tuple read back differently.
        if (!v->type_name.empty() && v->type_name != "tuple") o["$class"] = v->type_name;
        return o;
      }
      case ValueKind::kSet: return Tagged("$set", Items(*v, depth));
      case ValueKind::kFrozenSet: return Tagged("$frozenset", Items(*v, depth));
      case ValueKind::kDict: {
        if (PlainObject(*v)) {
          Json o = Json::object();
          for (const auto& [k, val] : v->entries) {
            if (nodes >= limits.nodes) {
              o["$elided"] = true;
              break;
            }
            o[k->text] = Encode(val, depth + 1);
          }
          return o;
        }
        Json o = Tagged("$dict", Pairs(*v, depth));
        if (!v->type_name.empty() && v->type_name != "dict") o["$class"] = v->type_name;
        return o;
      }
      case ValueKind::kTensor: {
        const TensorView& t = *v->tensor;
        return Tagged("$tensor", Json{{"dtype", Name(t.dtype)}, {"shape", t.shape}});
      }
      case ValueKind::kGlobal: return Tagged("$global", v->type_name);
      case ValueKind::kObject: {
        Json o = Tagged("$object", v->type_name);
        if (v->args) o["$args"] = Encode(v->args, depth + 1);
        if (v->state) o["$state"] = Encode(v->state, depth + 1);
        // A permissive reader fills an unknown object's SETITEMS and APPENDS as Python would
        // call its methods: those are its items too.
        if (!v->entries.empty()) o["$setitems"] = Pairs(*v, depth);
        if (!v->items.empty()) o["$appends"] = Items(*v, depth);
        return o;
      }
    }
    return nullptr;
  }
};

template <class F>
void AppendFloatOrTag(F value, std::string& out) {
  if (std::isfinite(value)) {
    AppendFloatText(value, out);
    return;
  }
  out += std::isnan(value) ? R"({"$float":"nan"})" : value > 0 ? R"({"$float":"inf"})" : R"({"$float":"-inf"})";
}

template <class I>
void AppendInteger(I value, std::string& out) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  bool exact;
  if constexpr (std::is_signed_v<I>) {
    exact = value >= -static_cast<int64_t>(kMaxExactJsonInteger) && value <= static_cast<int64_t>(kMaxExactJsonInteger);
  } else {
    exact = value <= kMaxExactJsonInteger;
  }
  if (exact) {
    out.append(buf, r.ptr);
    return;
  }
  out += R"({"$int":")";
  out.append(buf, r.ptr);
  out += "\"}";
}

void Dump(const Json& j, int indent, int level, std::string& out) {
  const bool pretty = indent >= 0;
  auto newline = [&](int at) {
    if (!pretty) return;
    out += '\n';
    out.append(static_cast<size_t>(at * indent), ' ');
  };
  switch (j.type()) {
    case Json::value_t::null: out += "null"; return;
    case Json::value_t::boolean: out += j.get<bool>() ? "true" : "false"; return;
    case Json::value_t::number_integer: AppendInteger(j.get<int64_t>(), out); return;
    case Json::value_t::number_unsigned: AppendInteger(j.get<uint64_t>(), out); return;
    case Json::value_t::number_float: AppendFloatOrTag(j.get<double>(), out); return;
    case Json::value_t::string: AppendJsonString(j.get_ref<const std::string&>(), out); return;
    case Json::value_t::array: {
      if (j.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Json& e : j) {
        if (!first) out += ',';
        first = false;
        newline(level + 1);
        Dump(e, indent, level + 1, out);
      }
      newline(level);
      out += ']';
      return;
    }
    case Json::value_t::object: {
      if (j.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        if (!first) out += ',';
        first = false;
        newline(level + 1);
        AppendJsonString(k, out);
        out += pretty ? ": " : ":";
        Dump(v, indent, level + 1, out);
      }
      newline(level);
      out += '}';
      return;
    }
    case Json::value_t::binary: case Json::value_t::discarded: out += "null"; return;
  }
}

}  // namespace

Json Envelope(std::string_view command) {
  return Json{{"schema_version", kJsonSchemaVersion}, {"command", std::string(command)}};
}

Json ErrorFieldsJson(const Error& error) {
  const auto or_null = [](const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); };
  return Json{{"code", std::string(ErrorCodeName(error.code()))},
              {"message", error.message()},
              {"reason", error.reason()},
              {"file", or_null(error.file())},
              {"entry", or_null(error.entry())},
              {"offset", error.offset() ? Json(*error.offset()) : Json(nullptr)},
              {"spec_code", error.spec_code() ? Json(*error.spec_code()) : Json(nullptr)}};
}

Json ErrorJson(std::string_view command, const Error& error) {
  Json j = Envelope(command);
  j["error"] = ErrorFieldsJson(error);
  return j;
}

Json ValueJson(const Value* v, const ValueJsonLimits& limits) {
  if (v == nullptr) return nullptr;
  Encoder e{limits};
  return e.Encode(v, 0);
}

void AppendJsonFloat(double value, std::string& out) { AppendFloatOrTag(value, out); }
void AppendJsonInt(int64_t value, std::string& out) { AppendInteger(value, out); }
void AppendJsonUInt(uint64_t value, std::string& out) { AppendInteger(value, out); }

// JSON may hold raw what a terminal acts on all the same: DEL and the characters the display
// rule shows as \uNNNN (core/display_escape.h: C1 controls, 0x9B being CSI on terminals that take
// 8-bit controls; bidirectional controls; line separators). `trove info --json` read in a
// terminal must show names as plain text does, so these are written as JSON's \u escapes: the
// same JSON value, no raw control.
void AppendJsonString(std::string_view text, std::string& out) {
  const std::string dumped = Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
  // dump() wrote valid UTF-8 (invalid bytes replaced, no surrogate), so every character decodes.
  for (size_t i = 0; i < dumped.size();) {
    const size_t at = i;
    uint32_t cp = 0;
    if (!utf8::Next(dumped, i, cp)) i = at + 1, cp = 0;
    if (cp == 0x7F || EscapedCodePoint(cp)) {
      char escaped[12];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(cp));
      out += escaped;
    } else {
      out.append(dumped, at, i - at);
    }
  }
}

std::string DumpJson(const Json& j, int indent) {
  std::string out;
  Dump(j, indent, 0, out);
  return out;
}

void PrintJson(std::ostream& out, const Json& j) { out << DumpJson(j, 2) << '\n'; }

void JsonObjectWriter::Key(const std::string& key) {
  out_ << (members_++ ? ",\n  " : "\n  ");
  std::string k;
  AppendJsonString(key, k);
  out_ << k << ": ";
}

void JsonObjectWriter::Member(const std::string& key, const Json& value) {
  Key(key);
  std::string text;
  Dump(value, 2, 1, text);
  out_ << text;
}

void JsonObjectWriter::BeginArray(const std::string& key) {
  Key(key);
  out_ << '[';
  elements_ = 0;
}

void JsonObjectWriter::Element(const Json& value) {
  out_ << (elements_++ ? ",\n    " : "\n    ");
  std::string text;
  Dump(value, 2, 2, text);
  out_ << text;
}

void JsonObjectWriter::EndArray() { out_ << (elements_ ? "\n  ]" : "]"); }
void JsonObjectWriter::End() { out_ << (members_ ? "\n}\n" : "}\n"); }

}  // namespace trove::cli
