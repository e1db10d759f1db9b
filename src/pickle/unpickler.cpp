// The pickle virtual machine: one loop over opcodes, an explicit stack and mark stack, a hashed
// memo. Nothing here recurses on the data, so any nesting depth costs heap, never C++ stack.
// Errors are thrown without position and get their opcode offset set in one place (Run).
#include "trove/unpickler.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <cmath>
#include <new>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/byte_reader.h"
#include "pickle/global_class.h"
#include "pickle/opcodes.h"
#include "pickle/py_keys.h"
#include "core/utf8.h"

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

bool CSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// CPython reads text operands as C strings: a NUL ends them before the newline does.
std::string_view UpToNul(std::string_view s) {
  size_t nul = s.find('\0');
  return nul == std::string_view::npos ? s : s.substr(0, nul);
}

int DigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

// C's strtol(s, &end, 0), which CPython's INT tries first: true when it consumes all of s and
// the value fits a long. Base 0 means 0x/0X hex and a leading 0 octal ("010" is 8).
bool StrtolWhole(std::string_view s, int64_t& out) {
  size_t i = 0;
  while (i < s.size() && CSpace(s[i])) ++i;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  int base = 10;
  if (i < s.size() && s[i] == '0') {
    if (i + 1 < s.size() && (s[i + 1] == 'x' || s[i + 1] == 'X') && i + 2 < s.size() && DigitValue(s[i + 2]) < 16) {
      base = 16;
      i += 2;
    } else {
      base = 8;
    }
  }
  const size_t first = i;
  constexpr uint64_t kLimit = uint64_t{1} << 63;  // |LONG_MIN|
  uint64_t v = 0;
  for (; i < s.size() && DigitValue(s[i]) < base; ++i) {
    const auto d = static_cast<uint64_t>(DigitValue(s[i]));
    if (v > (kLimit - d) / static_cast<uint64_t>(base)) return false;  // ERANGE: CPython falls back to int()
    v = v * static_cast<uint64_t>(base) + d;
  }
  if (i == first) {  // no conversion: end points at the start, accepted only when s is empty
    out = 0;
    return s.empty();
  }
  if (i != s.size()) return false;
  if (!negative && v > static_cast<uint64_t>(INT64_MAX)) return false;
  out = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

// Python's int(s, base) for base 0 or 10 (PyLong_FromString): whitespace around, one sign,
// 0x/0o/0b prefixes (base 0), single underscores between digits, no leading zeros in base 0.
struct IntText {
  bool negative = false;
  int base = 10;
  std::string digits;  // without underscores
};
std::optional<IntText> ParsePythonInt(std::string_view s, int base) {
  IntText t;
  size_t i = 0;
  while (i < s.size() && CSpace(s[i])) ++i;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) t.negative = s[i++] == '-';
  bool prefixed = false;
  t.base = base == 0 ? 10 : base;
  if (base == 0 && i + 1 < s.size() && s[i] == '0') {
    char p = s[i + 1];
    if (p == 'x' || p == 'X') t.base = 16;
    else if (p == 'o' || p == 'O') t.base = 8;
    else if (p == 'b' || p == 'B') t.base = 2;
    if (t.base != 10) {
      prefixed = true;
      i += 2;
      if (i < s.size() && s[i] == '_') ++i;  // "0x_1f" is valid
    }
  }
  bool last_underscore = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (last_underscore || t.digits.empty()) return std::nullopt;
      last_underscore = true;
      continue;
    }
    if (DigitValue(c) >= t.base) break;
    t.digits.push_back(c);
    last_underscore = false;
  }
  if (t.digits.empty() || last_underscore) return std::nullopt;
  while (i < s.size() && CSpace(s[i])) ++i;
  if (i != s.size()) return std::nullopt;
  if (base == 0 && !prefixed && t.digits.size() > 1 && t.digits[0] == '0' &&
      t.digits.find_first_not_of('0') != std::string::npos) {
    return std::nullopt;  // "010" is no base-0 literal
  }
  return t;
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

  // Reads to STOP. When reading stops early, the lexical pass lists the names in the rest of the
  // stream (see unpickler.h); `lexical_stop` says where that pass itself ended before STOP.
  Value* Run(uint64_t& consumed, std::string& lexical_stop) {
    try {
      return Loop(consumed);
    } catch (Error& e) {
      e.SetOffset(op_offset_);  // unless the error names its offset already
      const size_t first = globals_.size();
      lexical_stop = LexicalPass(op_position_);
      JudgeLexicalGlobals(first, e);
      throw;
    } catch (const std::bad_alloc&) {
      // The values a pickle makes take about twice its bytes or more each; a limit on the
      // process's memory can end the stream before kMaxPickleValues does. Said where, like a cap.
      throw Error(ErrorCode::kLimit, "out of memory after " + std::to_string(arena_.size() - values_start_) +
                                         " values (kMaxPickleValues allows " + std::to_string(kMaxPickleValues) + ")")
          .SetOffset(op_offset_);
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
  // PUT / GET text: int(s, 10) (a sign, underscores and spaces are fine). Python refuses a
  // negative PUT and finds no negative GET; nullopt stands for that.
  std::optional<uint64_t> TextMemoIndex(std::string_view line) const {
    std::string_view s = UpToNul(line);
    std::optional<IntText> t = line.empty() ? std::nullopt : ParsePythonInt(s, 10);
    if (!t) Fail(ErrorCode::kCorrupt, OpName() + " has a bad memo index '" + std::string(s.substr(0, 40)) + "'");
    size_t nz = t->digits.find_first_not_of('0');
    std::string_view digits = nz == std::string::npos ? std::string_view("0") : std::string_view(t->digits).substr(nz);
    if (t->negative && digits != "0") return std::nullopt;
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || v > static_cast<uint64_t>(INT64_MAX)) {
      Fail(ErrorCode::kCorrupt, OpName() + " memo index '" + std::string(s.substr(0, 40)) + "' is too large");
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
    // A nested qualname (protocol 4's STACK_GLOBAL 'a.b' 'Outer.Inner'): where the module ends
    // cannot be told from the dotted name, and a writer must name the same global again.
    if (name.find('.') != std::string::npos && v->kind == ValueKind::kGlobal && v->type_name == module + "." + name) {
      v->module_size = static_cast<uint32_t>(module.size());
    }
    return v;
  }
  // EXT1/2/4: Python looks the code up in copyreg's extension registry, which maps it to any
  // module.name registered at run time; the file holds no name, so a strict reader refuses it
  // and a scan lists it as a global of its own kind.
  Value* ExtensionGlobal(uint32_t code) {
    PickleGlobal g{"", "", op_offset_, false};
    g.via = PickleGlobalVia::kExtension;
    g.extension_code = code;
    globals_.push_back(g);
    if (resolver_.policy() != PicklePolicy::kPermissive) Fail(ErrorCode::kRefused, ExtensionText(OpName(), code));
    return arena_.Global("copyreg extension " + std::to_string(code));
  }
  static std::string ExtensionText(const std::string& op, uint32_t code) {
    return "refused " + op + " " + std::to_string(code) + ": a name from copyreg's extension registry (not in the file)";
  }
  Value* Call(Value* callable, Value* args, bool new_object = false) {
    if (args->kind != ValueKind::kTuple) {
      Fail(ErrorCode::kCorrupt, OpName() + " arguments must be a tuple, not " + KindText(args));
    }
    Value* v = Checked(new_object ? resolver_.NewObject(callable, args, arena_) : resolver_.Call(callable, args, arena_),
                       "a call");
    AddReferences(v->items.size() + v->entries.size());
    return v;
  }
  std::string ReadUtf8Line(const char* what) {
    std::string_view line = in_.Line();
    if (utf8::FirstInvalid(line) != utf8::kValid) {
      Fail(ErrorCode::kCorrupt, OpName() + " " + what + " is not valid UTF-8");
    }
    return std::string(line);
  }

  // ---- containers ----
  // Python's SETITEM(S), APPEND(S) and ADDITEMS call __setitem__, extend/append and add on
  // whatever object is below the items. Plain data is changed as Python would change it; an
  // inert object of an unknown class records the items (a permissive reader lets any object do
  // so); anything else Python would refuse too, so a strict or default reader refuses it and a
  // permissive one leaves the target as it is, reading on (a scan must reach every name after it).
  bool ObjectTarget(const Value* target) const {
    return target->kind == ValueKind::kObject &&
           (target->unknown_class || resolver_.policy() == PicklePolicy::kPermissive);
  }
  void WrongTarget(const Value* target, const std::string& why) const {
    if (resolver_.policy() == PicklePolicy::kPermissive) return;
    Fail(ErrorCode::kRefused, OpName() + " onto a " + KindText(target) + ": " + why);
  }
  // An object of an unknown class that SETITEM(S) fills right after it was made (no arguments,
  // no state, nothing set yet) is what pickle writes for a dict subclass: it becomes a dict that
  // keeps its class name (an OrderedDict subclass's BUILD then sets its attributes). Only a class
  // of no known verdict: a dangerous one (read under --permissive) stays an inert object of its
  // class, never data.
  static void DictSubclass(Value* target) {
    if (target->kind != ValueKind::kObject || !target->unknown_class || target->state != nullptr ||
        !target->entries.empty() || !target->items.empty() || (target->args != nullptr && !target->args->items.empty())) {
      return;
    }
    if (ClassifyGlobal(target->type_name).klass != GlobalClass::kUnknown) return;
    target->kind = ValueKind::kDict;
    target->args = nullptr;
    target->unknown_class = false;
  }
  static bool IsByteArray(const Value* v) { return v->kind == ValueKind::kBytes && v->type_name == "bytearray"; }
  // A Python index (int or bool) into a sequence of `size`, negative counting from the end.
  static std::optional<size_t> SequenceIndex(const Value* key, size_t size) {
    int64_t i;
    if (key->kind == ValueKind::kBool) i = key->boolean ? 1 : 0;
    else if (key->kind == ValueKind::kInt && key->big_int.empty()) i = key->integer;
    else return std::nullopt;
    if (i < 0) i += static_cast<int64_t>(size);
    if (i < 0 || static_cast<uint64_t>(i) >= size) return std::nullopt;
    return static_cast<size_t>(i);
  }
  static std::optional<uint8_t> ByteValue(const Value* v) {
    if (v->kind == ValueKind::kBool) return v->boolean ? 1 : 0;
    if (v->kind == ValueKind::kInt && v->big_int.empty() && v->integer >= 0 && v->integer <= 255) {
      return static_cast<uint8_t>(v->integer);
    }
    return std::nullopt;
  }
  void SetItems(const std::vector<Value*>& items, size_t first) {
    if ((items.size() - first) % 2 != 0) Fail(ErrorCode::kCorrupt, OpName() + " with an odd number of items");
    Value* target = Top();
    AddReferences((items.size() - first) / 2);
    DictSubclass(target);
    if (target->kind == ValueKind::kDict || ObjectTarget(target)) {
      for (size_t i = first; i < items.size(); i += 2) keys_.SetItem(target, items[i], items[i + 1]);
      return;
    }
    for (size_t i = first; i < items.size(); i += 2) {
      if (target->kind == ValueKind::kList) {
        std::optional<size_t> at = SequenceIndex(items[i], target->items.size());
        if (!at) return WrongTarget(target, "the index is not an int within the list");
        target->items[*at] = items[i + 1];
      } else if (IsByteArray(target)) {
        std::optional<size_t> at = SequenceIndex(items[i], target->text.size());
        std::optional<uint8_t> byte = ByteValue(items[i + 1]);
        if (!at || !byte) return WrongTarget(target, "a bytearray item takes an index within it and an int 0..255");
        target->text[*at] = static_cast<char>(*byte);
      } else {
        return WrongTarget(target, "it has no __setitem__ for data");
      }
    }
  }
  void Appends(std::vector<Value*>& items) {
    Value* target = Top();
    AddReferences(items.size());
    if (target->kind == ValueKind::kList || ObjectTarget(target)) {
      target->items.insert(target->items.end(), items.begin(), items.end());
      return;
    }
    if (IsByteArray(target)) {  // bytearray.extend: every item an int 0..255, or nothing changes
      std::string added;
      for (const Value* v : items) {
        std::optional<uint8_t> byte = ByteValue(v);
        if (!byte) return WrongTarget(target, "bytearray.extend takes ints 0..255, not a " + KindText(v));
        added.push_back(static_cast<char>(*byte));
      }
      target->text += added;
      return;
    }
    WrongTarget(target, "it has no append/extend for data");
  }
  void AddItems(const std::vector<Value*>& items) {
    Value* target = Top();
    AddReferences(items.size());
    if (target->kind == ValueKind::kSet) {
      for (Value* v : items) keys_.AddItem(target, v);
    } else if (ObjectTarget(target)) {
      target->items.insert(target->items.end(), items.begin(), items.end());
    } else {
      WrongTarget(target, "it has no add for data");
    }
  }
  // BUILD. Objects without __setstate__ (all plain data) take Python's default: a 2-tuple state
  // is (state, slotstate); a None part changes nothing, the slot dict sets attributes. Inert
  // objects, globals and tensors get the whole state from the resolver (their class decides).
  Value* BuildState(Value* object, Value* state) {
    const bool plain = object->kind != ValueKind::kObject && object->kind != ValueKind::kGlobal &&
                       object->kind != ValueKind::kTensor;
    if (!plain || state->kind != ValueKind::kTuple || state->items.size() != 2) {
      return Checked(resolver_.Build(object, state, arena_), "BUILD");
    }
    Value* dict_state = state->items[0];
    Value* slot_state = state->items[1];
    if (slot_state->kind != ValueKind::kDict && slot_state->kind != ValueKind::kNone) {
      Fail(ErrorCode::kCorrupt, "BUILD slot state is a " + KindText(slot_state) + ", not a dict");
    }
    if (dict_state->kind != ValueKind::kNone) object = Checked(resolver_.Build(object, dict_state, arena_), "BUILD");
    if (slot_state->kind == ValueKind::kDict && !slot_state->entries.empty()) {
      object = Checked(resolver_.Build(object, slot_state, arena_), "BUILD");
    }
    return object;
  }
  Value* MakeSet(ValueKind kind, const std::vector<Value*>& items) {
    Value* s = arena_.New(kind);
    AddReferences(items.size());
    for (Value* v : items) keys_.AddItem(s, v);
    return s;
  }

  // ---- scalars ----
  // An int from Python's text forms (see ParsePythonInt), as little-endian two's complement.
  Value* MakeInt(const IntText& t) {
    const std::string& d = t.digits;
    if (t.base == 10) {
      if (d.size() > kMaxPickleIntDigits) {
        Fail(ErrorCode::kLimit, OpName() + " has " + std::to_string(d.size()) + " digits, more than " +
                                    std::to_string(kMaxPickleIntDigits) + " (kMaxPickleIntDigits)");
      }
      return arena_.IntFromDecimal(d, t.negative);
    }
    // Power-of-two bases (2, 8, 16): each digit is a fixed number of bits, packed from the end.
    const unsigned bits = t.base == 2 ? 1 : t.base == 8 ? 3 : 4;
    if (d.size() > kMaxPickleIntBytes * 8 / bits) {
      Fail(ErrorCode::kLimit, OpName() + " has more than " + std::to_string(kMaxPickleIntBytes) +
                                  " bytes of digits (kMaxPickleIntBytes)");
    }
    std::vector<uint8_t> magnitude((d.size() * bits + 7) / 8, 0);
    uint64_t bit = 0;
    for (size_t i = d.size(); i-- > 0; bit += bits) {
      auto v = static_cast<unsigned>(DigitValue(d[i]));
      for (unsigned b = 0; b < bits; ++b) {
        if (v >> b & 1u) magnitude[(bit + b) / 8] |= static_cast<uint8_t>(1u << ((bit + b) % 8));
      }
    }
    return arena_.IntFromMagnitude(std::move(magnitude), t.negative);
  }
  // INT: strtol(s, 0) first, then int(s, 0); a 2-character line of value 0 or 1 is a bool
  // (Python 2's "I00"/"I01", and so also "+1", "-0").
  Value* TextInt(std::string_view line) {
    if (line.empty()) Fail(ErrorCode::kCorrupt, "INT has an empty line");
    std::string_view s = UpToNul(line);
    int64_t x = 0;
    if (StrtolWhole(s, x)) {
      if (line.size() == 2 && (x == 0 || x == 1)) return arena_.Bool(x == 1);
      return arena_.Int(x);
    }
    std::optional<IntText> t = ParsePythonInt(s, 0);
    if (!t) Fail(ErrorCode::kCorrupt, "INT has a bad literal '" + std::string(s.substr(0, 40)) + "'");
    return MakeInt(*t);
  }
  // LONG: int(s, 0) after dropping Python 2's trailing 'L'.
  Value* TextLong(std::string_view line) {
    if (line.empty()) Fail(ErrorCode::kCorrupt, "LONG has an empty line");
    if (line.back() == 'L') line.remove_suffix(1);
    std::string_view s = UpToNul(line);
    std::optional<IntText> t = ParsePythonInt(s, 0);
    if (!t) Fail(ErrorCode::kCorrupt, "LONG has a bad literal '" + std::string(s.substr(0, 40)) + "'");
    return MakeInt(*t);
  }
  Value* TextFloat(std::string_view text) {
    std::string_view t = Trim(UpToNul(text));
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
    if (utf8::FirstInvalid(raw) == utf8::kValid) return arena_.Str(std::move(raw));
    return arena_.Bytes(std::move(raw));
  }
  Value* Utf8Str(std::string_view raw) {
    size_t bad = utf8::FirstInvalid(raw);
    if (bad != utf8::kValid) {
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
        utf8::Append(out, c);
        continue;
      }
      auto next = static_cast<uint8_t>(s[i++]);
      int count = next == 'u' ? 4 : next == 'U' ? 8 : 0;
      if (count == 0) {  // a backslash pair, or an escape raw-unicode-escape does not know
        utf8::Append(out, '\\');
        utf8::Append(out, next);
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
      utf8::Append(out, cp);
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

  // ---- the lexical pass ----
  // What the pass knows of a stack entry: a literal str (a STACK_GLOBAL operand), a MARK, or
  // anything else. Only the top of the stack matters, so the shadow keeps the newest entries.
  struct Token {
    enum Kind : uint8_t { kOther, kStr, kMark } kind = kOther;
    std::string text;
  };
  static constexpr size_t kShadowEntries = 64;
  void ShadowPush(std::vector<Token>& shadow, Token t) const {
    if (shadow.size() == kShadowEntries) shadow.erase(shadow.begin());
    shadow.push_back(std::move(t));
  }
  static Token ShadowPop(std::vector<Token>& shadow) {
    if (shadow.empty()) return {};
    Token t = std::move(shadow.back());
    shadow.pop_back();
    return t;
  }
  static void ShadowPopMark(std::vector<Token>& shadow) {
    while (!shadow.empty() && shadow.back().kind != Token::kMark) shadow.pop_back();
    if (!shadow.empty()) shadow.pop_back();
  }
  static Token StrToken(std::string text) {
    if (utf8::FirstInvalid(text) != utf8::kValid) return {};
    return {Token::kStr, std::move(text)};
  }
  void ListLexical(PickleGlobal g) {
    if (g.offset == stop_listed_at_) return;  // the opcode reading stopped at, already listed
    if (++lexical_listed_ > kMaxPickleLexicalGlobals) {
      Fail(ErrorCode::kLimit, "more than " + std::to_string(kMaxPickleLexicalGlobals) +
                                  " names after reading stopped (kMaxPickleLexicalGlobals)");
    }
    g.after_stop = true;
    globals_.push_back(std::move(g));
  }
  void ListLexicalName(std::string module, std::string name) {
    // Python decodes names as UTF-8 and stops at one that is not: no such name can be imported.
    if (utf8::FirstInvalid(module) != utf8::kValid || utf8::FirstInvalid(name) != utf8::kValid) {
      return;
    }
    if (current_protocol_ < 3) RenamePython2(module, name);
    ListLexical(PickleGlobal{std::move(module), std::move(name), op_offset_, false});
  }
  // Walks from `from` to STOP reading only opcodes and their operands, listing every global a
  // Python unpickler could still reach. Linear in the bytes left, memory bounded by the memo
  // and listing caps. Returns "" when it reached STOP or the end of the data, else where and why
  // it stopped (an unknown opcode or a malformed operand: Python stops there too).
  std::string LexicalPass(uint64_t from) {
    if (!globals_.empty() && globals_.back().offset == op_offset_) stop_listed_at_ = op_offset_;
    std::vector<Token> shadow;
    for (size_t i = stack_.size() > kShadowEntries ? stack_.size() - kShadowEntries : 0; i < stack_.size(); ++i) {
      shadow.push_back(stack_[i]->kind == ValueKind::kStr ? Token{Token::kStr, stack_[i]->text} : Token{});
    }
    // Memo entries the pass saw written; others come from the machine's memo.
    std::unordered_map<uint64_t, Token> memo;
    uint64_t memo_count = memo_size_;
    const auto memo_get = [&](uint64_t index) -> Token {
      if (auto it = memo.find(index); it != memo.end()) return it->second;
      Value** slot = MemoSlot(index);
      if (slot != nullptr && (*slot)->kind == ValueKind::kStr) return {Token::kStr, (*slot)->text};
      return {};
    };
    // Only str entries are kept (and entries that hide a str of the machine's memo), so the
    // pass's memory follows the literal strings of the file, not its memo opcodes. MEMOIZE's
    // index counts new entries; a count gone astray can only mislabel an operand, and a
    // STACK_GLOBAL is listed either way.
    const auto memo_put = [&](uint64_t index) {
      Value** slot = MemoSlot(index);
      if (slot == nullptr && memo.find(index) == memo.end()) ++memo_count;
      Token top = shadow.empty() ? Token{} : shadow.back();
      if (top.kind == Token::kStr || (slot != nullptr && (*slot)->kind == ValueKind::kStr)) {
        if (memo.size() >= kMaxPickleMemoEntries) {
          Fail(ErrorCode::kLimit, "more than " + std::to_string(kMaxPickleMemoEntries) + " memo entries (kMaxPickleMemoEntries)");
        }
        memo[index] = std::move(top);
      } else {
        memo.erase(index);
      }
    };
    try {
      in_.Seek(from);
      for (;;) {
        op_offset_ = in_.offset();
        if (in_.at_end()) return "";
        op_ = in_.U8();
        switch (op_) {
          case op::kStop: return "";
          case op::kMark: ShadowPush(shadow, {Token::kMark, {}}); break;
          case op::kPop: ShadowPop(shadow); break;
          case op::kPopMark: ShadowPopMark(shadow); break;
          case op::kDup: ShadowPush(shadow, shadow.empty() ? Token{} : shadow.back()); break;
          // Literal strings: the operands STACK_GLOBAL may take.
          case op::kShortBinUnicode: ShadowPush(shadow, StrToken(std::string(Sized(in_.U8())))); break;
          case op::kBinUnicode: ShadowPush(shadow, StrToken(std::string(Sized(in_.U32())))); break;
          case op::kBinUnicode8: ShadowPush(shadow, StrToken(std::string(Sized(in_.U64())))); break;
          case op::kShortBinString: ShadowPush(shadow, StrToken(std::string(Sized(in_.U8())))); break;
          case op::kBinString: {
            int32_t n = in_.I32();
            if (n < 0) Fail(ErrorCode::kCorrupt, "BINSTRING has a negative byte count");
            ShadowPush(shadow, StrToken(std::string(Sized(static_cast<uint64_t>(n)))));
            break;
          }
          case op::kString: ShadowPush(shadow, StrToken(EscapeDecode(in_.Line()))); break;
          case op::kUnicode: ShadowPush(shadow, StrToken(RawUnicodeEscapeDecode(in_.Line()))); break;
          // Memo.
          case op::kPut: {
            std::optional<uint64_t> index = TextMemoIndex(in_.Line());
            if (!index) Fail(ErrorCode::kCorrupt, "negative PUT index");
            memo_put(*index);
            break;
          }
          case op::kBinPut: memo_put(in_.U8()); break;
          case op::kLongBinPut: memo_put(in_.U32()); break;
          case op::kMemoize: memo_put(memo_count); break;
          case op::kGet: {
            std::optional<uint64_t> index = TextMemoIndex(in_.Line());
            ShadowPush(shadow, index ? memo_get(*index) : Token{});
            break;
          }
          case op::kBinGet: ShadowPush(shadow, memo_get(in_.U8())); break;
          case op::kLongBinGet: ShadowPush(shadow, memo_get(in_.U32())); break;
          // Names.
          case op::kGlobal:
          case op::kInst: {
            std::string module(in_.Line());
            std::string name(in_.Line());
            if (op_ == op::kInst) ShadowPopMark(shadow);
            ListLexicalName(std::move(module), std::move(name));
            ShadowPush(shadow, {});
            break;
          }
          case op::kStackGlobal: {
            Token name = ShadowPop(shadow);
            Token module = ShadowPop(shadow);
            if (module.kind == Token::kStr && name.kind == Token::kStr) {
              ListLexicalName(std::move(module.text), std::move(name.text));
            } else {
              PickleGlobal g{"", "", op_offset_, false};
              g.via = PickleGlobalVia::kComputed;
              ListLexical(std::move(g));
            }
            ShadowPush(shadow, {});
            break;
          }
          case op::kExt1:
          case op::kExt2:
          case op::kExt4: {
            PickleGlobal g{"", "", op_offset_, false};
            g.via = PickleGlobalVia::kExtension;
            g.extension_code = op_ == op::kExt1 ? in_.U8() : op_ == op::kExt2 ? in_.U16() : in_.U32();
            ListLexical(std::move(g));
            ShadowPush(shadow, {});
            break;
          }
          // Everything else: operands skipped, stack effect kept where it is fixed.
          case op::kProto: {
            uint8_t p = in_.U8();
            if (p > op::kHighestProtocol) Fail(ErrorCode::kUnsupported, "unsupported pickle protocol " + std::to_string(p));
            current_protocol_ = p;
            break;
          }
          case op::kFrame: in_.U64(); break;
          case op::kInt:
          case op::kLong:
          case op::kFloat:
          case op::kPersId: in_.Line(); ShadowPush(shadow, {}); break;
          case op::kBinInt: in_.Skip(4); ShadowPush(shadow, {}); break;
          case op::kBinInt1: in_.Skip(1); ShadowPush(shadow, {}); break;
          case op::kBinInt2: in_.Skip(2); ShadowPush(shadow, {}); break;
          case op::kBinFloat: in_.Skip(8); ShadowPush(shadow, {}); break;
          case op::kLong1: in_.Skip(in_.U8()); ShadowPush(shadow, {}); break;
          case op::kLong4: {
            int32_t n = in_.I32();
            if (n < 0) Fail(ErrorCode::kCorrupt, "LONG4 has a negative byte count");
            in_.Skip(static_cast<uint64_t>(n));
            ShadowPush(shadow, {});
            break;
          }
          case op::kShortBinBytes: in_.Skip(in_.U8()); ShadowPush(shadow, {}); break;
          case op::kBinBytes: in_.Skip(in_.U32()); ShadowPush(shadow, {}); break;
          case op::kBinBytes8:
          case op::kByteArray8: in_.Skip(in_.U64()); ShadowPush(shadow, {}); break;
          case op::kNone:
          case op::kNewTrue:
          case op::kNewFalse:
          case op::kEmptyTuple:
          case op::kEmptyList:
          case op::kEmptyDict:
          case op::kEmptySet:
          case op::kNextBuffer: ShadowPush(shadow, {}); break;
          case op::kTuple:
          case op::kList:
          case op::kDict:
          case op::kFrozenSet:
          case op::kObj: ShadowPopMark(shadow); ShadowPush(shadow, {}); break;
          case op::kSetItems:
          case op::kAppends:
          case op::kAddItems: ShadowPopMark(shadow); break;
          case op::kTuple1:
          case op::kBinPersId:
          case op::kReadonlyBuffer: ShadowPop(shadow); ShadowPush(shadow, {}); break;
          case op::kTuple2:
          case op::kReduce:
          case op::kBuild:
          case op::kNewObj: ShadowPop(shadow); ShadowPop(shadow); ShadowPush(shadow, {}); break;
          case op::kTuple3:
          case op::kNewObjEx: for (int k = 0; k < 3; ++k) ShadowPop(shadow); ShadowPush(shadow, {}); break;
          case op::kAppend: ShadowPop(shadow); break;
          case op::kSetItem: ShadowPop(shadow); ShadowPop(shadow); break;
          default: Fail(ErrorCode::kCorrupt, "unknown opcode " + Hex2(op_));
        }
      }
    } catch (const Error& e) {
      return "@ " + std::to_string(op_offset_) + ": " + e.message();
    } catch (const std::bad_alloc&) {
      // It runs beside the values reading made (after kMaxPickleValues of them, perhaps): the
      // error reading stopped with stays the one said.
      return "@ " + std::to_string(op_offset_) + ": out of memory";
    }
  }
  // The names the lexical pass listed, judged by the resolver as if reading had reached them.
  // A strict resolver's refusal replaces the error reading stopped with: the payload is named,
  // not the construct in front of it (unless reading stopped at a refused name already).
  void JudgeLexicalGlobals(size_t first, Error& stopped) {
    const bool stopped_at_name = stopped.code() == ErrorCode::kRefused && !stopped.refused_global().empty();
    for (size_t i = first; i < globals_.size(); ++i) {
      PickleGlobal& g = globals_[i];
      if (g.via == PickleGlobalVia::kComputed) continue;
      std::string refusal, refused_global;
      if (g.via == PickleGlobalVia::kExtension) {
        if (resolver_.policy() != PicklePolicy::kPermissive) refusal = ExtensionText("EXT", g.extension_code);
      } else {
        try {
          bool allowed = true;
          resolver_.Global(g.module, g.name, allowed, arena_);
          g.allowed = allowed;
        } catch (const Error& r) {
          if (r.code() != ErrorCode::kRefused) throw;
          refusal = r.message();
          refused_global = r.refused_global();
        }
      }
      if (!refusal.empty() && !stopped_at_name) {
        throw Error(ErrorCode::kRefused, refusal + " (found past where reading stopped, " + stopped.message() + ")")
            .SetOffset(g.offset)
            .SetRefusedGlobal(refused_global);
      }
    }
  }

  ByteReader in_;
  ValueArena& arena_;
  PickleResolver& resolver_;
  std::vector<PickleGlobal>& globals_;
  int& protocol_;
  size_t values_start_;
  uint64_t op_offset_ = 0;
  uint64_t op_position_ = 0;
  uint8_t op_ = 0;
  int current_protocol_ = 0;
  uint64_t references_ = 0;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::vector<Value*> memo_dense_;
  std::unordered_map<uint64_t, Value*> memo_sparse_;
  uint64_t memo_size_ = 0;
  uint64_t lexical_listed_ = 0;
  uint64_t stop_listed_at_ = UINT64_MAX;  // offset of a name the machine listed where it stopped
  KeyIndex keys_;
};

Value* Machine::Loop(uint64_t& consumed) {
  for (;;) {
    op_offset_ = in_.offset();
    op_position_ = in_.position();
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
      case op::kInt: Push(TextInt(in_.Line())); break;
      case op::kLong: Push(TextLong(in_.Line())); break;
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
      case op::kAddItems: AddItems(PopMark()); break;
      case op::kFrozenSet: Push(MakeSet(ValueKind::kFrozenSet, PopMark())); break;

      // ---- memo ----
      case op::kPut: {
        std::optional<uint64_t> index = TextMemoIndex(in_.Line());
        if (!index) Fail(ErrorCode::kCorrupt, "negative PUT index");
        Put(*index);
        break;
      }
      case op::kBinPut: Put(in_.U8()); break;
      case op::kLongBinPut: Put(in_.U32()); break;
      case op::kMemoize: Put(memo_size_); break;  // like Python: len(memo), whatever PUT did before
      case op::kGet: {
        std::optional<uint64_t> index = TextMemoIndex(in_.Line());
        if (!index) Fail(ErrorCode::kCorrupt, "GET of a negative memo index");
        Get(*index);
        break;
      }
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
        // Python's _instantiate: cls(*args), or cls.__new__(cls) when there are no arguments.
        Push(Call(cls, args, args->items.empty()));
        break;
      }
      case op::kObj: {
        std::vector<Value*> items = PopMark();
        if (items.empty()) Fail(ErrorCode::kCorrupt, "OBJ without a class");
        Value* cls = items.front();
        Value* args = arena_.Tuple(std::vector<Value*>(items.begin() + 1, items.end()));
        Push(Call(cls, args, args->items.empty()));
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
        Push(Call(cls, args, /*new_object=*/true));
        break;
      }
      case op::kNewObjEx: {
        Value* kwargs = Pop();
        Value* args = Pop();
        Value* cls = Pop();
        if (kwargs->kind != ValueKind::kDict) {
          Fail(ErrorCode::kCorrupt, "NEWOBJ_EX keyword arguments must be a dict, not " + KindText(kwargs));
        }
        if (!kwargs->entries.empty() && resolver_.policy() != PicklePolicy::kPermissive) {
          Fail(ErrorCode::kUnsupported, "NEWOBJ_EX with keyword arguments (calling " + KindText(cls) + ")");
        }
        Push(Call(cls, args, /*new_object=*/true));
        break;
      }
      case op::kBuild: {
        Value* state = Pop();
        Value* object = Pop();
        Push(BuildState(object, state));
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
        uint32_t code = op_ == op::kExt1 ? in_.U8() : op_ == op::kExt2 ? in_.U16() : in_.U32();
        Push(ExtensionGlobal(code));
        break;
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
  return machine.Run(consumed_, lexical_stop_);
}

}  // namespace trove
