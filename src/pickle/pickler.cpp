// The protocol-2 pickler: a work stack of small tasks instead of recursion. Saving a node pushes
// the tasks CPython's save() would perform for the object it stands for (in reverse, so they run
// in order); containers push one Save per child, so depth costs heap, not C++ stack.
#include "trove/pickler.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/little_endian.h"
#include "pickle/opcodes.h"
#include "core/utf8.h"
#include "trove/error.h"

namespace trove {
namespace {

namespace op = pickle_op;

// CPython's pickle BATCHSIZE: items per APPENDS/SETITEMS.
constexpr size_t kBatchSize = 1000;

// The names Python 3 writes differently in protocols < 3 (fix_imports, the reverse of
// _compat_pickle): the part that data and torch files use.
void RenameForPython2(std::string& module, std::string& name) {
  struct NameMap { std::string_view module, name, old_module, old_name; };
  static constexpr NameMap kNames[] = {
      {"builtins", "str", "__builtin__", "unicode"},  {"builtins", "int", "__builtin__", "long"},
      {"builtins", "range", "__builtin__", "xrange"}, {"builtins", "chr", "__builtin__", "unichr"},
      {"functools", "reduce", "__builtin__", "reduce"}, {"builtins", "zip", "itertools", "izip"},
      {"builtins", "map", "itertools", "imap"},       {"builtins", "filter", "itertools", "ifilter"},
  };
  for (const auto& m : kNames) {
    if (module == m.module && name == m.name) {
      module = m.old_module;
      name = m.old_name;
      return;
    }
  }
  struct ModuleMap { std::string_view module, old_module; };
  static constexpr ModuleMap kModules[] = {
      {"builtins", "__builtin__"}, {"copyreg", "copy_reg"}, {"queue", "Queue"},   {"reprlib", "repr"},
      {"subprocess", "commands"},  {"_pickle", "pickle"},   {"collections.abc", "_abcoll"},
  };
  for (const auto& m : kModules) {
    if (module == m.module) {
      module = m.old_module;
      return;
    }
  }
}

class Writer {
 public:
  explicit Writer(const PickleHook& hook) : hook_(hook) {}

  std::string Run(const Value* root) {
    // Protocol 2 is what torch.save writes. A nested qualname ('a.b' 'Outer.Inner') is looked up
    // attribute by attribute only from protocol 4 on (CPython's find_class), and protocol 2
    // spells it as a getattr call: such a tree is written as protocol 4, its names as Python 3
    // spells them, the nested ones by STACK_GLOBAL as the source named them.
    protocol4_ = HasNestedName(root);
    out_.push_back(static_cast<char>(op::kProto));
    out_.push_back(protocol4_ ? 4 : 2);
    tasks_.push_back({Task::kSave, root});
    while (!tasks_.empty()) {
      Task t = tasks_.back();
      tasks_.pop_back();
      Execute(t);
    }
    out_.push_back(static_cast<char>(op::kStop));
    return std::move(out_);
  }

 private:
  struct Task {
    enum Kind : uint8_t {
      kSave,         // node: the full save() of a node (hook, memo, encoding)
      kSaveNoHook,   // node: a persistent id's own value (CPython does not ask persistent_id for it)
      kOpcode,       // n: one opcode byte
      kComplexParts, // node: BINFLOAT real, BINFLOAT imag
      kGlobal,       // n: index of "module\nname" in strings_, memoized by name
      kFreshStr,     // n: index of UTF-8 text in strings_, a str object nobody else references
      kLatin1,       // the 'latin1' encoding name, one shared (interned) str in CPython
      kMemoize,      // node: BINPUT for the object just built
      kMemoizeFresh, // BINPUT for an anonymous object (never referenced again)
      kEndTuple,     // node, n: TUPLE1-3/TUPLE unless a cycle memoized the tuple meanwhile
      kEndReduce,    // node, n: REDUCE (n = 0) or NEWOBJ (n = 1), then memoize the result (or POP + GET on a cycle)
    };
    Kind kind;
    const Value* node = nullptr;
    size_t n = 0;
  };

  // Tasks for one node are gathered in order, then pushed reversed.
  class Sequence {
   public:
    void Save(const Value* v) { tasks.push_back({Task::kSave, v}); }
    void Opcode(uint8_t code) { tasks.push_back({Task::kOpcode, nullptr, code}); }
    void Add(Task t) { tasks.push_back(t); }
    std::vector<Task> tasks;
  };

  [[noreturn]] static void Fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

  // Whether a node reachable from `root` is named by a nested qualname (Value::module_size);
  // iterative, each node once.
  static bool HasNestedName(const Value* root) {
    std::vector<const Value*> stack{root};
    std::unordered_set<const Value*> seen;
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      if (v == nullptr || !seen.insert(v).second) continue;
      if (v->module_size != 0) return true;
      for (const Value* x : v->items) stack.push_back(x);
      for (const auto& [k, x] : v->entries) {
        stack.push_back(k);
        stack.push_back(x);
      }
      stack.push_back(v->args);
      stack.push_back(v->state);
    }
    return false;
  }

  // ---- raw output ----
  void Byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }
  void Le(uint64_t v, int n) { AppendLe(out_, v, static_cast<unsigned>(n)); }
  void Put(uint64_t index) {
    if (index < 256) {
      Byte(op::kBinPut);
      Byte(static_cast<uint8_t>(index));
    } else {
      Byte(op::kLongBinPut);
      Le(index, 4);
    }
  }
  void Get(uint64_t index) {
    if (index < 256) {
      Byte(op::kBinGet);
      Byte(static_cast<uint8_t>(index));
    } else {
      Byte(op::kLongBinGet);
      Le(index, 4);
    }
  }
  uint64_t NextMemo() {
    // LONG_BINPUT has 32 bits; CPython fails the same way past 2^32 objects.
    if (memo_count_ > 0xFFFFFFFFu) Fail(ErrorCode::kLimit, "more than 2^32 memoized objects");
    return memo_count_++;
  }
  void Unicode(std::string_view utf8) {
    if (utf8.size() > 0xFFFFFFFFu) Fail(ErrorCode::kUnsupported, "a str longer than 4 GiB needs protocol 4");
    Byte(op::kBinUnicode);
    Le(utf8.size(), 4);
    out_.append(utf8);
  }
  void Int(const Value& v) {
    if (!v.is_big_int()) {
      int64_t i = v.integer;
      if (i >= 0 && i < 256) {
        Byte(op::kBinInt1);
        Byte(static_cast<uint8_t>(i));
        return;
      }
      if (i >= 0 && i < 65536) {
        Byte(op::kBinInt2);
        Le(static_cast<uint64_t>(i), 2);
        return;
      }
      if (i >= INT32_MIN && i <= INT32_MAX) {
        Byte(op::kBinInt);
        Le(static_cast<uint32_t>(static_cast<int32_t>(i)), 4);
        return;
      }
    }
    // LONG1/LONG4 carry the shortest two's complement form, as CPython writes it.
    std::vector<uint8_t> b;
    if (v.is_big_int()) {
      b = v.big_int;
    } else {
      for (int s = 0; s < 64; s += 8) b.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v.integer) >> s));
    }
    while (b.size() > 1) {
      uint8_t top = b.back(), next = b[b.size() - 2];
      if ((top == 0x00 && !(next & 0x80)) || (top == 0xFF && (next & 0x80))) b.pop_back();
      else break;
    }
    if (b.size() < 256) {
      Byte(op::kLong1);
      Byte(static_cast<uint8_t>(b.size()));
    } else {
      if (b.size() > 0x7FFFFFFFu) Fail(ErrorCode::kUnsupported, "int too large to pickle");
      Byte(op::kLong4);
      Le(b.size(), 4);
    }
    out_.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  void Float(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    Byte(op::kBinFloat);
    for (int i = 7; i >= 0; --i) Byte(static_cast<uint8_t>(u >> (8 * i)));
  }

  // ---- memo ----
  bool WriteGetIfMemoized(const Value* v) {
    auto it = memo_.find(v);
    if (it == memo_.end()) return false;
    Get(it->second);
    return true;
  }
  void Memoize(const Value* v) {
    uint64_t index = NextMemo();
    memo_.emplace(v, index);
    Put(index);
  }
  size_t Name(std::string s) {
    strings_.push_back(std::move(s));
    return strings_.size() - 1;
  }
  size_t GlobalName(const std::string& dotted) {
    size_t dot = dotted.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == dotted.size()) {
      Fail(ErrorCode::kUsage, "global name '" + dotted + "' is not module.name");
    }
    return GlobalName(dotted.substr(0, dot), dotted.substr(dot + 1));
  }
  // The name of a class or global node: split where the reader recorded its module's end.
  size_t GlobalName(const Value& v) {
    if (v.module_size == 0 || v.module_size >= v.type_name.size() || v.type_name[v.module_size] != '.') {
      return GlobalName(v.type_name);
    }
    const size_t index = GlobalName(v.type_name.substr(0, v.module_size), v.type_name.substr(v.module_size + 1));
    stack_global_.insert(index);
    return index;
  }
  size_t GlobalName(std::string module, std::string name) {
    if (!protocol4_) RenameForPython2(module, name);
    if (module.find('\n') != std::string::npos || name.find('\n') != std::string::npos) {
      Fail(ErrorCode::kUsage, "global name contains a newline");
    }
    return Name(module + "\n" + name);
  }
  // A global: memoized by its name, since a name is one object to CPython. A nested qualname
  // is STACK_GLOBAL of its module and name (protocol 4), as pickle writes it.
  void WriteGlobal(const std::string& line_pair, bool stack_global) {
    auto it = named_memo_.find(line_pair);
    if (it != named_memo_.end()) {
      Get(it->second);
      return;
    }
    if (stack_global) {
      const size_t nl = line_pair.find('\n');
      Unicode(std::string_view(line_pair).substr(0, nl));
      Put(NextMemo());
      Unicode(std::string_view(line_pair).substr(nl + 1));
      Put(NextMemo());
      Byte(op::kStackGlobal);
    } else {
      Byte(op::kGlobal);
      out_.append(line_pair);
      out_.push_back('\n');
    }
    uint64_t index = NextMemo();
    named_memo_.emplace(line_pair, index);
    Put(index);
  }

  // ---- batches ----
  // list.append batches of an exact list (CPython's batch_list_exact): one item is APPEND,
  // otherwise MARK ... APPENDS per 1000, a last batch of one included.
  static void ExactAppends(Sequence& s, const std::vector<Value*>& items) {
    if (items.empty()) return;
    if (items.size() == 1) {
      s.Save(items[0]);
      s.Opcode(op::kAppend);
      return;
    }
    for (size_t i = 0; i < items.size(); i += kBatchSize) {
      s.Opcode(op::kMark);
      for (size_t j = i; j < std::min(items.size(), i + kBatchSize); ++j) s.Save(items[j]);
      s.Opcode(op::kAppends);
    }
  }
  // Items of an exact dict (batch_dict_exact): one pair is SETITEM; otherwise batches of 1000,
  // and CPython's loop writes a final empty MARK SETITEMS when the size is a multiple of 1000.
  static void ExactSetItems(Sequence& s, const std::vector<std::pair<Value*, Value*>>& entries) {
    if (entries.empty()) return;
    if (entries.size() == 1) {
      s.Save(entries[0].first);
      s.Save(entries[0].second);
      s.Opcode(op::kSetItem);
      return;
    }
    size_t i = 0, in_batch;
    do {
      s.Opcode(op::kMark);
      for (in_batch = 0; i < entries.size() && in_batch < kBatchSize; ++i, ++in_batch) {
        s.Save(entries[i].first);
        s.Save(entries[i].second);
      }
      s.Opcode(op::kSetItems);
    } while (in_batch == kBatchSize);
  }
  // Items from an iterator (save_reduce's listitems/dictitems): batches of 1000, a last batch of
  // one item written with APPEND/SETITEM.
  static void IteratorAppends(Sequence& s, const std::vector<Value*>& items) {
    for (size_t i = 0; i < items.size(); i += kBatchSize) {
      size_t end = std::min(items.size(), i + kBatchSize);
      if (end - i == 1) {
        s.Save(items[i]);
        s.Opcode(op::kAppend);
        break;
      }
      s.Opcode(op::kMark);
      for (size_t j = i; j < end; ++j) s.Save(items[j]);
      s.Opcode(op::kAppends);
    }
  }
  static void IteratorSetItems(Sequence& s, const std::vector<std::pair<Value*, Value*>>& entries) {
    for (size_t i = 0; i < entries.size(); i += kBatchSize) {
      size_t end = std::min(entries.size(), i + kBatchSize);
      if (end - i == 1) {
        s.Save(entries[i].first);
        s.Save(entries[i].second);
        s.Opcode(op::kSetItem);
        break;
      }
      s.Opcode(op::kMark);
      for (size_t j = i; j < end; ++j) {
        s.Save(entries[j].first);
        s.Save(entries[j].second);
      }
      s.Opcode(op::kSetItems);
    }
  }

  // ---- encodings ----
  // bytes in protocol 2: _codecs.encode(<latin-1 text>, 'latin1'); b'' is bytes().
  void BytesObject(Sequence& s, const std::string& data, const Value* memo_node) {
    if (data.empty()) {
      s.Add({Task::kGlobal, nullptr, GlobalName("builtins", "bytes")});
      s.Opcode(op::kEmptyTuple);
    } else {
      std::string text;
      text.reserve(data.size() * 2);
      for (unsigned char c : data) utf8::Append(text, c);
      s.Add({Task::kGlobal, nullptr, GlobalName("_codecs", "encode")});
      s.Add({Task::kFreshStr, nullptr, Name(std::move(text))});
      s.Add({Task::kLatin1});
      s.Opcode(op::kTuple2);
      s.Add({Task::kMemoizeFresh});
    }
    s.Add({Task::kEndReduce, memo_node});
  }
  // cls(<fresh list of items>,): how protocol 2 writes set and frozenset.
  void FromList(Sequence& s, const char* cls, const Value& v) {
    s.Add({Task::kGlobal, nullptr, GlobalName("builtins", cls)});
    s.Opcode(op::kEmptyList);
    s.Add({Task::kMemoizeFresh});
    ExactAppends(s, v.items);
    s.Opcode(op::kTuple1);
    s.Add({Task::kMemoizeFresh});
    s.Add({Task::kEndReduce, &v});
  }
  // GLOBAL, the arguments, REDUCE (cls(*args)) or, for new_object, NEWOBJ (cls.__new__(cls, *args)).
  void Call(Sequence& s, size_t global, const Value* args, const Value& v, bool new_object = false) {
    if (args != nullptr && args->kind != ValueKind::kTuple) {
      Fail(ErrorCode::kUsage, "call arguments must be a tuple, not " + std::string(KindName(args->kind)));
    }
    s.Add({Task::kGlobal, nullptr, global});
    if (args == nullptr) s.Opcode(op::kEmptyTuple);
    else s.Save(args);
    s.Add({Task::kEndReduce, &v, new_object ? 1u : 0u});
  }
  void Build(Sequence& s, const Value* state) {
    if (state == nullptr) return;
    // CPython passes no state for an object whose __dict__ is empty.
    if (state->kind == ValueKind::kDict && state->entries.empty() && state->state == nullptr) return;
    s.Save(state);
    s.Opcode(op::kBuild);
  }

  void Encode(Sequence& s, const Value& v) {
    switch (v.kind) {
      case ValueKind::kNone: s.Opcode(op::kNone); return;
      case ValueKind::kBool: s.Opcode(v.boolean ? op::kNewTrue : op::kNewFalse); return;
      case ValueKind::kInt: Int(v); return;
      case ValueKind::kFloat: Float(v.real); return;
      case ValueKind::kStr:
        Unicode(v.text);
        Memoize(&v);
        return;
      case ValueKind::kComplex:
        s.Add({Task::kGlobal, nullptr, GlobalName("builtins", "complex")});
        s.Add({Task::kComplexParts, &v});
        s.Opcode(op::kTuple2);
        s.Add({Task::kMemoizeFresh});
        s.Add({Task::kEndReduce, &v});
        return;
      case ValueKind::kBytes:
        if (v.type_name == "bytearray") {
          s.Add({Task::kGlobal, nullptr, GlobalName("builtins", "bytearray")});
          if (v.text.empty()) {
            s.Opcode(op::kEmptyTuple);
          } else {
            BytesObject(s, v.text, nullptr);
            s.Opcode(op::kTuple1);
            s.Add({Task::kMemoizeFresh});
          }
          s.Add({Task::kEndReduce, &v});
        } else {
          BytesObject(s, v.text, &v);
        }
        return;
      case ValueKind::kTuple:
        if (v.items.empty()) {
          s.Opcode(op::kEmptyTuple);
          return;
        }
        if (v.items.size() > 3) s.Opcode(op::kMark);
        for (const Value* x : v.items) s.Save(x);
        s.Add({Task::kEndTuple, &v, v.items.size()});
        return;
      case ValueKind::kList:
        s.Opcode(op::kEmptyList);
        s.Add({Task::kMemoize, &v});
        ExactAppends(s, v.items);
        return;
      case ValueKind::kSet: FromList(s, "set", v); return;
      case ValueKind::kFrozenSet: FromList(s, "frozenset", v); return;
      case ValueKind::kDict:
        if (v.type_name == "dict" || v.type_name.empty()) {
          s.Opcode(op::kEmptyDict);
          s.Add({Task::kMemoize, &v});
          ExactSetItems(s, v.entries);
          Build(s, v.state);
        } else if (v.type_name == "collections.OrderedDict") {
          Call(s, GlobalName(v.type_name), nullptr, v);
          IteratorSetItems(s, v.entries);
          Build(s, v.state);
        } else if (v.type_name == "collections.Counter") {
          // Counter.__reduce__: (Counter, (dict(self),)), attributes not kept (as in CPython).
          s.Add({Task::kGlobal, nullptr, GlobalName(v.type_name)});
          s.Opcode(op::kEmptyDict);
          s.Add({Task::kMemoizeFresh});
          ExactSetItems(s, v.entries);
          s.Opcode(op::kTuple1);
          s.Add({Task::kMemoizeFresh});
          s.Add({Task::kEndReduce, &v});
        } else {
          // Another class (collections.defaultdict, a dict subclass): made as the reader recorded
          // it (cls(*args) or cls.__new__(cls, *args)), then filled and given its attributes.
          Call(s, GlobalName(v), v.args, v, v.new_object);
          IteratorSetItems(s, v.entries);
          Build(s, v.state);
        }
        return;
      case ValueKind::kGlobal: s.Add({Task::kGlobal, nullptr, GlobalName(v)}); return;
      case ValueKind::kObject:
        Call(s, GlobalName(v), v.args, v, v.new_object);
        IteratorAppends(s, v.items);
        IteratorSetItems(s, v.entries);
        Build(s, v.state);
        return;
      case ValueKind::kTensor: Fail(ErrorCode::kUnsupported, "cannot pickle a tensor without a hook");
    }
    Fail(ErrorCode::kUsage, "unknown value kind");
  }

  void Save(const Value* v, bool ask_hook) {
    if (v == nullptr) Fail(ErrorCode::kUsage, "null value in the tree");
    // A node pickled already is a memo GET, without asking the hook again: a tensor shared by a
    // million keys makes its replacement once, not a million times. (A persistent id is never
    // memoized, so such a node still asks the hook each time, as Python's pickler does.)
    if (WriteGetIfMemoized(v)) return;
    std::optional<PickleOverride> replacement;
    if (ask_hook && hook_) replacement = hook_(*v);
    Sequence s;
    if (replacement && replacement->persistent_id != nullptr) {
      s.Add({Task::kSaveNoHook, replacement->persistent_id});
      s.Opcode(op::kBinPersId);
    } else if (replacement) {
      Call(s, GlobalName(replacement->module, replacement->name), replacement->args, *v);
      Build(s, replacement->state);
    } else {
      Encode(s, *v);
    }
    for (size_t i = s.tasks.size(); i-- > 0;) tasks_.push_back(s.tasks[i]);
  }

  void Execute(const Task& t) {
    switch (t.kind) {
      case Task::kSave: Save(t.node, true); return;
      case Task::kSaveNoHook: Save(t.node, false); return;
      case Task::kOpcode: Byte(static_cast<uint8_t>(t.n)); return;
      case Task::kComplexParts:
        Float(t.node->real);
        Float(t.node->imag);
        return;
      case Task::kGlobal: WriteGlobal(strings_[t.n], stack_global_.count(t.n) > 0); return;
      case Task::kFreshStr:
        Unicode(strings_[t.n]);
        Put(NextMemo());
        return;
      case Task::kLatin1: {
        static const std::string kKey = std::string(1, '\0') + "latin1";
        auto it = named_memo_.find(kKey);
        if (it != named_memo_.end()) {
          Get(it->second);
        } else {
          Unicode("latin1");
          uint64_t index = NextMemo();
          named_memo_.emplace(kKey, index);
          Put(index);
        }
        return;
      }
      case Task::kMemoize: Memoize(t.node); return;
      case Task::kMemoizeFresh: Put(NextMemo()); return;
      case Task::kEndTuple: {
        auto it = memo_.find(t.node);
        if (it != memo_.end()) {
          // The tuple was reached again through a mutable child and is already on the memo:
          // drop what was built and fetch it, as CPython does.
          if (t.n <= 3) {
            for (size_t i = 0; i < t.n; ++i) Byte(op::kPop);
          } else {
            Byte(op::kPopMark);
          }
          Get(it->second);
          return;
        }
        Byte(t.n == 1 ? op::kTuple1 : t.n == 2 ? op::kTuple2 : t.n == 3 ? op::kTuple3 : op::kTuple);
        Memoize(t.node);
        return;
      }
      case Task::kEndReduce: {
        Byte(t.n == 1 ? op::kNewObj : op::kReduce);
        if (t.node == nullptr) {  // an anonymous object (bytes inside a bytearray)
          Put(NextMemo());
          return;
        }
        auto it = memo_.find(t.node);
        if (it != memo_.end()) {
          Byte(op::kPop);
          Get(it->second);
          return;
        }
        Memoize(t.node);
        return;
      }
    }
  }

  const PickleHook& hook_;
  std::string out_;
  std::vector<Task> tasks_;
  std::unordered_map<const Value*, uint64_t> memo_;
  std::unordered_map<std::string, uint64_t> named_memo_;
  std::deque<std::string> strings_;
  std::unordered_set<size_t> stack_global_;  // indices in strings_ of nested qualnames
  bool protocol4_ = false;
  uint64_t memo_count_ = 0;
};

}  // namespace

std::string Pickler::Dump(const Value* root) { return Writer(hook_).Run(root); }

std::string PickleValue(const Value* root) { return Pickler().Dump(root); }

}  // namespace trove
