// The .npy preamble and the header's dict literal. The grammar is the subset of Python literals
// numpy's format writes (numpy/lib/format.py, header_data_from_array_1_0 and dtype.descr):
//   dict  := '{' [entry (',' entry)* [',']] '}'          entry := literal ':' literal
//   tuple := '(' [literal ',' (literal ',')* [literal]] ')'   ("(3,)", "(2, 3)", "()")
//   list  := '[' [literal (',' literal)* [',']] ']'
//   str   := ['u' | 'b'] quote chars quote   (\\ \' \" \n \t \r \0 \xNN escapes)
//   int   := ['-'] decimal digits ['L']      (the 'L' of Python 2's longs: versions 1.0 and 2.0)
//   True | False | None
// with spaces, tabs and newlines between tokens. Anything else is refused, never evaluated.
#include "formats/npy/npy_header.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <set>

#include "core/little_endian.h"
#include "trove/error.h"

namespace trove {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr uint64_t kMagicBytes = 6;
// numpy pads the header so that the array's data starts at a multiple of this (ARRAY_ALIGN).
constexpr uint64_t kNpyAlign = 64;

struct LiteralEntry;

struct Literal {
  enum class Kind : uint8_t { kStr, kInt, kBool, kNone, kTuple, kList, kDict };
  Kind kind = Kind::kNone;
  uint64_t offset = 0;  // in the header
  std::string text;     // kStr: the string; kInt: the decimal digits as written (sign included)
  bool boolean = false;
  std::vector<Literal> items;                       // kTuple, kList
  // kDict. A struct of its own, not a std::pair: a pair of an incomplete type is not allowed
  // where a vector of one is (clang with libstdc++ refuses it).
  std::vector<LiteralEntry> entries;
};

struct LiteralEntry {
  Literal key, value;
};

std::string_view KindText(Literal::Kind kind) {
  switch (kind) {
    case Literal::Kind::kStr: return "a string";
    case Literal::Kind::kInt: return "an integer";
    case Literal::Kind::kBool: return "a boolean";
    case Literal::Kind::kNone: return "None";
    case Literal::Kind::kTuple: return "a tuple";
    case Literal::Kind::kList: return "a list";
    case Literal::Kind::kDict: return "a dict";
  }
  return "a value";
}

class LiteralParser {
 public:
  LiteralParser(std::string_view text, bool python2_longs, uint64_t base)
      : s_(text), python2_longs_(python2_longs), base_(base) {}

  Literal ParseWhole() {
    Literal v = Parse(0);
    SkipSpace();
    if (pos_ != s_.size()) Bad("text after the header's dict");
    return v;
  }

 private:
  [[noreturn]] void Bad(const std::string& why) const {
    Fail(ErrorCode::kCorrupt, "header @ " + std::to_string(base_ + pos_) + ": " + why);
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  char Peek() {
    SkipSpace();
    if (pos_ >= s_.size()) Bad("the header ends inside its dict (unterminated)");
    return s_[pos_];
  }

  Literal Parse(int depth) {
    if (depth > kMaxNpyLiteralDepth) {
      Bad("brackets nested deeper than " + std::to_string(kMaxNpyLiteralDepth) + " (kMaxNpyLiteralDepth)");
    }
    const char c = Peek();
    Literal v;
    v.offset = base_ + pos_;
    if (c == '{') {
      ++pos_;
      v.kind = Literal::Kind::kDict;
      while (!Eat('}')) {
        Literal key = Parse(depth + 1);
        if (!Eat(':')) Bad("expected ':' after a dict key");
        Literal value = Parse(depth + 1);
        v.entries.push_back(LiteralEntry{std::move(key), std::move(value)});
        if (Eat('}')) break;
        if (!Eat(',')) Bad("expected ',' or '}' in the dict");
      }
      return v;
    }
    if (c == '(' || c == '[') {
      const char close = c == '(' ? ')' : ']';
      ++pos_;
      v.kind = c == '(' ? Literal::Kind::kTuple : Literal::Kind::kList;
      bool comma = false;
      while (!Eat(close)) {
        v.items.push_back(Parse(depth + 1));
        comma = false;
        if (Eat(close)) break;
        if (!Eat(',')) Bad(std::string("expected ',' or '") + close + "'");
        comma = true;
      }
      // "(3)" is the int 3 in Python, not a tuple: numpy writes "(3,)".
      if (v.kind == Literal::Kind::kTuple && v.items.size() == 1 && !comma) return std::move(v.items[0]);
      return v;
    }
    if (c == '\'' || c == '"' || ((c == 'u' || c == 'b') && pos_ + 1 < s_.size() && (s_[pos_ + 1] == '\'' || s_[pos_ + 1] == '"'))) {
      if (c == 'u' || c == 'b') ++pos_;
      v.kind = Literal::Kind::kStr;
      v.text = String();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Literal::Kind::kInt;
      const size_t start = pos_;
      if (c == '-') ++pos_;
      const size_t digits = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == digits) Bad("'-' without digits");
      if (pos_ - digits > 1 && s_[digits] == '0') Bad("an integer with a leading zero (Python refuses it)");
      v.text = std::string(s_.substr(start, pos_ - start));
      if (pos_ < s_.size() && s_[pos_] == 'L' && python2_longs_) ++pos_;  // Python 2's long suffix
      if (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' || s_[pos_] == '_')) {
        Bad("not a decimal integer");
      }
      return v;
    }
    for (std::string_view word : {"True", "False", "None"}) {
      if (s_.substr(pos_, word.size()) == word) {
        const size_t end = pos_ + word.size();
        if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) break;
        pos_ = end;
        v.kind = word == "None" ? Literal::Kind::kNone : Literal::Kind::kBool;
        v.boolean = word == "True";
        return v;
      }
    }
    Bad("unexpected character '" + std::string(1, c) + "' (not a literal numpy writes)");
  }

  std::string String() {
    const char quote = s_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) Bad("unterminated string");
      const char c = s_[pos_++];
      if (c == quote) return out;
      if (c == '\n') Bad("a line break inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) Bad("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '\\': case '\'': case '"': out += e; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case 'x': {
          auto hex = [&](char h) -> int {
            if (h >= '0' && h <= '9') return h - '0';
            if (h >= 'a' && h <= 'f') return h - 'a' + 10;
            if (h >= 'A' && h <= 'F') return h - 'A' + 10;
            Bad("a \\x escape without two hex digits");
          };
          if (pos_ + 2 > s_.size()) Bad("a \\x escape without two hex digits");
          out += static_cast<char>(hex(s_[pos_]) * 16 + hex(s_[pos_ + 1]));
          pos_ += 2;
          break;
        }
        default: {
          std::string why = "an escape '\\";
          why += e;
          Bad(why + "' numpy does not write");
        }
      }
    }
  }

  std::string_view s_;
  bool python2_longs_;
  uint64_t base_;
  size_t pos_ = 0;
};

[[noreturn]] void BadField(const Literal& v, const std::string& why) {
  Fail(ErrorCode::kCorrupt, "header @ " + std::to_string(v.offset) + ": " + why);
}

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

// A structured dtype's field names, for the refusal: "'x', 'y'".
std::string FieldNames(const Literal& descr) {
  std::string out;
  size_t listed = 0;
  for (const Literal& field : descr.items) {
    if (field.kind != Literal::Kind::kTuple || field.items.empty() || field.items[0].kind != Literal::Kind::kStr) continue;
    if (listed == 8) {
      out += ", ...";
      break;
    }
    out += (listed++ ? ", " : "") + Quoted(field.items[0].text);
  }
  return out.empty() ? "(unnamed)" : out;
}

// Whether a structured descr has an object field anywhere ('O' after its byte order).
bool HoldsObjects(const Literal& v) {
  if (v.kind == Literal::Kind::kStr) {
    return v.text.size() >= 2 && std::string_view("<>|=").find(v.text[0]) != std::string_view::npos && v.text[1] == 'O';
  }
  for (const Literal& item : v.items) {
    if (HoldsObjects(item)) return true;
  }
  return false;
}

void ParseDescr(const Literal& v, NpyHeader& h) {
  if (v.kind == Literal::Kind::kList) {
    if (HoldsObjects(v)) {
      // numpy pickles any array whose dtype holds objects, records included.
      h.kind = NpyKind::kObject;
      h.descr = "a structured dtype with object fields (" + FieldNames(v) + ")";
      return;
    }
    Fail(ErrorCode::kUnsupported, "a structured dtype (fields " + FieldNames(v) +
                                      "): trove reads arrays of one numeric type, not records");
  }
  if (v.kind == Literal::Kind::kTuple) {
    Fail(ErrorCode::kUnsupported, "a subarray dtype as the array's type: not an array of one numeric type");
  }
  if (v.kind != Literal::Kind::kStr) BadField(v, "'descr' is " + std::string(KindText(v.kind)) + ", not a dtype string");
  const std::string& d = v.text;
  h.descr = d;
  if (d.empty()) BadField(v, "'descr' is empty");
  const char order = d[0];
  if (order != '<' && order != '>' && order != '|') {
    Fail(ErrorCode::kUnsupported, "dtype '" + d + "' has no byte order ('<', '>' or '|'), as numpy never writes");
  }
  const std::string type = d.substr(1);
  if (type == "O" || type == "O4" || type == "O8") {
    h.kind = NpyKind::kObject;
    return;
  }
  if ((type[0] == 'U' || type[0] == 'S') && type.size() >= 2 && type.size() <= 10 &&
      type.find_first_not_of("0123456789", 1) == std::string::npos) {
    const uint64_t n = std::stoull(type.substr(1));
    h.kind = type[0] == 'U' ? NpyKind::kUnicode : NpyKind::kBytes;
    h.item_bytes = type[0] == 'U' ? n * 4 : n;
    h.byte_order = order == '>' ? ByteOrder::kBig : ByteOrder::kLittle;
    return;
  }
  struct Known {
    std::string_view code;
    DType dtype;
  };
  static constexpr Known kKnown[] = {
      {"b1", DType::kBool},     {"i1", DType::kInt8},     {"i2", DType::kInt16},    {"i4", DType::kInt32},
      {"i8", DType::kInt64},    {"u1", DType::kUInt8},    {"u2", DType::kUInt16},   {"u4", DType::kUInt32},
      {"u8", DType::kUInt64},   {"f2", DType::kFloat16},  {"f4", DType::kFloat32},  {"f8", DType::kFloat64},
      {"c8", DType::kComplex64}, {"c16", DType::kComplex128},
  };
  for (const Known& k : kKnown) {
    if (type != k.code) continue;
    h.dtype = k.dtype;
    h.item_bytes = ElementSize(k.dtype);
    const bool one_byte = ElementSize(k.dtype) == 1;
    if (order == '|' && !one_byte) {
      Fail(ErrorCode::kUnsupported, "dtype '" + d + "': byte order '|' (not applicable) for a type of several bytes");
    }
    h.byte_order = order == '>' && !one_byte ? ByteOrder::kBig : ByteOrder::kLittle;
    return;
  }
  Fail(ErrorCode::kUnsupported, "numpy dtype '" + d + "' has no trove type (trove reads b1, i1-i8, u1-u8, f2, f4, f8, c8, c16, and U/S strings as values)");
}

}  // namespace

NpyPreamble ReadNpyPreamble(const uint8_t* first, uint64_t available, uint64_t total_size) {
  if (available < kMagicBytes + 2 || std::memcmp(first, kMagic, kMagicBytes) != 0) {
    if (total_size < kMagicBytes + 2) Fail(ErrorCode::kCorrupt, "too short for an .npy file (" + std::to_string(total_size) + " bytes)");
    Fail(ErrorCode::kCorrupt, "not an .npy array (no \\x93NUMPY magic)");
  }
  NpyPreamble p;
  p.major = first[6];
  p.minor = first[7];
  if ((p.major != 1 && p.major != 2 && p.major != 3) || p.minor != 0) {
    Fail(ErrorCode::kUnsupported, "format version " + std::to_string(p.major) + "." + std::to_string(p.minor) +
                                      " (trove reads 1.0, 2.0 and 3.0)");
  }
  const uint64_t length_bytes = p.major == 1 ? 2 : 4;
  p.header_offset = 8 + length_bytes;
  if (available < p.header_offset) {
    Fail(ErrorCode::kCorrupt, "truncated in the header length: " + std::to_string(total_size) + " bytes");
  }
  p.header_length = LoadLe(first + 8, static_cast<unsigned>(length_bytes));
  if (p.header_length > kMaxNpyHeaderBytes) {
    Fail(ErrorCode::kLimit, "header length " + std::to_string(p.header_length) + " exceeds the " +
                                std::to_string(kMaxNpyHeaderBytes) + "-byte cap (kMaxNpyHeaderBytes, numpy.load's own)");
  }
  if (p.header_length > total_size - p.header_offset) {
    Fail(ErrorCode::kCorrupt, "header length " + std::to_string(p.header_length) + " runs past the end (" +
                                  std::to_string(total_size) + " bytes)");
  }
  return p;
}

NpyHeader ParseNpyHeader(const NpyPreamble& preamble, std::string_view header) {
  NpyHeader h;
  h.preamble = preamble;
  // Versions 1.0 and 2.0 are latin-1, 3.0 UTF-8: the literal's syntax is ASCII either way, and
  // bytes above 127 can only be inside strings (field names), which are only quoted back.
  const Literal dict = LiteralParser(header, preamble.major <= 2, preamble.header_offset).ParseWhole();
  if (dict.kind != Literal::Kind::kDict) BadField(dict, "the header is " + std::string(KindText(dict.kind)) + ", not a dict");
  const Literal *descr = nullptr, *fortran = nullptr, *shape = nullptr;
  for (const auto& [key, value] : dict.entries) {
    if (key.kind != Literal::Kind::kStr) BadField(key, "a header key is " + std::string(KindText(key.kind)) + ", not a string");
    const Literal** slot = key.text == "descr" ? &descr : key.text == "fortran_order" ? &fortran : key.text == "shape" ? &shape : nullptr;
    if (slot == nullptr) BadField(key, "unknown header key '" + key.text + "' (numpy.load refuses it)");
    // Python keeps the last of two equal keys: one reader could see the first, another the last.
    if (*slot != nullptr) BadField(key, "the key '" + key.text + "' appears twice");
    *slot = &value;
  }
  if (!descr || !fortran || !shape) {
    Fail(ErrorCode::kCorrupt, std::string("header: the key '") + (!descr ? "descr" : !fortran ? "fortran_order" : "shape") + "' is missing");
  }
  if (fortran->kind != Literal::Kind::kBool) BadField(*fortran, "'fortran_order' is " + std::string(KindText(fortran->kind)) + ", not True or False");
  h.fortran_order = fortran->boolean;
  if (shape->kind != Literal::Kind::kTuple) BadField(*shape, "'shape' is " + std::string(KindText(shape->kind)) + ", not a tuple");
  if (shape->items.size() > kMaxTensorRank) {
    Fail(ErrorCode::kLimit, "shape has " + std::to_string(shape->items.size()) + " dimensions, more than " +
                                std::to_string(kMaxTensorRank) + " (kMaxTensorRank)");
  }
  for (const Literal& d : shape->items) {
    if (d.kind != Literal::Kind::kInt) BadField(d, "a shape entry is " + std::string(KindText(d.kind)) + ", not an integer");
    if (d.text[0] == '-') BadField(d, "a negative dimension (" + d.text + ")");
    // Each dimension fits in 63 bits (19 digits hold at most 9999999999999999999 > 2^63).
    if (d.text.size() > 19) BadField(d, "dimension " + d.text + " exceeds 2^63 - 1");
    const uint64_t n = std::stoull(d.text);
    if (n > static_cast<uint64_t>(INT64_MAX)) BadField(d, "dimension " + d.text + " exceeds 2^63 - 1");
    h.shape.push_back(static_cast<int64_t>(n));
  }
  ParseDescr(*descr, h);
  if (h.kind != NpyKind::kObject) {
    uint64_t elements = 1;
    for (int64_t d : h.shape) {
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements) || elements > static_cast<uint64_t>(INT64_MAX)) {
        Fail(ErrorCode::kCorrupt, "shape " + ShapeString(h.shape) + ": the element count overflows 63 bits");
      }
    }
    h.elements = elements;
    if (__builtin_mul_overflow(elements, h.item_bytes, &h.data_bytes)) {
      Fail(ErrorCode::kCorrupt, "shape " + ShapeString(h.shape) + " of " + h.descr + ": the byte size overflows 64 bits");
    }
  }
  return h;
}

NpyHeader ReadNpyHeader(const SharedBytes& bytes) {
  const uint64_t size = bytes.size();
  if (!bytes.deferred()) {
    const NpyPreamble p = ReadNpyPreamble(bytes.data(), std::min(size, kNpyPreambleBytes), size);
    return ParseNpyHeader(p, std::string_view(reinterpret_cast<const char*>(bytes.data()) + p.header_offset, p.header_length));
  }
  SharedBytes::Reader reader(bytes);
  uint8_t first[kNpyPreambleBytes] = {};
  const uint64_t n = std::min(size, kNpyPreambleBytes);
  reader.Read(first, n);
  const NpyPreamble p = ReadNpyPreamble(first, n, size);
  std::string header(p.header_length, '\0');
  const uint64_t copied = std::min(n - p.header_offset, p.header_length);  // read with the preamble
  std::memcpy(header.data(), first + p.header_offset, copied);
  reader.Read(reinterpret_cast<uint8_t*>(header.data()) + copied, p.header_length - copied);
  return ParseNpyHeader(p, header);
}

std::optional<std::string> NpyDescrOf(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "|b1";
    case DType::kInt8: return "|i1";
    case DType::kUInt8: return "|u1";
    case DType::kInt16: return "<i2";
    case DType::kInt32: return "<i4";
    case DType::kInt64: return "<i8";
    case DType::kUInt16: return "<u2";
    case DType::kUInt32: return "<u4";
    case DType::kUInt64: return "<u8";
    case DType::kFloat16: return "<f2";
    case DType::kFloat32: return "<f4";
    case DType::kFloat64: return "<f8";
    case DType::kComplex64: return "<c8";
    case DType::kComplex128: return "<c16";
    default: return std::nullopt;
  }
}

std::string FormatNpyHeader(std::string_view descr, const std::vector<int64_t>& shape) {
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dict += ',';
  dict += "), }";
  // Version 1.0 while the header fits its 2-byte length, as numpy chooses.
  const bool v1 = dict.size() + 1 + 10 + kNpyAlign <= 65535;
  const uint64_t prefix = v1 ? 10 : 12;
  const uint64_t total = (prefix + dict.size() + 1 + kNpyAlign - 1) / kNpyAlign * kNpyAlign;
  dict.resize(total - prefix - 1, ' ');
  dict += '\n';
  std::string out(kMagic, kMagicBytes);
  out += static_cast<char>(v1 ? 1 : 2);
  out += '\0';
  char length[4];
  StoreLe(length, dict.size(), v1 ? 2 : 4);
  out.append(length, v1 ? 2 : 4);
  return out + dict;
}

}  // namespace trove
