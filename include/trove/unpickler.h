// trove/unpickler.h: a data-only pickle virtual machine (protocols 0-5).
//
// Unpickler interprets a pickle as data: it builds a Value tree in an arena and never imports,
// calls or evaluates anything. What a global *means* is decided by a PickleResolver: GLOBAL,
// STACK_GLOBAL, INST and OBJ ask it for the node that stands for a name, REDUCE/NEWOBJ/NEWOBJ_EX
// ask it to "call" such a node (it returns a data node, e.g. an empty OrderedDict or a tensor),
// BUILD on anything but a plain dict asks it too, and BINPERSID/PERSID ask it to resolve a
// persistent id (a storage reference in torch files). The resolver refuses what it does not know
// by throwing Error(kRefused); in permissive mode it returns inert object nodes instead.
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
  // `allowed` is set false when the resolver does not know the name (permissive mode);
  // throws Error(kRefused, "refused global 'module.name'") when it refuses.
  virtual Value* Global(const std::string& module, const std::string& name, bool& allowed, ValueArena& arena) = 0;
  // REDUCE / NEWOBJ: `callable` is whatever Global() returned (or any other stack value).
  virtual Value* Call(Value* callable, Value* args, ValueArena& arena) = 0;
  // BUILD on `object` (for a dict, `state` becomes its attributes: OrderedDict._metadata).
  // Returns the object that stays on the stack.
  virtual Value* Build(Value* object, Value* state, ValueArena& arena) = 0;
  // BINPERSID / PERSID.
  virtual Value* PersistentLoad(Value* pid, ValueArena& arena) = 0;
  // Permissive resolvers make kObject nodes for unknown names; the VM then lets SETITEM(S) and
  // APPEND(S) fill such a node (its `entries` / `items`), as Python would call its methods.
  virtual bool permissive() const { return false; }
};

// Understands the plain-data names of Python (protocol-2 spellings included):
// collections.OrderedDict, collections.Counter, builtins.set/frozenset/bytearray/complex/
// list/dict/tuple/int/float/str/bytes/bool, _codecs.encode (bytes in protocol 2),
// copyreg._reconstructor of those builtins. Anything else: refused, or in permissive mode a
// kGlobal node whose calls make kObject nodes and whose BUILD sets the object's state.
// Persistent ids are refused (plain pickles have none). Formats extend it (torch adds its types).
class DataResolver : public PickleResolver {
 public:
  explicit DataResolver(bool permissive = false) : permissive_(permissive) {}
  Value* Global(const std::string& module, const std::string& name, bool& allowed, ValueArena& arena) override;
  Value* Call(Value* callable, Value* args, ValueArena& arena) override;
  Value* Build(Value* object, Value* state, ValueArena& arena) override;
  Value* PersistentLoad(Value* pid, ValueArena& arena) override;
  bool permissive() const override { return permissive_; }

 private:
  bool permissive_;
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
