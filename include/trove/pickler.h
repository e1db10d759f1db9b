// trove/pickler.h: writes a Value tree as a protocol-2 pickle, byte for byte as CPython does.
//
// For data, the output equals `pickle.dumps(obj, protocol=2)` of the same Python object: the same
// opcodes (BININT1/BININT2/BININT/LONG1/LONG4, BINUNICODE, batches of 1000 with CPython's single-
// item and exact-dict quirks, TUPLE1-3, bytes as `_codecs.encode`, sets/complex/OrderedDict/
// Counter as REDUCE of their class; other dict classes and objects as REDUCE, or NEWOBJ where
// Value::new_object says so, of their class and arguments, then SETITEMS/APPENDS and BUILD of
// what the reader recorded) and the same memo numbering: a node is memoized where CPython
// memoizes the object it stands for, and a node met again (same pointer) is a BINGET, so sharing
// and cycles survive. A global is memoized by its name (one Python object per name).
//
// What the pickler cannot know — how a tensor or a storage is written — a hook decides: it may
// replace any node by a call (GLOBAL + args tuple + REDUCE [+ BUILD]) or a persistent id
// (value + BINPERSID), which is what torch.save writes (`torch._utils._rebuild_tensor_v2` of a
// `('storage', <class>, key, location, numel)` persistent id). With nodes shared the way torch
// shares its objects (one 'storage' and one 'cpu' string, one key string per storage), the output
// is byte-identical to torch 1.13's data.pkl.
//
// The pickler is iterative (any depth), single-use per Dump call and not thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "trove/value.h"

namespace trove {

// How a node is written instead of its own encoding.
struct PickleOverride {
  // A persistent id: when non-null, this value (usually a tuple) is saved, then BINPERSID. As in
  // CPython the hook is asked first, before the memo, and the result is not memoized.
  const Value* persistent_id = nullptr;
  // Otherwise a call: GLOBAL module name (memoized by name), `args` (a kTuple node, saved like any
  // value; null = EMPTY_TUPLE), REDUCE, the result memoized under the node; then, when non-null,
  // `state` and BUILD.
  std::string module;
  std::string name;
  const Value* args = nullptr;
  const Value* state = nullptr;
};

// Asked for every node before it is written (but not for a persistent id's own value);
// std::nullopt = the built-in encoding.
using PickleHook = std::function<std::optional<PickleOverride>(const Value& node)>;

class Pickler {
 public:
  explicit Pickler(PickleHook hook = {}) : hook_(std::move(hook)) {}

  // PROTO 2, `root`, STOP. Throws Error(kUnsupported) for a node it cannot encode (a tensor with
  // no hook) and Error(kUsage) for malformed nodes (a class name that is not module.name).
  std::string Dump(const Value* root);

 private:
  PickleHook hook_;
};

// Pickler().Dump(root).
std::string PickleValue(const Value* root);

}  // namespace trove
