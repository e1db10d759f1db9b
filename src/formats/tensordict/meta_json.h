// formats/tensordict/meta_json.h: parsing meta.json safely, and JSON <-> Value conversion.
//
// ParseMetaJson is the only place meta.json bytes are parsed: it bounds the size and nesting
// depth before nlohmann sees the text, refuses duplicate keys (Python keeps the last one, other
// readers the first: ambiguous), accepts a UTF-8 BOM (Python's json.loads on bytes does), and
// reports every problem as Error(kCorrupt/kLimit) naming the file. Key order is kept
// (ordered_json), because meta.json's order is the tensordict's key order.
// Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "trove/value.h"

namespace trove::tensordict {

using Json = nlohmann::ordered_json;

// Caps (reasons):
// A meta.json lists one level's keys (~100 bytes each) plus non-tensor values; 64 MiB holds
// ~500k keys, far beyond a real tensordict, and bounds what one file can make us allocate.
inline constexpr uint64_t kMaxMetaJsonBytes = uint64_t{64} << 20;
// Nesting inside one meta.json: leaf entries are 3 deep; non-tensor data (nested lists of a
// NonTensorStack, dicts) rarely exceed 10. 256 keeps parsing and Value conversion shallow.
inline constexpr int kMaxMetaJsonDepth = 256;
// Digits of one integer read or written exactly: nlohmann's lexer converts every number token
// with strtod and rejects one beyond a double's range (about 1.8e308), so 308 digits is what we
// can read back; Python's json would take up to 4300 (its int<->str limit).
inline constexpr size_t kMaxMetaJsonIntDigits = 308;

// An integer beyond 64 bits, which nlohmann's types cannot hold, is kept in a Json tree as a
// binary value of this subtype holding its decimal text ("-123..."); DumpCompact writes it as
// the number. No other binary values occur.
inline constexpr std::uint64_t kBigIntSubtype = 0x42;
Json BigIntJson(std::string_view decimal);
std::string BigIntText(const Json& big_int);

// Parses one meta.json. `name` (path or entry name) prefixes errors.
Json ParseMetaJson(std::string_view bytes, const std::string& name);

// A JSON value as a Value tree: null/bool/int/float/str, arrays as kList, objects as kDict
// ("dict") with str keys. Integers beyond int64 become big ints (exact, up to
// kMaxMetaJsonIntDigits digits).
Value* JsonToValue(const Json& json, ValueArena& arena);

// The inverse, for values JSON holds exactly: None, bool, int (any size), finite float, str,
// list, dict with str keys (any dict type_name). Anything else (tuple, bytes, complex, set,
// tensor, object, NaN) throws Error(kUnsupported) naming `where`.
Json ValueToJson(const Value& value, const std::string& where);
// True when ValueToJson would succeed (no exception), bounded by kMaxMetaJsonDepth.
bool JsonCanHold(const Value& value);

// Compact serialisation as orjson writes it (no spaces, raw UTF-8); big ints as their digits.
std::string DumpCompact(const Json& json);

}  // namespace trove::tensordict
