// cli/json_output.h: every command's --json output, one schema (docs/json.md).
//
// Each command prints objects that start with the envelope {"schema_version", "command"}; values
// of a file (the value tree, cat's values, a scan's call arguments, a diff's changed values) go
// through ValueJson, whose tags ("$tuple", "$complex", "$int", "$float", ...) keep apart what
// plain JSON would confuse. DumpJson is the only serializer: it writes every float through
// core/float_text.h (the same text the commands print for people), every integer beyond
// kMaxExactJsonInteger as {"$int": "<decimal>"} and every non-finite float as
// {"$float": "nan"|"inf"|"-inf"}, in every field, so no reader (jq, JavaScript) rounds a number
// or chokes on NaN. Stateless functions; thread-safe. JsonObjectWriter is used from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "trove/error.h"
#include "trove/value.h"

namespace trove::cli {

using Json = nlohmann::ordered_json;

// Bumped when a field changes meaning or goes away; new fields do not bump it.
inline constexpr int kJsonSchemaVersion = 1;
// 2^53 - 1: the largest integer an IEEE double (JavaScript's numbers, jq's) holds exactly, with
// every integer below it.
inline constexpr uint64_t kMaxExactJsonInteger = (uint64_t{1} << 53) - 1;
// Bytes values shown whole in outputs that are bounded (info's value tree, scan's call
// arguments); longer ones show this many and their length. `cat --json` shows every byte.
inline constexpr size_t kMaxBoundedJsonBytes = 256;

// {"schema_version": kJsonSchemaVersion, "command": command}: what every top-level object starts with.
Json Envelope(std::string_view command);

// What a command that was given --json prints on stdout when it fails, so that a script parsing
// stdout reads why rather than nothing: the envelope and `error`: `code` (ErrorCodeName), `message`
// (the whole text, as stderr's line has it), `reason`, `file`, `entry`, `offset` and `spec_code`
// (the format specification's error number: 9002 for .psk.d's E9002), each null when none.
Json ErrorJson(std::string_view command, const Error& error);
// That `error` object alone: what verify and scan put in place of a path's report when the path
// cannot be read at all (the other paths are still checked).
Json ErrorFieldsJson(const Error& error);

struct ValueJsonLimits {
  size_t nodes = 10000;                   // nodes encoded; the rest become {"$elided": true}
  size_t bytes = kMaxBoundedJsonBytes;    // SIZE_MAX: bytes values whole
};
// A value of a file in the tagged encoding of docs/json.md (one case per ValueKind).
Json ValueJson(const Value* v, const ValueJsonLimits& limits = {});

// The text DumpJson writes for numbers, for output streamed without a Json tree (cat's data).
void AppendJsonFloat(double value, std::string& out);
void AppendJsonInt(int64_t value, std::string& out);
void AppendJsonUInt(uint64_t value, std::string& out);
// A JSON string literal; invalid UTF-8 becomes U+FFFD.
void AppendJsonString(std::string_view text, std::string& out);

// indent >= 0: nlohmann's dump(indent) layout; < 0: compact (one line).
std::string DumpJson(const Json& j, int indent = 2);
// DumpJson(j, 2) and a newline.
void PrintJson(std::ostream& out, const Json& j);

// Writes one JSON object member by member exactly as DumpJson(j, 2) writes it whole; an array
// member is written element by element, so that no more than one element is ever held.
class JsonObjectWriter {
 public:
  explicit JsonObjectWriter(std::ostream& out) : out_(out) { out_ << '{'; }
  void Member(const std::string& key, const Json& value);
  void BeginArray(const std::string& key);
  void Element(const Json& value);
  void EndArray();
  void End();

 private:
  void Key(const std::string& key);
  std::ostream& out_;
  size_t members_ = 0;
  size_t elements_ = 0;
};

}  // namespace trove::cli
