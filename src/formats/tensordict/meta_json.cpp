#include "formats/tensordict/meta_json.h"

#include <cmath>
#include <unordered_set>
#include <vector>

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

}  // namespace

Json ParseMetaJson(std::string_view bytes, const std::string& name) {
  if (bytes.size() > kMaxMetaJsonBytes) {
    Fail(ErrorCode::kLimit, name + ": " + std::to_string(bytes.size()) + " bytes exceeds kMaxMetaJsonBytes (" +
                                std::to_string(kMaxMetaJsonBytes) + ")");
  }
  if (bytes.substr(0, 3) == "\xEF\xBB\xBF") bytes.remove_prefix(3);
  PrescanJson(bytes, name);
  std::vector<std::unordered_set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int, Json::parse_event_t event, Json& parsed) -> bool {
    switch (event) {
      case Json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get_ref<const std::string&>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default: break;
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(bytes.begin(), bytes.end(), callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message names the byte position and the token ("syntax error while parsing ...").
    Fail(ErrorCode::kCorrupt, name + ": malformed JSON: " + e.what());
  }
  if (!duplicate.empty()) Fail(ErrorCode::kCorrupt, name + ": duplicate key '" + duplicate + "'");
  return json;
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
          for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(u >> (8 * i));
          v = arena.BigInt(std::move(le));
        }
        break;
      }
      case Json::value_t::number_float: v = arena.Float(j.get<double>()); break;
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
      default: v = arena.None(); break;  // binary / discarded: never produced by the parser
    }
    *p.slot = v;
  }
  return result;
}

namespace {

Json ValueToJsonAt(const Value& value, const std::string& where, int depth) {
  if (depth > kMaxMetaJsonDepth) {
    Fail(ErrorCode::kLimit, where + ": value nested deeper than kMaxMetaJsonDepth (" +
                                std::to_string(kMaxMetaJsonDepth) + ")");
  }
  auto refuse = [&](const std::string& why) -> Json {
    Fail(ErrorCode::kUnsupported, where + ": " + why + " cannot be stored exactly as JSON");
  };
  switch (value.kind) {
    case ValueKind::kNone: return nullptr;
    case ValueKind::kBool: return value.boolean;
    case ValueKind::kInt:
      if (value.is_big_int()) return refuse("an int beyond 64 bits (" + value.IntToString() + ")");
      return value.integer;
    case ValueKind::kFloat:
      if (!std::isfinite(value.real)) return refuse("a non-finite float");
      return value.real;
    case ValueKind::kStr: return value.text;
    case ValueKind::kList: {
      Json arr = Json::array();
      for (size_t i = 0; i < value.items.size(); ++i)
        arr.push_back(ValueToJsonAt(*value.items[i], where + "[" + std::to_string(i) + "]", depth + 1));
      return arr;
    }
    case ValueKind::kDict: {
      Json obj = Json::object();
      for (const auto& [k, v] : value.entries) {
        if (k->kind != ValueKind::kStr) return refuse("a dict with a non-str key");
        if (obj.contains(k->text)) return refuse("a dict with a repeated key");
        obj[k->text] = ValueToJsonAt(*v, where + "." + k->text, depth + 1);
      }
      return obj;
    }
    default: return refuse(std::string("a value of kind ") + std::string(KindName(value.kind)));
  }
}

}  // namespace

Json ValueToJson(const Value& value, const std::string& where) { return ValueToJsonAt(value, where, 0); }

bool JsonCanHold(const Value& value) {
  try {
    ValueToJsonAt(value, "", 0);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::string DumpCompact(const Json& json) {
  try {
    return json.dump();
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorCode::kUnsupported, std::string("cannot write JSON: ") + e.what());
  }
}

}  // namespace trove::tensordict
