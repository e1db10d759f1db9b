// trove/value.h: the value tree every reader produces and every writer consumes.
//
// A Value is one node: None, bool, int (any size), float, complex, str, bytes, list, tuple, set,
// dict (ordered, keys of any kind), tensor, a Python name (global), or an inert object (class
// name, constructor arguments, state) that stands for anything trove understands only as data.
// Nothing is ever imported or run: an object node is a record of what the file said.
// Two kinds carry a class name of their own: a dict (dict subclasses such as
// collections.defaultdict or argparse.Namespace keep theirs) and a tuple whose type_name is
// "torch.Size" (a torch.Size: a tuple of ints that writers must keep a Size or refuse).
//
// Nodes live in a ValueArena and point to each other with raw pointers; the arena owns them all
// and frees them without recursion, so trees of any depth, shared subtrees (pickle memo) and
// even cycles are safe to hold and to drop. Walkers must still bound their work (see document.h).
// An arena is not thread-safe for writing; a finished tree may be read from many threads.
#pragma once

#include <cstdint>
#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trove/tensor.h"

namespace trove {

enum class ValueKind : uint8_t {
  kNone, kBool, kInt, kFloat, kComplex, kStr, kBytes,
  kList, kTuple, kSet, kFrozenSet, kDict,
  kTensor,  // `tensor` points to the view
  kGlobal,  // a Python name (type_name = "module.name"), e.g. a dtype or a class used as a value
  kObject,  // an inert object: type_name, args (constructor arguments), state (BUILD / __dict__)
};

std::string_view KindName(ValueKind kind);

struct Value {
  ValueKind kind = ValueKind::kNone;
  bool boolean = false;
  // kObject: made as cls.__new__(cls, *args) (NEWOBJ, copyreg._reconstructor) rather than by
  // calling cls(*args) (REDUCE): a writer gives it back the same way.
  bool new_object = false;
  // kObject: its class is one trove gives no data meaning (read under the default or permissive
  // pickle policy as an inert object; see document.h's PicklePolicy). Other objects (a
  // torch.device, a numpy dtype, tensordict's classes) are data trove understands.
  bool unknown_class = false;
  // kGlobal, kObject, kDict of a class: the length of type_name's module part when the name is a
  // nested qualname (protocol 4's STACK_GLOBAL of 'a.b' and 'Outer.Inner' is "a.b.Outer.Inner",
  // module_size 3); 0 when the module is everything before the last '.'. (Here it fills the
  // padding before `integer`: a Value stays the size it was.)
  uint32_t module_size = 0;
  int64_t integer = 0;                // kInt when it fits in 64 bits (big_int empty)
  std::vector<uint8_t> big_int;       // kInt beyond 64 bits: little-endian two's complement
  double real = 0, imag = 0;          // kFloat (real), kComplex
  std::string text;                   // kStr (UTF-8), kBytes (raw bytes), a numpy scalar's bytes
  std::vector<Value*> items;          // kList, kTuple, kSet, kFrozenSet; kObject: what APPEND(S) added
  // kDict, in insertion order; kObject: what SETITEM(S) set on it after its state.
  std::vector<std::pair<Value*, Value*>> entries;
  TensorView* tensor = nullptr;       // kTensor (owned by the arena)
  // kDict: the Python class ("collections.OrderedDict", "dict", "tensordict:TensorDict",
  // "collections.defaultdict", "argparse.Namespace", a dict subclass's "module.name"...);
  // kBytes: "bytes" or "bytearray"; kTuple: "" or "torch.Size"; kGlobal/kObject: "module.name";
  // kTensor: "" or "numpy.ndarray" (an array numpy pickled); kBool, kInt, kFloat, kComplex: ""
  // or numpy's scalar class ("numpy.float32", "numpy.bool_"), whose bytes `text` then holds.
  std::string type_name;
  // kObject: constructor arguments (a tuple), may be null; kDict: a dict subclass's constructor
  // arguments when it has some (collections.defaultdict: its default factory), else null.
  Value* args = nullptr;
  Value* state = nullptr;             // kObject and kDict: BUILD state / attributes, may be null

  bool is_container() const {
    return kind == ValueKind::kList || kind == ValueKind::kTuple || kind == ValueKind::kSet ||
           kind == ValueKind::kFrozenSet || kind == ValueKind::kDict;
  }
  bool is_big_int() const { return kind == ValueKind::kInt && !big_int.empty(); }
  // Decimal text of an int of any size.
  std::string IntToString() const;
  // Looks up a dict entry by string key; null when absent or not a dict.
  const Value* Find(std::string_view key) const;
};

class ValueArena {
 public:
  ValueArena() = default;
  ValueArena(const ValueArena&) = delete;
  ValueArena& operator=(const ValueArena&) = delete;

  Value* New(ValueKind kind);
  Value* None() { return New(ValueKind::kNone); }
  Value* Bool(bool b);
  Value* Int(int64_t i);
  Value* BigInt(std::vector<uint8_t> le_twos_complement);  // normalises to Int when it fits
  // An int from decimal digits ('0'-'9' only, the caller's cap on their count applied: the
  // conversion is quadratic in it), negated when `negative`.
  Value* IntFromDecimal(std::string_view digits, bool negative);
  // An int from its magnitude (little-endian, unsigned), negated when `negative`.
  Value* IntFromMagnitude(std::vector<uint8_t> magnitude_le, bool negative);
  Value* Float(double d);
  Value* Str(std::string s);
  Value* Bytes(std::string b);
  Value* Dict(std::string type_name = "dict");
  Value* List();
  Value* Tuple(std::vector<Value*> items = {});
  Value* Global(std::string dotted_name);
  Value* Object(std::string type_name, Value* args);
  Value* Tensor(TensorView view);  // stores the view in the arena

  size_t size() const { return values_.size(); }
  // Every node made so far, in creation order (for whole-tree edits without walking paths).
  template <class F>
  void ForEachValue(F&& fn) {
    values_.ForEach([&](Value& v) { fn(v); });
  }
  template <class F>
  void ForEachValue(F&& fn) const {
    values_.ForEach([&](const Value& v) { fn(v); });
  }
  // A view owned by the arena without a node of its own (to re-point an existing tensor node).
  TensorView* AddTensorView(TensorView view) {
    TensorView& made = tensors_.emplace_back();
    made = std::move(view);
    return &made;
  }

 private:
  // Raw memory for blocks of nodes. A block of kHugeBlockBytes is a mapping of its own, aligned to
  // that size and advised to be backed by one transparent huge page: a .pt of 100,000 tensors
  // makes 1.5 million nodes (290 MB), and a page fault per 4 KiB of them was a quarter of a hot
  // `info` on a virtual machine (docs/performance.md). Smaller blocks come from operator new.
  static constexpr size_t kHugeBlockBytes = size_t{2} << 20;
  static void* AllocateBlock(size_t bytes, bool huge);
  static void FreeBlock(void* block, bool huge) noexcept;

  // Elements that never move once made, in blocks that grow from 8 elements to kHugeBlockBytes,
  // each block one allocation (a std::deque's blocks hold two Values: one malloc per two nodes was
  // a fifth of a hot `info` of a .pt of 100,000 tensors). An element is constructed when made.
  template <class T>
  class StableBlocks {
   public:
    StableBlocks() = default;
    StableBlocks(const StableBlocks&) = delete;
    StableBlocks& operator=(const StableBlocks&) = delete;
    ~StableBlocks() {
      ForEach([](T& item) { item.~T(); });
      for (const Block& b : blocks_) FreeBlock(b.items, b.capacity == kLargestBlock);
    }
    T& emplace_back() {
      if (blocks_.empty() || last_used_ == blocks_.back().capacity) {
        const size_t capacity = blocks_.empty() ? kFirstBlock : std::min(blocks_.back().capacity * 2, kLargestBlock);
        blocks_.reserve(blocks_.size() + 1);  // the push below cannot throw and leak the block
        void* raw = AllocateBlock(capacity * sizeof(T), capacity == kLargestBlock);
        blocks_.push_back({static_cast<T*>(raw), capacity});
        last_used_ = 0;
      }
      T* made = ::new (static_cast<void*>(blocks_.back().items + last_used_)) T();
      ++last_used_;
      ++size_;
      return *made;
    }
    size_t size() const { return size_; }
    template <class F>
    void ForEach(F&& fn) {
      for (size_t b = 0; b < blocks_.size(); ++b) {
        const size_t used = b + 1 == blocks_.size() ? last_used_ : blocks_[b].capacity;
        for (size_t i = 0; i < used; ++i) fn(blocks_[b].items[i]);
      }
    }
    template <class F>
    void ForEach(F&& fn) const {
      for (size_t b = 0; b < blocks_.size(); ++b) {
        const size_t used = b + 1 == blocks_.size() ? last_used_ : blocks_[b].capacity;
        for (size_t i = 0; i < used; ++i) fn(static_cast<const T&>(blocks_[b].items[i]));
      }
    }

   private:
    static_assert(sizeof(T) <= kHugeBlockBytes / 8);
    // The largest block fills one huge page.
    static constexpr size_t kFirstBlock = 8, kLargestBlock = kHugeBlockBytes / sizeof(T);
    struct Block {
      T* items;
      size_t capacity;
    };
    std::vector<Block> blocks_;
    size_t last_used_ = 0;  // of the last block
    size_t size_ = 0;
  };

  StableBlocks<Value> values_;
  StableBlocks<TensorView> tensors_;
};

}  // namespace trove
