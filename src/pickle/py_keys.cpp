#include "pickle/py_keys.h"

#include <cmath>
#include <cstring>
#include <atomic>
#include <random>

namespace trove {
namespace {

bool IsNumber(const Value* v) {
  return v->kind == ValueKind::kInt || v->kind == ValueKind::kBool || v->kind == ValueKind::kFloat ||
         v->kind == ValueKind::kComplex;
}

bool IsScalar(const Value* v) {
  return IsNumber(v) || v->kind == ValueKind::kStr || v->kind == ValueKind::kBytes || v->kind == ValueKind::kNone;
}

// A number reduced to the form that makes equal numbers compare equal: an int64 when it is one,
// else the big-int bytes, else a (real, imag) pair.
struct Number {
  enum { kSmall, kBig, kReal } form;
  int64_t small = 0;
  const std::vector<uint8_t>* big = nullptr;
  double re = 0, im = 0;
};

Number Normalize(const Value* v) {
  Number n{};
  switch (v->kind) {
    case ValueKind::kBool: n.form = Number::kSmall; n.small = v->boolean ? 1 : 0; return n;
    case ValueKind::kInt:
      if (v->is_big_int()) { n.form = Number::kBig; n.big = &v->big_int; }
      else { n.form = Number::kSmall; n.small = v->integer; }
      return n;
    default: break;
  }
  n.re = v->real;
  n.im = v->kind == ValueKind::kComplex ? v->imag : 0.0;
  // 2^63 as a double: integral reals in [-2^63, 2^63) are exactly int64 values.
  constexpr double kTwo63 = 9223372036854775808.0;
  if (n.im == 0.0 && std::isfinite(n.re) && std::trunc(n.re) == n.re && n.re >= -kTwo63 && n.re < kTwo63) {
    n.form = Number::kSmall;
    n.small = static_cast<int64_t>(n.re);
  } else {
    n.form = Number::kReal;
  }
  return n;
}

bool ScalarEqual(const Value* a, const Value* b) {
  if (a == b) return true;
  if (IsNumber(a) && IsNumber(b)) {
    Number x = Normalize(a), y = Normalize(b);
    if (x.form != y.form) return false;
    switch (x.form) {
      case Number::kSmall: return x.small == y.small;
      case Number::kBig: return *x.big == *y.big;
      case Number::kReal: return x.re == y.re && x.im == y.im;
    }
    return false;
  }
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case ValueKind::kNone: return true;
    case ValueKind::kStr:
    case ValueKind::kBytes: return a->text == b->text;
    default: return false;
  }
}

// Hashes are keyed with a per-index seed: a file cannot be crafted offline so that all its keys
// land in one bucket (which would make loading quadratic).
uint64_t Fmix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  return h;
}

uint64_t Mix(uint64_t h, uint64_t x) { return Fmix(h ^ Fmix(x + 0x9E3779B97F4A7C15ull)); }

uint64_t HashBytes(uint64_t seed, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = Fmix(seed ^ n);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ Fmix(w)) * 0x9E3779B97F4A7C15ull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p, n);
  return Fmix(h ^ tail ^ (uint64_t{n} << 56));
}

}  // namespace

KeyIndex::KeyIndex() {
  // One draw from the OS per process (random_device may open a file); each index then gets its
  // own seed from a counter.
  static const uint64_t process_seed = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  seed_ = Fmix(process_seed + counter.fetch_add(1, std::memory_order_relaxed));
}

bool KeyEqual(const Value* a, const Value* b) {
  if (a == b) return true;
  if (IsScalar(a) && IsScalar(b)) return ScalarEqual(a, b);
  if (a->kind == ValueKind::kTuple && b->kind == ValueKind::kTuple) {
    if (a->items.size() != b->items.size()) return false;
    for (size_t i = 0; i < a->items.size(); ++i) {
      const Value* x = a->items[i];
      const Value* y = b->items[i];
      if (x == y) continue;
      if (!IsScalar(x) || !IsScalar(y) || !ScalarEqual(x, y)) return false;
    }
    return true;
  }
  return false;
}

uint64_t KeyIndex::ScalarHash(const Value* v) const {
  if (IsNumber(v)) {
    Number n = Normalize(v);
    switch (n.form) {
      case Number::kSmall: return Mix(seed_ + 1, static_cast<uint64_t>(n.small));
      case Number::kBig: return HashBytes(seed_ + 2, n.big->data(), n.big->size());
      case Number::kReal: {
        uint64_t r, i;
        std::memcpy(&r, &n.re, 8);
        std::memcpy(&i, &n.im, 8);
        return Mix(Mix(seed_ + 3, r), i);
      }
    }
  }
  switch (v->kind) {
    case ValueKind::kStr: return HashBytes(seed_ + 4, v->text.data(), v->text.size());
    case ValueKind::kBytes: return HashBytes(seed_ + 5, v->text.data(), v->text.size());
    default: return Fmix(seed_ + 6);  // None
  }
}

uint64_t KeyIndex::Hash(const Value* v) {
  if (!IsScalar(v) && v->kind != ValueKind::kTuple) return Mix(seed_ + 7, reinterpret_cast<uintptr_t>(v));
  bool cache = v->kind == ValueKind::kTuple || v->text.size() > kCacheHashAbove;
  if (!cache) return ScalarHash(v);
  auto it = hashes_.find(v);
  if (it != hashes_.end()) return it->second;
  uint64_t h;
  if (v->kind == ValueKind::kTuple) {
    h = Mix(seed_ + 8, v->items.size());
    for (const Value* x : v->items) h = Mix(h, IsScalar(x) ? Hash(x) : Mix(seed_ + 7, reinterpret_cast<uintptr_t>(x)));
  } else {
    h = ScalarHash(v);
  }
  hashes_.emplace(v, h);
  return h;
}

void KeyIndex::Insert(Table& t, uint64_t hash, size_t position) {
  if (2 * (t.used + 1) > t.slots.size()) {
    std::vector<std::pair<uint64_t, size_t>> old = std::move(t.slots);
    t.slots.assign(old.empty() ? 32 : old.size() * 2, {0, kEmpty});
    t.used = 0;
    for (const auto& [h, p] : old) {
      if (p != kEmpty) Insert(t, h, p);
    }
  }
  size_t mask = t.slots.size() - 1;
  size_t i = hash & mask;
  while (t.slots[i].second != kEmpty) i = (i + 1) & mask;
  t.slots[i] = {hash, position};
  ++t.used;
}

template <class KeyAt>
size_t KeyIndex::Find(Table& t, size_t size, const Value* key, uint64_t hash, KeyAt key_at) {
  if (t.covered > size) t = Table{};  // the container shrank behind our back: start over
  for (; t.covered < size; ++t.covered) Insert(t, Hash(key_at(t.covered)), t.covered);
  if (t.slots.empty()) return kEmpty;
  size_t mask = t.slots.size() - 1;
  for (size_t i = hash & mask; t.slots[i].second != kEmpty; i = (i + 1) & mask) {
    if (t.slots[i].first == hash && KeyEqual(key_at(t.slots[i].second), key)) return t.slots[i].second;
  }
  return kEmpty;
}

void KeyIndex::SetItem(Value* dict, Value* key, Value* value) {
  auto& entries = dict->entries;
  if (entries.size() < kScanLimit) {
    for (auto& e : entries) {
      if (KeyEqual(e.first, key)) { e.second = value; return; }
    }
    entries.emplace_back(key, value);
    return;
  }
  Table& t = tables_[dict];
  uint64_t h = Hash(key);
  size_t at = Find(t, entries.size(), key, h, [&](size_t i) { return entries[i].first; });
  if (at != kEmpty) {
    entries[at].second = value;
    return;
  }
  entries.emplace_back(key, value);
  Insert(t, h, t.covered++);
}

void KeyIndex::AddItem(Value* set, Value* item) {
  auto& items = set->items;
  if (items.size() < kScanLimit) {
    for (const Value* x : items) {
      if (KeyEqual(x, item)) return;
    }
    items.push_back(item);
    return;
  }
  Table& t = tables_[set];
  uint64_t h = Hash(item);
  if (Find(t, items.size(), item, h, [&](size_t i) { return items[i]; }) != kEmpty) return;
  items.push_back(item);
  Insert(t, h, t.covered++);
}

}  // namespace trove
