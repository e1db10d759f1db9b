// trove/unpickler.h: a data-only pickle virtual machine (protocols 0-5).
//
// Unpickler interprets a pickle as data: it builds a Value tree in an arena and never imports,
// calls or evaluates anything. What a global *means* is decided by a PickleResolver: GLOBAL,
// STACK_GLOBAL, INST and OBJ ask it for the node that stands for a name, REDUCE asks it to "call"
// such a node and NEWOBJ/NEWOBJ_EX to make a new instance of it (it returns a data node, e.g. an
// empty OrderedDict or a tensor), BUILD on anything but a plain dict asks it too, and
// BINPERSID/PERSID ask it to resolve a persistent id (a storage reference in torch files). What
// the resolver does with a name it gives no data meaning follows its PicklePolicy
// (trove/document.h): refused with Error(kRefused), or an inert object node.
//
// The grammar is CPython's (Modules/_pickle.c, which torch.load uses): every argument form its
// unpickler accepts is accepted here too (INT/LONG text in base 0, signed memo indices, SETITEM /
// APPEND on any object, BUILD's (state, slotstate) pair...), so no construct can hide a name
// behind a spelling trove would stop at. When reading stops anyway (a cap, a refusal, a form
// Python refuses too), a lexical pass walks the rest of the stream to STOP and lists every name
// it could still reach: GLOBAL/INST texts, STACK_GLOBAL operands that are literal, EXT codes.
// Under a strict resolver, a name of that pass it refuses becomes the error, so a reader names
// the payload rather than the construct in front of it.
//
// The VM is iterative (no recursion on file-controlled depth), checks every length against the
// bytes remaining, and bounds its memory with the caps below. Errors carry the opcode offset as
// "@ <offset>: <reason>" so callers can prefix the file and entry names.
// An Unpickler is single-use and not thread-safe; the arena it fills outlives it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trove/document.h"
#include "trove/value.h"

namespace trove {

// Caps (reasons): the VM's memory must stay bounded whatever the file claims.
// Memo entries: torch writes ~5 per tensor; 2^22 covers ~800k tensors in one pickle.
inline constexpr uint64_t kMaxPickleMemoEntries = uint64_t{1} << 22;
// Value nodes one pickle may create: each costs ~200 bytes, so this keeps a hostile pickle
// under ~800 MB while allowing ~300k tensors (a real state_dict uses ~12 nodes per tensor).
inline constexpr uint64_t kMaxPickleValues = uint64_t{1} << 22;
// LONG4 / BINBYTES8 / BINUNICODE8 lengths are also bounded by the bytes remaining; a big int
// beyond this many bytes has no meaning in a checkpoint.
inline constexpr uint64_t kMaxPickleIntBytes = 1 << 16;
// Decimal digits of a text-protocol INT/LONG: CPython's own default int<->str limit
// (sys.int_info.default_max_str_digits), so Python could not have written more; it also keeps
// the quadratic decimal conversion cheap.
inline constexpr uint64_t kMaxPickleIntDigits = 4300;
// Stack entries plus open MARKs: real pickles keep the stack shallow (containers are filled in
// batches of 1000) and a tuple is bounded by kMaxPickleValues anyway; DUP/GET/MARK push without
// creating values, so they need their own bound.
inline constexpr uint64_t kMaxPickleStackDepth = kMaxPickleValues;
// Container slots filled (items, dict entries, constructor copies): memo references let a few
// bytes add a pointer to a container, or make a resolver copy a whole container, so slots are
// bounded separately from nodes. 2^25 slots is at most ~512 MB and ~100x a real state_dict.
inline constexpr uint64_t kMaxPickleReferences = uint64_t{1} << 25;

// Names the lexical pass lists after reading stopped: bounded so that a stream of a few bytes per
// GLOBAL cannot make the report itself the problem; 2^16 is far beyond any real pickle (torch
// writes a few dozen distinct names) and still shows every name of a hostile one.
inline constexpr uint64_t kMaxPickleLexicalGlobals = uint64_t{1} << 16;

// How a pickle reaches a global.
enum class PickleGlobalVia : uint8_t {
  kName,        // GLOBAL / INST / STACK_GLOBAL text: module and name are set
  kExtension,   // EXT1/2/4: a code looked up in copyreg's extension registry (no name in the file)
  kComputed,    // STACK_GLOBAL seen by the lexical pass whose operands are not literal strings
};

// A name the pickle referenced, for security reports (`trove scan`).
struct PickleGlobal {
  std::string module;
  std::string name;
  uint64_t offset = 0;   // offset of the opcode that named it
  bool allowed = false;  // the resolver knew it
  PickleGlobalVia via = PickleGlobalVia::kName;
  uint32_t extension_code = 0;  // kExtension
  bool after_stop = false;      // listed by the lexical pass, past where reading stopped
};

class PickleResolver {
 public:
  virtual ~PickleResolver() = default;
  // The node for `module.name` (after protocol-2 renames such as __builtin__ -> builtins).
  // `allowed` is set false when the name has no data meaning to the resolver (it is then an
  // inert name under the default and permissive policies); throws Error(kRefused, "refused global
  // 'module.name'...") with the refused name set when its policy refuses it.
  virtual Value* Global(const std::string& module, const std::string& name, bool& allowed, ValueArena& arena) = 0;
  // REDUCE (and INST/OBJ with arguments): `callable` is whatever Global() returned (or any other
  // stack value) called with `args`.
  virtual Value* Call(Value* callable, Value* args, ValueArena& arena) = 0;
  // NEWOBJ / NEWOBJ_EX (and INST/OBJ without arguments): cls.__new__(cls, *args), which for data
  // classes is what calling them makes. By default the same as Call.
  virtual Value* NewObject(Value* cls, Value* args, ValueArena& arena) { return Call(cls, args, arena); }
  // BUILD on `object` (for a dict, `state` becomes its attributes: OrderedDict._metadata).
  // Returns the object that stays on the stack.
  virtual Value* Build(Value* object, Value* state, ValueArena& arena) = 0;
  // BINPERSID / PERSID.
  virtual Value* PersistentLoad(Value* pid, ValueArena& arena) = 0;
  // Under kDefault and kPermissive the VM lets SETITEM(S) and APPEND(S) fill an object of an
  // unknown class (its `entries` / `items`), as Python would call its methods; an object filled by
  // SETITEM(S) right after it was made (no arguments, no state yet) is a dict subclass and becomes
  // a dict keeping its class name. Under kPermissive it also reads on past operations Python
  // would refuse (SETITEM on an int...) and takes EXT codes as names.
  virtual PicklePolicy policy() const { return PicklePolicy::kStrict; }
};

// Understands the plain-data names of Python (protocol-2 spellings included):
// collections.OrderedDict, collections.Counter, collections.defaultdict, argparse.Namespace (a
// dict of its attributes), builtins.set/frozenset/bytearray/complex/list/dict/tuple/int/float/
// str/bytes/bool/object, _codecs.encode (bytes in protocol 2), copyreg._reconstructor (protocol
// 0/1's spelling of instances), and numpy's arrays (numpy.core.multiarray._reconstruct,
// numpy.ndarray, numpy.dtype, numpy.core.numeric._frombuffer: tensors viewing a copy of their
// bytes) and scalars (numpy.core.multiarray.scalar: numbers), numpy 2's numpy._core spellings
// too. Any other name follows the policy: kStrict refuses it; kDefault refuses the dangerous
// ones (pickle/global_class.h: anything but kUnknown) and makes the rest inert objects when
// called (Value::unknown_class), names when only referenced; kPermissive makes every one inert.
// Persistent ids are refused (plain pickles have none). Formats extend it (torch adds its types).
// builtins.getattr is refused under every policy, except in one shape for a resolver that names
// enum classes (EnumMember): Python 3.11 pickles an enum member as getattr(EnumClass, 'NAME'),
// which is read as that member (a global node "module.EnumClass.NAME") when the class is one the
// resolver names and the second argument a constant str naming one of its members; any other
// call of getattr is refused by name (getattr merely referenced stays an inert name).
class DataResolver : public PickleResolver {
 public:
  explicit DataResolver(PicklePolicy policy = PicklePolicy::kStrict) : policy_(policy) {}
  Value* Global(const std::string& module, const std::string& name, bool& allowed, ValueArena& arena) override;
  Value* Call(Value* callable, Value* args, ValueArena& arena) override;
  Value* NewObject(Value* cls, Value* args, ValueArena& arena) override;
  Value* Build(Value* object, Value* state, ValueArena& arena) override;
  Value* PersistentLoad(Value* pid, ValueArena& arena) override;
  PicklePolicy policy() const override { return policy_; }

 protected:
  // A name without a data meaning to any resolver of the chain, judged by the policy: refused, or
  // a name node (allowed = false).
  Value* OtherGlobal(const std::string& dotted, bool& allowed, ValueArena& arena);
  // An inert object of a class the resolvers give no data meaning (Value::unknown_class), or the
  // policy's refusal.
  Value* UnknownObject(Value* cls, Value* args, bool new_object, ValueArena& arena);
  // Enum members this resolver reads from getattr(EnumClass, 'NAME'): true when `enum_class`
  // ("module.Class") is an enum class it names and `member` one of its members. With none (the
  // default), builtins.getattr is refused as the name it is.
  virtual bool ReadsEnumMembers() const { return false; }
  virtual bool EnumMember(const std::string& /*enum_class*/, const std::string& /*member*/) const { return false; }

 private:
  PicklePolicy policy_;
};

class Unpickler {
 public:
  // `base_offset` is added to offsets in errors and reports (the pickle's place in its file).
  Unpickler(const uint8_t* data, uint64_t size, ValueArena& arena, PickleResolver& resolver, uint64_t base_offset = 0);

  // Runs to STOP and returns the result. Throws Error with "@ <offset>: ..." on any problem.
  Value* Load();
  // Bytes consumed by Load() (the offset just after STOP): the next pickle of a stream starts here.
  uint64_t consumed() const { return consumed_; }
  // Every global named, in order, with whether the resolver allowed it.
  const std::vector<PickleGlobal>& globals() const { return globals_; }
  // The highest protocol the PROTO opcode declared (0 if none).
  int protocol() const { return protocol_; }
  // After Load() threw: why the lexical pass ended before STOP ("@ <offset>: <reason>"), or empty
  // when it reached STOP. Names past that point are not listed; callers report it.
  const std::string& lexical_stop() const { return lexical_stop_; }

 private:
  const uint8_t* data_;
  uint64_t size_;
  ValueArena& arena_;
  PickleResolver& resolver_;
  uint64_t base_offset_;
  uint64_t consumed_ = 0;
  int protocol_ = 0;
  std::vector<PickleGlobal> globals_;
  std::string lexical_stop_;
};

}  // namespace trove
