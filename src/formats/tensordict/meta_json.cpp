#include "formats/tensordict/meta_json.h"

#include <cmath>
#include <unordered_set>
#include <vector>

#include "core/little_endian.h"
#include "trove/error.h"

namespace trove::tensordict {
namespace {

// Checks UTF-8 (Python decodes the whole file before parsing, so invalid bytes fail there too)
// and the nesting depth, before nlohmann builds anything.
void PrescanJson(std::string_view text, const std::string& name) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      size_t extra = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 0;
      if (extra == 0 || c == 0xC0 || c == 0xC1 || c > 0xF4)
        Fail(ErrorCode::kCorrupt, name + ": invalid UTF-8 at byte " + std::to_string(i));
      for (size_t k = 1; k <= extra; ++k) {
        if (i + k >= text.size() || (static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80)
          Fail(ErrorCode::kCorrupt, name + ": invalid UTF-8 at byte " + std::to_string(i));
      }
      i += extra;
      continue;
    }
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxMetaJsonDepth) {
        Fail(ErrorCode::kLimit, name + ": JSON nesting deeper than kMaxMetaJsonDepth (" +
                                    std::to_string(kMaxMetaJsonDepth) + ")");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

// Builds the ordered_json tree from nlohmann's SAX events. nlohmann's own DOM builder inserts
// every key with ordered_map::operator[], a linear search of the object so far: an object of n
// keys costs n^2/2 string compares (a 15 MB meta.json of 2^20 keys took over 15 minutes; found by
// tests/hardening/caps_test.cpp). Here each key is checked against a hash set (which also
// finds duplicates) and appended to the object's vector directly, so parsing is linear.
class MetaJsonBuilder {
 public:
  explicit MetaJsonBuilder(const std::string& name) : name_(name) {}

  bool null() { return Add(Json(nullptr)); }
  bool boolean(bool b) { return Add(Json(b)); }
  bool number_integer(Json::number_integer_t n) { return Add(Json(n)); }
  bool number_unsigned(Json::number_unsigned_t n) { return Add(Json(n)); }
  // nlohmann reads an integer beyond 64 bits as a double; Python's json reads it exactly, and so
  // do we: its digits travel as a binary value of subtype kBigIntSubtype (the parser makes no
  // binary values of its own).
  bool number_float(Json::number_float_t d, const Json::string_t& token) {
    if (token.find_first_of(".eE") != std::string::npos) return Add(Json(d));
    const size_t digits = token.size() - (token[0] == '-' ? 1 : 0);
    if (digits > kMaxMetaJsonIntDigits) {
      Fail(ErrorCode::kLimit, name_ + ": an integer of " + std::to_string(digits) + " digits, more than " +
                                  std::to_string(kMaxMetaJsonIntDigits) + " (kMaxMetaJsonIntDigits)");
    }
    return Add(BigIntJson(token));
  }
  bool string(Json::string_t& text) { return Add(Json(std::move(text))); }
  bool binary(Json::binary_t& b) { return Add(Json::binary(std::move(b))); }
  bool start_object(std::size_t) { return Open(Json(Json::value_t::object)); }
  bool start_array(std::size_t) { return Open(Json(Json::value_t::array)); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(Json::string_t& k) {
    if (!keys_.back().insert(k).second) Fail(ErrorCode::kCorrupt, name_ + ": duplicate key '" + k + "'");
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) {
    if (e.id == 406) {  // number overflow: beyond a double, so beyond kMaxMetaJsonIntDigits as an integer
      Fail(ErrorCode::kLimit, name_ + ": a number beyond a double's range (integers are read exactly up to " +
                                  std::to_string(kMaxMetaJsonIntDigits) + " digits, kMaxMetaJsonIntDigits)");
    }
    // nlohmann's message names the byte position and the token ("syntax error while parsing ...").
    Fail(ErrorCode::kCorrupt, name_ + ": malformed JSON: " + e.what());
  }

  Json Take() { return std::move(root_); }

 private:
  // Places a finished value in the open container (or as the root); returns where it went.
  Json* Place(Json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json& top = *open_.back();
    if (top.is_array()) {
      top.get_ref<Json::array_t&>().push_back(std::move(value));
      return &top.get_ref<Json::array_t&>().back();
    }
    // Keys were checked in key(): append without ordered_map's linear lookup.
    auto& entries = static_cast<Json::object_t::Container&>(top.get_ref<Json::object_t&>());
    entries.emplace_back(std::move(key_), std::move(value));
    return &entries.back().second;
  }
  bool Add(Json value) {
    Place(std::move(value));
    return true;
  }
  // A container's slot never moves while it is open: only the innermost open container grows.
  bool Open(Json empty) {
    const bool object = empty.is_object();
    open_.push_back(Place(std::move(empty)));
    if (object) keys_.emplace_back();
    return true;
  }
  bool Close() {
    if (open_.back()->is_object()) keys_.pop_back();
    open_.pop_back();
    return true;
  }

  const std::string& name_;
  Json root_;
  std::vector<Json*> open_;
  std::vector<std::unordered_set<std::string>> keys_;
  std::string key_;
};

}  // namespace

Json ParseMetaJson(std::string_view bytes, const std::string& name) {
  if (bytes.size() > kMaxMetaJsonBytes) {
    Fail(ErrorCode::kLimit, name + ": " + std::to_string(bytes.size()) + " bytes exceeds kMaxMetaJsonBytes (" +
                                std::to_string(kMaxMetaJsonBytes) + ")");
  }
  if (bytes.substr(0, 3) == "\xEF\xBB\xBF") bytes.remove_prefix(3);
  PrescanJson(bytes, name);
  MetaJsonBuilder builder(name);
  Json::sax_parse(bytes.begin(), bytes.end(), &builder, nlohmann::detail::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/false);
  return builder.Take();
}

Value* JsonToValue(const Json& root, ValueArena& arena) {
  // Iterative: (json, destination slot) pairs, so depth costs heap, not stack.
  struct Pending {
    const Json* json;
    Value** slot;
  };
  Value* result = nullptr;
  std::vector<Pending> stack{{&root, &result}};
  while (!stack.empty()) {
    Pending p = stack.back();
    stack.pop_back();
    const Json& j = *p.json;
    Value* v = nullptr;
    switch (j.type()) {
      case Json::value_t::null: v = arena.None(); break;
      case Json::value_t::boolean: v = arena.Bool(j.get<bool>()); break;
      case Json::value_t::number_integer: v = arena.Int(j.get<int64_t>()); break;
      case Json::value_t::number_unsigned: {
        uint64_t u = j.get<uint64_t>();
        if (u <= static_cast<uint64_t>(INT64_MAX)) {
          v = arena.Int(static_cast<int64_t>(u));
        } else {
          std::vector<uint8_t> le(9, 0);
          StoreLe(le.data(), u, 8);
          v = arena.BigInt(std::move(le));
        }
        break;
      }
      case Json::value_t::number_float: v = arena.Float(j.get<double>()); break;
      case Json::value_t::binary: {
        const std::string text = BigIntText(j);
        const bool negative = text[0] == '-';
        v = arena.IntFromDecimal(std::string_view(text).substr(negative ? 1 : 0), negative);
        break;
      }
      case Json::value_t::string: v = arena.Str(j.get<std::string>()); break;
      case Json::value_t::array: {
        v = arena.List();
        v->items.assign(j.size(), nullptr);
        for (size_t i = j.size(); i-- > 0;) stack.push_back({&j[i], &v->items[i]});
        break;
      }
      case Json::value_t::object: {
        v = arena.Dict("dict");
        v->entries.reserve(j.size());
        for (auto it = j.begin(); it != j.end(); ++it) v->entries.emplace_back(arena.Str(it.key()), nullptr);
        size_t i = v->entries.size();
        for (auto it = j.end(); it != j.begin();) {
          --it;
          --i;
          stack.push_back({&*it, &v->entries[i].second});
        }
        break;
      }
      default: v = arena.None(); break;  // discarded: never produced by the parser
    }
    *p.slot = v;
  }
  return result;
}

namespace {

// Recursion stays below kMaxMetaJsonDepth. The position inside the value is kept as a trail of
// parts and spelled out only in an error, so a deep value under long keys costs no quadratic
// text; `budget` bounds the nodes one conversion visits (a value shared through the pickle memo
// would otherwise be expanded once per path, exponentially), and each visited node adds at least
// a byte to the JSON, so more than kMaxMetaJsonBytes of them would make a meta.json no reader takes.
class JsonOfValue {
 public:
  explicit JsonOfValue(const std::string& where) : where_(where) {}

  Json Convert(const Value& value, int depth) {
    if (depth > kMaxMetaJsonDepth) {
      Fail(ErrorCode::kLimit, Where() + ": value nested deeper than kMaxMetaJsonDepth (" +
                                  std::to_string(kMaxMetaJsonDepth) + ")");
    }
    if (++visited_ > kMaxMetaJsonBytes) {
      Fail(ErrorCode::kLimit, Where() + ": value larger than kMaxMetaJsonBytes (" + std::to_string(kMaxMetaJsonBytes) +
                                  ") as JSON");
    }
    switch (value.kind) {
      case ValueKind::kNone: return nullptr;
      case ValueKind::kBool: return value.boolean;
      case ValueKind::kInt:
        if (value.is_big_int()) {
          const std::string digits = value.IntToString();
          if (digits.size() - (digits[0] == '-') > kMaxMetaJsonIntDigits) {
            Refuse("an int of " + std::to_string(digits.size()) + " digits, more than trove reads back (" +
                   std::to_string(kMaxMetaJsonIntDigits) + ", kMaxMetaJsonIntDigits),");
          }
          return BigIntJson(digits);
        }
        return value.integer;
      case ValueKind::kFloat:
        if (!std::isfinite(value.real)) Refuse("a non-finite float");
        return value.real;
      case ValueKind::kStr: return value.text;
      case ValueKind::kList: {
        Json arr = Json::array();
        for (size_t i = 0; i < value.items.size(); ++i) {
          trail_.push_back("[" + std::to_string(i) + "]");
          arr.push_back(Convert(*value.items[i], depth + 1));
          trail_.pop_back();
        }
        return arr;
      }
      case ValueKind::kDict: {
        Json obj = Json::object();
        for (const auto& [k, v] : value.entries) {
          if (k->kind != ValueKind::kStr) Refuse("a dict with a non-str key");
          if (obj.contains(k->text)) Refuse("a dict with a repeated key");
          trail_.push_back("." + k->text);
          obj[k->text] = Convert(*v, depth + 1);
          trail_.pop_back();
        }
        return obj;
      }
      default: Refuse(std::string("a value of kind ") + std::string(KindName(value.kind)));
    }
  }

 private:
  std::string Where() const {
    std::string w = where_;
    for (const auto& part : trail_) w += part;
    return w;
  }
  [[noreturn]] void Refuse(const std::string& why) const {
    Fail(ErrorCode::kUnsupported, Where() + ": " + why + " cannot be stored exactly as JSON");
  }

  const std::string& where_;
  std::vector<std::string> trail_;
  uint64_t visited_ = 0;
};

}  // namespace

Json ValueToJson(const Value& value, const std::string& where) { return JsonOfValue(where).Convert(value, 0); }

bool JsonCanHold(const Value& value) {
  try {
    const std::string where;
    JsonOfValue(where).Convert(value, 0);
    return true;
  } catch (const Error&) {
    return false;
  }
}

namespace {

// nlohmann's compact form, with big ints written as their digits. Depth is bounded by
// kMaxMetaJsonDepth (the parser and ValueToJson refuse deeper values).
void DumpWithBigInts(const Json& json, std::string& out) {
  switch (json.type()) {
    case Json::value_t::binary: out += BigIntText(json); return;
    case Json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < json.size(); ++i) {
        if (i) out += ',';
        DumpWithBigInts(json[i], out);
      }
      out += ']';
      return;
    }
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = json.begin(); it != json.end(); ++it) {
        if (!first) out += ',';
        first = false;
        out += Json(it.key()).dump();
        out += ':';
        DumpWithBigInts(*it, out);
      }
      out += '}';
      return;
    }
    default: out += json.dump();
  }
}

bool HoldsBigInt(const Json& json) {
  if (json.is_binary()) return true;
  if (json.is_array() || json.is_object()) {
    for (const auto& child : json)
      if (HoldsBigInt(child)) return true;
  }
  return false;
}

}  // namespace

Json BigIntJson(std::string_view decimal) {
  return Json::binary(std::vector<uint8_t>(decimal.begin(), decimal.end()), kBigIntSubtype);
}

std::string BigIntText(const Json& json) {
  const auto& bytes = json.get_binary();
  if (!bytes.has_subtype() || bytes.subtype() != kBigIntSubtype || bytes.empty()) {
    Fail(ErrorCode::kUnsupported, "a binary JSON value that is not a big int");
  }
  return std::string(bytes.begin(), bytes.end());
}

std::string DumpCompact(const Json& json) {
  try {
    if (!HoldsBigInt(json)) return json.dump();
    std::string out;
    DumpWithBigInts(json, out);
    return out;
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorCode::kUnsupported, std::string("cannot write JSON: ") + e.what());
  }
}

}  // namespace trove::tensordict
