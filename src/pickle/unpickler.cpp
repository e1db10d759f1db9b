// The pickle virtual machine: one loop over opcodes, an explicit stack and mark stack, a hashed
// memo. Nothing here recurses on the data, so any nesting depth costs heap, never C++ stack.
// Errors are thrown without position and get "@ <opcode offset>: " added in one place (Load).
#include "trove/unpickler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/byte_reader.h"
#include "pickle/opcodes.h"
#include "pickle/py_keys.h"
#include "pickle/utf8.h"

namespace trove {
namespace {

namespace op = pickle_op;

std::string Hex2(uint8_t b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  return {'0', 'x', kDigits[b >> 4], kDigits[b & 15]};
}

std::string KindText(const Value* v) {
  std::string s(KindName(v->kind));
  if ((v->kind == ValueKind::kObject || v->kind == ValueKind::kGlobal) && !v->type_name.empty()) {
    s += " '" + v->type_name + "'";
  }
  return s;
}

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The names Python 3 maps when it reads a protocol 0-2 pickle written by Python 2
// (fix_imports): the data-relevant part of _compat_pickle, so reports show the name a Python 3
// reader would resolve.
void RenamePython2(std::string& module, std::string& name) {
  struct NameMap { std::string_view module, name, new_module, new_name; };
  static constexpr NameMap kNames[] = {
      {"__builtin__", "xrange", "builtins", "range"},    {"__builtin__", "unicode", "builtins", "str"},
      {"__builtin__", "basestring", "builtins", "str"},  {"__builtin__", "long", "builtins", "int"},
      {"__builtin__", "unichr", "builtins", "chr"},      {"__builtin__", "reduce", "functools", "reduce"},
      {"__builtin__", "intern", "sys", "intern"},        {"itertools", "izip", "builtins", "zip"},
      {"itertools", "imap", "builtins", "map"},          {"itertools", "ifilter", "builtins", "filter"},
      {"UserDict", "UserDict", "collections", "UserDict"}, {"UserList", "UserList", "collections", "UserList"},
      {"UserString", "UserString", "collections", "UserString"},
  };
  for (const auto& m : kNames) {
    if (module == m.module && name == m.name) {
      module = m.new_module;
      name = m.new_name;
      return;
    }
  }
  struct ModuleMap { std::string_view module, new_module; };
  static constexpr ModuleMap kModules[] = {
      {"__builtin__", "builtins"}, {"copy_reg", "copyreg"}, {"exceptions", "builtins"},
      {"cPickle", "pickle"},       {"Queue", "queue"},      {"repr", "reprlib"},
      {"commands", "subprocess"},  {"cStringIO", "io"},     {"StringIO", "io"},
  };
  for (const auto& m : kModules) {
    if (module == m.module) {
      module = m.new_module;
      return;
    }
  }
}

class Machine {
 public:
  Machine(const uint8_t* data, uint64_t size, uint64_t base, ValueArena& arena, PickleResolver& resolver,
          std::vector<PickleGlobal>& globals, int& protocol)
      : in_(data, size, base), arena_(arena), resolver_(resolver), globals_(globals), protocol_(protocol),
        values_start_(arena.size()) {}

  Value* Run(uint64_t& consumed) {
    try {
      return Loop(consumed);
    } catch (Error& e) {
      if (e.message().rfind("@ ", 0) != 0) e.AddContext("@ " + std::to_string(op_offset_));
      throw;
    }
  }

 private:
  [[noreturn]] void Fail(ErrorCode code, const std::string& reason) const { throw Error(code, reason); }
  std::string OpName() const { return std::string(op::Name(op_)); }

  // ---- stack ----
  size_t Fence() const { return marks_.empty() ? 0 : marks_.back(); }
  void CheckDepth() const {
    if (stack_.size() + marks_.size() >= kMaxPickleStackDepth) {
      Fail(ErrorCode::kLimit, "more than " + std::to_string(kMaxPickleStackDepth) +
                                  " stack entries and marks (kMaxPickleStackDepth)");
    }
  }
  void Push(Value* v) {
    CheckDepth();
    stack_.push_back(v);
  }
  Value* Top() const {
    if (stack_.size() <= Fence()) Fail(ErrorCode::kCorrupt, "stack underflow in " + OpName());
    return stack_.back();
  }
  Value* Pop() {
    Value* v = Top();
    stack_.pop_back();
    return v;
  }
  std::vector<Value*> PopMark() {
    if (marks_.empty()) Fail(ErrorCode::kCorrupt, OpName() + " without a MARK");
    size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  // ---- budgets ----
  void AddReferences(uint64_t n) {
    references_ += n;
    if (references_ > kMaxPickleReferences) {
      Fail(ErrorCode::kLimit, "more than " + std::to_string(kMaxPickleReferences) +
                                  " container slots (kMaxPickleReferences)");
    }
  }
  void CheckValues() const {
    if (arena_.size() - values_start_ > kMaxPickleValues) {
      Fail(ErrorCode::kLimit, "more than " + std::to_string(kMaxPickleValues) + " values (kMaxPickleValues)");
    }
  }

  // ---- memo ----
  // Picklers number memo entries 0, 1, 2...: those live in a vector. Any other index (a file can
  // name 0xFFFFFFFF first) goes to a hash map, so memory follows the entry count, never an index.
  Value** MemoSlot(uint64_t index) {
    if (index < memo_dense_.size()) return memo_dense_[index] ? &memo_dense_[index] : nullptr;
    auto it = memo_sparse_.find(index);
    return it == memo_sparse_.end() ? nullptr : &it->second;
  }
  void Put(uint64_t index) {
    Value* v = Top();
    if (Value** slot = MemoSlot(index)) {
      *slot = v;
      return;
    }
    if (memo_size_ >= kMaxPickleMemoEntries) {
      Fail(ErrorCode::kLimit, "more than " + std::to_string(kMaxPickleMemoEntries) +
                                  " memo entries (kMaxPickleMemoEntries)");
    }
    ++memo_size_;
    if (index < memo_dense_.size()) {
      memo_dense_[index] = v;
    } else if (index == memo_dense_.size()) {
      memo_dense_.push_back(v);
    } else {
      memo_sparse_.emplace(index, v);
    }
  }
  void Get(uint64_t index) {
    Value** slot = MemoSlot(index);
    if (slot == nullptr) Fail(ErrorCode::kCorrupt, OpName() + " of memo index " + std::to_string(index) + ", which is not set");
    Push(*slot);
  }
  uint64_t DecimalIndex(std::string_view line) const {
    std::string_view t = Trim(line);
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
      Fail(ErrorCode::kCorrupt, OpName() + " has a bad memo index '" + std::string(t.substr(0, 40)) + "'");
    }
    return v;
  }

  // ---- resolver calls ----
  Value* Checked(Value* v, const char* what) const {
    if (v == nullptr) Fail(ErrorCode::kCorrupt, std::string("resolver returned no value for ") + what);
    return v;
  }
  Value* ResolveGlobal(std::string module, std::string name) {
    if (current_protocol_ < 3) RenamePython2(module, name);
    globals_.push_back(PickleGlobal{module, name, op_offset_, false});
    bool allowed = true;
    Value* v = Checked(resolver_.Global(module, name, allowed, arena_), "a global");
    globals_.back().allowed = allowed;
    return v;
  }
  Value* Call(Value* callable, Value* args) {
    if (args->kind != ValueKind::kTuple) {
      Fail(ErrorCode::kCorrupt, OpName() + " arguments must be a tuple, not " + KindText(args));
    }
    Value* v = Checked(resolver_.Call(callable, args, arena_), "a call");
    AddReferences(v->items.size() + v->entries.size());
    return v;
  }
  std::string ReadUtf8Line(const char* what) {
    std::string_view line = in_.Line();
    if (pickle_utf8::FirstInvalid(line) != pickle_utf8::kValid) {
      Fail(ErrorCode::kCorrupt, OpName() + " " + what + " is not valid UTF-8");
    }
    return std::string(line);
  }

  // ---- containers ----
  bool ObjectTarget(const Value* target) const {
    return target->kind == ValueKind::kObject && resolver_.permissive();
  }
  [[noreturn]] void WrongTarget(const Value* target, const char* expected) const {
    Fail(ErrorCode::kRefused, OpName() + " onto a " + KindText(target) + " (only a " + expected + " takes it)");
  }
  void SetItems(const std::vector<Value*>& items, size_t first) {
    if ((items.size() - first) % 2 != 0) Fail(ErrorCode::kCorrupt, OpName() + " with an odd number of items");
    Value* target = Top();
    if (target->kind != ValueKind::kDict && !ObjectTarget(target)) WrongTarget(target, "dict");
    AddReferences((items.size() - first) / 2);
    for (size_t i = first; i < items.size(); i += 2) keys_.SetItem(target, items[i], items[i + 1]);
  }
  void Appends(std::vector<Value*>& items) {
    Value* target = Top();
    if (target->kind != ValueKind::kList && !ObjectTarget(target)) WrongTarget(target, "list");
    AddReferences(items.size());
    target->items.insert(target->items.end(), items.begin(), items.end());
  }
  Value* MakeSet(ValueKind kind, const std::vector<Value*>& items) {
    Value* s = arena_.New(kind);
    AddReferences(items.size());
    for (Value* v : items) keys_.AddItem(s, v);
    return s;
  }

  // ---- scalars ----
  Value* DecimalInt(std::string_view text) {
    std::string_view t = Trim(text);
    bool negative = false;
    if (!t.empty() && (t[0] == '-' || t[0] == '+')) {
      negative = t[0] == '-';
      t.remove_prefix(1);
    }
    if (t.empty()) Fail(ErrorCode::kCorrupt, OpName() + " has no digits");
    for (char c : t) {
      if (c < '0' || c > '9') Fail(ErrorCode::kCorrupt, OpName() + " has a non-digit '" + std::string(1, c) + "'");
    }
    if (t.size() > kMaxPickleIntDigits) {
      Fail(ErrorCode::kLimit, OpName() + " has " + std::to_string(t.size()) + " digits, more than " +
                                  std::to_string(kMaxPickleIntDigits) + " (kMaxPickleIntDigits)");
    }
    // Magnitude in base 2^32 limbs, little-endian: mag = mag * 10^k + chunk, 9 digits at a time.
    std::vector<uint32_t> mag;
    for (size_t i = 0; i < t.size();) {
      size_t k = std::min<size_t>(9, t.size() - i);
      uint32_t chunk = 0, scale = 1;
      for (size_t j = 0; j < k; ++j, ++i) {
        chunk = chunk * 10 + static_cast<uint32_t>(t[i] - '0');
        scale *= 10;
      }
      uint64_t carry = chunk;
      for (auto& limb : mag) {
        uint64_t cur = uint64_t{limb} * scale + carry;
        limb = static_cast<uint32_t>(cur);
        carry = cur >> 32;
      }
      if (carry != 0) mag.push_back(static_cast<uint32_t>(carry));
    }
    std::vector<uint8_t> bytes;
    bytes.reserve(mag.size() * 4 + 1);
    for (uint32_t limb : mag) {
      for (int s = 0; s < 32; s += 8) bytes.push_back(static_cast<uint8_t>(limb >> s));
    }
    bytes.push_back(0);  // room for the sign bit
    if (negative) {
      unsigned carry = 1;
      for (auto& b : bytes) {
        unsigned v = static_cast<uint8_t>(~b) + carry;
        b = static_cast<uint8_t>(v);
        carry = v >> 8;
      }
    }
    return arena_.BigInt(std::move(bytes));
  }
  Value* TextFloat(std::string_view text) {
    std::string_view t = Trim(text);
    if (!t.empty() && t[0] == '+') t.remove_prefix(1);
    double d = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), d);
    if (t.empty() || end != t.data() + t.size() || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
      Fail(ErrorCode::kCorrupt, "FLOAT has a bad literal '" + std::string(t.substr(0, 40)) + "'");
    }
    if (ec == std::errc::result_out_of_range) {
      // Like CPython: a literal too small for a double is zero, one too large is an error.
      size_t e = t.find_first_of("eE");
      bool tiny = e != std::string_view::npos && e + 1 < t.size() && t[e + 1] == '-';
      if (!tiny) Fail(ErrorCode::kCorrupt, "FLOAT literal '" + std::string(t.substr(0, 40)) + "' is out of range");
      d = t[0] == '-' ? -0.0 : 0.0;
    }
    return arena_.Float(d);
  }
  // Python 2 str (STRING family): text when it is UTF-8 (torch reads with encoding="utf-8"),
  // else bytes (numpy-era latin-1 payloads stay intact).
  Value* Python2Str(std::string raw) {
    if (pickle_utf8::FirstInvalid(raw) == pickle_utf8::kValid) return arena_.Str(std::move(raw));
    return arena_.Bytes(std::move(raw));
  }
  Value* Utf8Str(std::string_view raw) {
    size_t bad = pickle_utf8::FirstInvalid(raw);
    if (bad != pickle_utf8::kValid) {
      Fail(ErrorCode::kCorrupt, OpName() + " is not valid UTF-8 (byte " + std::to_string(bad) + " of " +
                                    std::to_string(raw.size()) + ")");
    }
    return arena_.Str(std::string(raw));
  }
  // The STRING opcode's operand: a Python 2 repr, quoted, with backslash escapes.
  std::string EscapeDecode(std::string_view line) const {
    if (line.size() < 2 || line.front() != line.back() || (line.front() != '\'' && line.front() != '"')) {
      Fail(ErrorCode::kCorrupt, "STRING argument must be quoted");
    }
    std::string_view s = line.substr(1, line.size() - 2);
    std::string out;
    out.reserve(s.size());
    const auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (++i == s.size()) Fail(ErrorCode::kCorrupt, "STRING ends with a lone backslash");
      c = s[i];
      switch (c) {
        case '\n': break;
        case '\\': case '\'': case '"': out.push_back(c); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': {
          if (i + 2 >= s.size() || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0) {
            Fail(ErrorCode::kCorrupt, "STRING has an invalid \\x escape");
          }
          out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
          i += 2;
          break;
        }
        default:
          if (c >= '0' && c <= '7') {
            unsigned v = static_cast<unsigned>(c - '0');
            for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k) {
              v = v * 8 + static_cast<unsigned>(s[++i] - '0');
            }
            out.push_back(static_cast<char>(v & 0xFF));
          } else {
            out.push_back('\\');  // Python keeps unknown escapes as written
            out.push_back(c);
          }
      }
    }
    return out;
  }
  // The UNICODE opcode's operand: raw-unicode-escape (latin-1 bytes, \uXXXX and \UXXXXXXXX).
  std::string RawUnicodeEscapeDecode(std::string_view s) const {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      auto c = static_cast<uint8_t>(s[i++]);
      if (c != '\\' || i == s.size()) {
        pickle_utf8::Append(out, c);
        continue;
      }
      auto next = static_cast<uint8_t>(s[i++]);
      int count = next == 'u' ? 4 : next == 'U' ? 8 : 0;
      if (count == 0) {  // a backslash pair, or an escape raw-unicode-escape does not know
        pickle_utf8::Append(out, '\\');
        pickle_utf8::Append(out, next);
        continue;
      }
      uint32_t cp = 0;
      for (int k = 0; k < count; ++k, ++i) {
        char h = i < s.size() ? s[i] : '\0';
        int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) Fail(ErrorCode::kCorrupt, "UNICODE has a truncated \\u escape");
        cp = cp * 16 + static_cast<uint32_t>(d);
      }
      if (cp > 0x10FFFF) Fail(ErrorCode::kCorrupt, "UNICODE escape \\U out of range");
      pickle_utf8::Append(out, cp);
    }
    return out;
  }
  Value* LongBytes(uint64_t n) {
    if (n > kMaxPickleIntBytes) {
      Fail(ErrorCode::kLimit, OpName() + " of " + std::to_string(n) + " bytes, more than " +
                                  std::to_string(kMaxPickleIntBytes) + " (kMaxPickleIntBytes)");
    }
    std::string_view b = in_.Bytes(n);
    return arena_.BigInt(std::vector<uint8_t>(b.begin(), b.end()));
  }
  std::string_view Sized(uint64_t n) { return in_.Bytes(n); }  // bounds-checked before any copy

  Value* Loop(uint64_t& consumed);

  ByteReader in_;
  ValueArena& arena_;
  PickleResolver& resolver_;
  std::vector<PickleGlobal>& globals_;
  int& protocol_;
  size_t values_start_;
  uint64_t op_offset_ = 0;
  uint8_t op_ = 0;
  int current_protocol_ = 0;
  uint64_t references_ = 0;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::vector<Value*> memo_dense_;
  std::unordered_map<uint64_t, Value*> memo_sparse_;
  uint64_t memo_size_ = 0;
  KeyIndex keys_;
};

Value* Machine::Loop(uint64_t& consumed) {
  for (;;) {
    op_offset_ = in_.offset();
    if (in_.at_end()) Fail(ErrorCode::kCorrupt, in_.position() == 0 ? "empty pickle" : "pickle ends without STOP");
    op_ = in_.U8();
    switch (op_) {
      case op::kMark:
        CheckDepth();
        marks_.push_back(stack_.size());
        break;
      case op::kStop: {
        if (!marks_.empty()) Fail(ErrorCode::kCorrupt, "STOP with " + std::to_string(marks_.size()) + " open MARKs");
        if (stack_.empty()) Fail(ErrorCode::kCorrupt, "STOP with an empty stack");
        consumed = in_.position();
        return stack_.back();
      }
      case op::kPop:
        // Python's POP takes the MARK itself when nothing was pushed since it.
        if (stack_.size() > Fence()) stack_.pop_back();
        else if (!marks_.empty()) marks_.pop_back();
        else Fail(ErrorCode::kCorrupt, "stack underflow in POP");
        break;
      case op::kPopMark: PopMark(); break;
      case op::kDup: Push(Top()); break;

      // ---- numbers ----
      case op::kInt: {
        std::string_view line = in_.Line();
        if (line == "00") Push(arena_.Bool(false));
        else if (line == "01") Push(arena_.Bool(true));
        else Push(DecimalInt(line));
        break;
      }
      case op::kLong: {
        std::string_view line = in_.Line();
        if (!line.empty() && line.back() == 'L') line.remove_suffix(1);
        Push(DecimalInt(line));
        break;
      }
      case op::kBinInt: Push(arena_.Int(in_.I32())); break;
      case op::kBinInt1: Push(arena_.Int(in_.U8())); break;
      case op::kBinInt2: Push(arena_.Int(in_.U16())); break;
      case op::kLong1: Push(LongBytes(in_.U8())); break;
      case op::kLong4: {
        int32_t n = in_.I32();
        if (n < 0) Fail(ErrorCode::kCorrupt, "LONG4 has a negative byte count");
        Push(LongBytes(static_cast<uint64_t>(n)));
        break;
      }
      case op::kFloat: Push(TextFloat(in_.Line())); break;
      case op::kBinFloat: Push(arena_.Float(in_.F64BigEndian())); break;
      case op::kNone: Push(arena_.None()); break;
      case op::kNewTrue: Push(arena_.Bool(true)); break;
      case op::kNewFalse: Push(arena_.Bool(false)); break;

      // ---- strings ----
      case op::kString: Push(Python2Str(EscapeDecode(in_.Line()))); break;
      case op::kBinString: {
        int32_t n = in_.I32();
        if (n < 0) Fail(ErrorCode::kCorrupt, "BINSTRING has a negative byte count");
        Push(Python2Str(std::string(Sized(static_cast<uint64_t>(n)))));
        break;
      }
      case op::kShortBinString: Push(Python2Str(std::string(Sized(in_.U8())))); break;
      case op::kUnicode: Push(arena_.Str(RawUnicodeEscapeDecode(in_.Line()))); break;
      case op::kShortBinUnicode: Push(Utf8Str(Sized(in_.U8()))); break;
      case op::kBinUnicode: Push(Utf8Str(Sized(in_.U32()))); break;
      case op::kBinUnicode8: Push(Utf8Str(Sized(in_.U64()))); break;
      case op::kShortBinBytes: Push(arena_.Bytes(std::string(Sized(in_.U8())))); break;
      case op::kBinBytes: Push(arena_.Bytes(std::string(Sized(in_.U32())))); break;
      case op::kBinBytes8: Push(arena_.Bytes(std::string(Sized(in_.U64())))); break;
      case op::kByteArray8: {
        Value* v = arena_.Bytes(std::string(Sized(in_.U64())));
        v->type_name = "bytearray";
        Push(v);
        break;
      }
      case op::kNextBuffer: Fail(ErrorCode::kRefused, "NEXT_BUFFER: no out-of-band buffers are supplied");
      case op::kReadonlyBuffer: Top(); break;  // a read-only view of the same bytes: data unchanged

      // ---- containers ----
      case op::kEmptyTuple: Push(arena_.Tuple()); break;
      case op::kTuple: {
        std::vector<Value*> items = PopMark();
        AddReferences(items.size());
        Push(arena_.Tuple(std::move(items)));
        break;
      }
      case op::kTuple1:
      case op::kTuple2:
      case op::kTuple3: {
        size_t n = op_ - op::kTuple1 + 1u;
        std::vector<Value*> items(n);
        for (size_t i = n; i-- > 0;) items[i] = Pop();
        AddReferences(n);
        Push(arena_.Tuple(std::move(items)));
        break;
      }
      case op::kEmptyList: Push(arena_.List()); break;
      case op::kList: {
        Value* list = arena_.List();
        list->items = PopMark();
        AddReferences(list->items.size());
        Push(list);
        break;
      }
      case op::kAppend: {
        std::vector<Value*> one{Pop()};
        Appends(one);
        break;
      }
      case op::kAppends: {
        std::vector<Value*> items = PopMark();
        Appends(items);
        break;
      }
      case op::kEmptyDict: Push(arena_.Dict()); break;
      case op::kDict: {
        std::vector<Value*> items = PopMark();
        Push(arena_.Dict());
        SetItems(items, 0);
        break;
      }
      case op::kSetItem: {
        Value* value = Pop();
        Value* key = Pop();
        SetItems({key, value}, 0);
        break;
      }
      case op::kSetItems: SetItems(PopMark(), 0); break;
      case op::kEmptySet: Push(arena_.New(ValueKind::kSet)); break;
      case op::kAddItems: {
        std::vector<Value*> items = PopMark();
        Value* target = Top();
        if (target->kind != ValueKind::kSet) WrongTarget(target, "set");
        AddReferences(items.size());
        for (Value* v : items) keys_.AddItem(target, v);
        break;
      }
      case op::kFrozenSet: Push(MakeSet(ValueKind::kFrozenSet, PopMark())); break;

      // ---- memo ----
      case op::kPut: Put(DecimalIndex(in_.Line())); break;
      case op::kBinPut: Put(in_.U8()); break;
      case op::kLongBinPut: Put(in_.U32()); break;
      case op::kMemoize: Put(memo_size_); break;  // like Python: len(memo), whatever PUT did before
      case op::kGet: Get(DecimalIndex(in_.Line())); break;
      case op::kBinGet: Get(in_.U8()); break;
      case op::kLongBinGet: Get(in_.U32()); break;

      // ---- names and calls (all decided by the resolver) ----
      case op::kGlobal: {
        std::string module = ReadUtf8Line("module");
        std::string name = ReadUtf8Line("name");
        Push(ResolveGlobal(std::move(module), std::move(name)));
        break;
      }
      case op::kStackGlobal: {
        Value* name = Pop();
        Value* module = Pop();
        if (module->kind != ValueKind::kStr || name->kind != ValueKind::kStr) {
          Fail(ErrorCode::kCorrupt, "STACK_GLOBAL needs two str operands, got " + KindText(module) + " and " +
                                        KindText(name));
        }
        Push(ResolveGlobal(module->text, name->text));
        break;
      }
      case op::kInst: {
        std::string module = ReadUtf8Line("module");
        std::string name = ReadUtf8Line("name");
        Value* cls = ResolveGlobal(std::move(module), std::move(name));
        Value* args = arena_.Tuple(PopMark());
        Push(Call(cls, args));
        break;
      }
      case op::kObj: {
        std::vector<Value*> items = PopMark();
        if (items.empty()) Fail(ErrorCode::kCorrupt, "OBJ without a class");
        Value* cls = items.front();
        Value* args = arena_.Tuple(std::vector<Value*>(items.begin() + 1, items.end()));
        Push(Call(cls, args));
        break;
      }
      case op::kReduce: {
        Value* args = Pop();
        Value* callable = Pop();
        Push(Call(callable, args));
        break;
      }
      case op::kNewObj: {
        Value* args = Pop();
        Value* cls = Pop();
        Push(Call(cls, args));
        break;
      }
      case op::kNewObjEx: {
        Value* kwargs = Pop();
        Value* args = Pop();
        Value* cls = Pop();
        if (kwargs->kind != ValueKind::kDict) {
          Fail(ErrorCode::kCorrupt, "NEWOBJ_EX keyword arguments must be a dict, not " + KindText(kwargs));
        }
        if (!kwargs->entries.empty()) {
          Fail(ErrorCode::kUnsupported, "NEWOBJ_EX with keyword arguments (calling " + KindText(cls) + ")");
        }
        Push(Call(cls, args));
        break;
      }
      case op::kBuild: {
        Value* state = Pop();
        Value* object = Pop();
        Value* built = Checked(resolver_.Build(object, state, arena_), "BUILD");
        Push(built);
        break;
      }
      case op::kPersId: {
        std::string_view line = in_.Line();
        for (char c : line) {
          if (static_cast<uint8_t>(c) >= 0x80) Fail(ErrorCode::kCorrupt, "PERSID is not ASCII");
        }
        Value* pid = arena_.Str(std::string(line));
        Push(Checked(resolver_.PersistentLoad(pid, arena_), "a persistent id"));
        break;
      }
      case op::kBinPersId: {
        Value* pid = Pop();
        Push(Checked(resolver_.PersistentLoad(pid, arena_), "a persistent id"));
        break;
      }
      case op::kExt1:
      case op::kExt2:
      case op::kExt4: {
        uint64_t code = op_ == op::kExt1 ? in_.U8() : op_ == op::kExt2 ? in_.U16() : in_.U32();
        Fail(ErrorCode::kRefused, OpName() + " " + std::to_string(code) +
                                      ": extension-registry names are not supported (the name is not in the file)");
      }

      // ---- framing ----
      case op::kProto: {
        uint8_t p = in_.U8();
        if (p > op::kHighestProtocol) Fail(ErrorCode::kUnsupported, "unsupported pickle protocol " + std::to_string(p));
        current_protocol_ = p;
        protocol_ = std::max(protocol_, static_cast<int>(p));
        break;
      }
      case op::kFrame: {
        uint64_t n = in_.U64();
        if (n > in_.remaining()) {
          Fail(ErrorCode::kCorrupt, "FRAME of " + std::to_string(n) + " bytes, but " + std::to_string(in_.remaining()) +
                                        " remain");
        }
        break;
      }
      default: Fail(ErrorCode::kCorrupt, "unknown opcode " + Hex2(op_));
    }
    CheckValues();
  }
}

}  // namespace

Unpickler::Unpickler(const uint8_t* data, uint64_t size, ValueArena& arena, PickleResolver& resolver,
                     uint64_t base_offset)
    : data_(data), size_(size), arena_(arena), resolver_(resolver), base_offset_(base_offset) {}

Value* Unpickler::Load() {
  Machine machine(data_, size_, base_offset_, arena_, resolver_, globals_, protocol_);
  return machine.Run(consumed_);
}

}  // namespace trove
