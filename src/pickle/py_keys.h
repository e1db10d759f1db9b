// pickle/py_keys.h: Python's key equality for dict and set insertion on Value nodes.
//
// `d[k] = v` with a key equal to an existing one replaces the value in place (the first key
// object stays), and `s.add(x)` of an equal item does nothing; a pickle that repeats a key must
// not produce a dict with two entries for it (two tensors under one name). Equality follows
// Python for hashable data: str, bytes, None, and numbers across int/bool/float/complex
// (1 == 1.0 == True), tuples element by element. To keep the cost linear in the input, a tuple's
// elements that are themselves containers or objects compare by identity, and hashes are cached
// per node. A KeyIndex is not thread-safe; it lives as long as one load.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trove/value.h"

namespace trove {

class KeyIndex {
 public:
  KeyIndex();
  // dict[key] = value (kDict, or a kObject's entries).
  void SetItem(Value* dict, Value* key, Value* value);
  // set.add(item) (kSet, kFrozenSet).
  void AddItem(Value* set, Value* item);

 private:
  // Open addressing over (hash, position) pairs; containers only grow, so no deletions.
  struct Table {
    std::vector<std::pair<uint64_t, size_t>> slots;  // position kEmpty = free
    size_t used = 0;
    size_t covered = 0;  // members indexed so far
  };
  static constexpr size_t kEmpty = static_cast<size_t>(-1);
  // Small containers are scanned; an index is built once they grow past this many members.
  static constexpr size_t kScanLimit = 8;
  // Strings longer than this have their hash cached per node, so a long key repeated through the
  // memo is hashed once, not once per use.
  static constexpr size_t kCacheHashAbove = 64;

  uint64_t Hash(const Value* v);
  uint64_t ScalarHash(const Value* v) const;
  static void Insert(Table& t, uint64_t hash, size_t position);
  // Brings t up to date with `size` members whose keys key_at(i) returns; returns the position
  // of a member equal to `key`, or kEmpty.
  template <class KeyAt>
  size_t Find(Table& t, size_t size, const Value* key, uint64_t hash, KeyAt key_at);

  uint64_t seed_;
  std::unordered_map<const Value*, Table> tables_;
  std::unordered_map<const Value*, uint64_t> hashes_;
};

// Python `a == b` for the hashable data kinds (see above); identity for everything else.
bool KeyEqual(const Value* a, const Value* b);

}  // namespace trove
