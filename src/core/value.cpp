#include "trove/value.h"

#include <algorithm>
#include <cstdint>
#include <new>

#include <sys/mman.h>

#include "core/little_endian.h"

namespace trove {

std::string_view KindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kNone: return "None";
    case ValueKind::kBool: return "bool";
    case ValueKind::kInt: return "int";
    case ValueKind::kFloat: return "float";
    case ValueKind::kComplex: return "complex";
    case ValueKind::kStr: return "str";
    case ValueKind::kBytes: return "bytes";
    case ValueKind::kList: return "list";
    case ValueKind::kTuple: return "tuple";
    case ValueKind::kSet: return "set";
    case ValueKind::kFrozenSet: return "frozenset";
    case ValueKind::kDict: return "dict";
    case ValueKind::kTensor: return "tensor";
    case ValueKind::kGlobal: return "global";
    case ValueKind::kObject: return "object";
  }
  return "?";
}

std::string Value::IntToString() const {
  if (big_int.empty()) return std::to_string(integer);
  // Two's complement little-endian -> sign and magnitude, then repeated division by 10^9.
  std::vector<uint8_t> mag = big_int;
  bool negative = (mag.back() & 0x80) != 0;
  if (negative) {
    unsigned carry = 1;
    for (auto& b : mag) {
      unsigned v = static_cast<uint8_t>(~b) + carry;
      b = static_cast<uint8_t>(v);
      carry = v >> 8;
    }
  }
  std::vector<uint32_t> limbs;  // little-endian base 2^32
  for (size_t i = 0; i < mag.size(); i += 4) {
    limbs.push_back(static_cast<uint32_t>(LoadLe(mag.data() + i, static_cast<unsigned>(std::min<size_t>(4, mag.size() - i)))));
  }
  std::string digits;
  while (!limbs.empty()) {
    while (!limbs.empty() && limbs.back() == 0) limbs.pop_back();
    if (limbs.empty()) break;
    uint64_t rem = 0;
    for (size_t i = limbs.size(); i-- > 0;) {
      uint64_t cur = (rem << 32) | limbs[i];
      limbs[i] = static_cast<uint32_t>(cur / 1000000000u);
      rem = cur % 1000000000u;
    }
    while (!limbs.empty() && limbs.back() == 0) limbs.pop_back();
    std::string chunk = std::to_string(rem);
    if (!limbs.empty()) chunk.insert(0, 9 - chunk.size(), '0');
    digits.insert(0, chunk);
  }
  if (digits.empty()) digits = "0";
  return negative ? "-" + digits : digits;
}

const Value* Value::Find(std::string_view key) const {
  if (kind != ValueKind::kDict) return nullptr;
  for (const auto& [k, v] : entries)
    if (k->kind == ValueKind::kStr && k->text == key) return v;
  return nullptr;
}

void* ValueArena::AllocateBlock(size_t bytes, bool huge) {
  if (!huge) return ::operator new(bytes);
  // Twice the size, then the unaligned ends given back: an aligned range of exactly one huge page.
  const size_t span = 2 * kHugeBlockBytes;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugeBlockBytes - 1) / kHugeBlockBytes * kHugeBlockBytes;
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = aligned + kHugeBlockBytes;
  if (start + span > end) ::munmap(reinterpret_cast<void*>(end), start + span - end);
#ifdef MADV_HUGEPAGE
  ::madvise(reinterpret_cast<void*>(aligned), kHugeBlockBytes, MADV_HUGEPAGE);  // advice: failure costs only speed
#endif
  return reinterpret_cast<void*>(aligned);
}

void ValueArena::FreeBlock(void* block, bool huge) noexcept {
  if (huge) ::munmap(block, kHugeBlockBytes);
  else ::operator delete(block);  // unsized: clang without -fsized-deallocation has no sized one
}

Value* ValueArena::New(ValueKind kind) {
  Value& v = values_.emplace_back();
  v.kind = kind;
  return &v;
}

Value* ValueArena::Bool(bool b) {
  Value* v = New(ValueKind::kBool);
  v->boolean = b;
  return v;
}

Value* ValueArena::Int(int64_t i) {
  Value* v = New(ValueKind::kInt);
  v->integer = i;
  return v;
}

Value* ValueArena::BigInt(std::vector<uint8_t> le) {
  if (le.empty()) return Int(0);
  // Drop redundant sign-extension bytes.
  while (le.size() > 1) {
    uint8_t top = le.back(), next = le[le.size() - 2];
    if ((top == 0x00 && !(next & 0x80)) || (top == 0xFF && (next & 0x80))) le.pop_back();
    else break;
  }
  if (le.size() <= 8) {
    uint64_t u = LoadLe(le.data(), static_cast<unsigned>(le.size()));
    if ((le.back() & 0x80) && le.size() < 8) u |= ~uint64_t{0} << (8 * le.size());
    return Int(static_cast<int64_t>(u));
  }
  Value* v = New(ValueKind::kInt);
  v->big_int = std::move(le);
  return v;
}

Value* ValueArena::IntFromDecimal(std::string_view digits, bool negative) {
  // Magnitude in base 2^32 limbs: mag = mag * 10^k + chunk, 9 digits at a time.
  std::vector<uint32_t> mag;
  for (size_t i = 0; i < digits.size();) {
    const size_t k = std::min<size_t>(9, digits.size() - i);
    uint32_t chunk = 0, scale = 1;
    for (size_t j = 0; j < k; ++j, ++i) {
      chunk = chunk * 10 + static_cast<uint32_t>(digits[i] - '0');
      scale *= 10;
    }
    uint64_t carry = chunk;
    for (auto& limb : mag) {
      const uint64_t cur = uint64_t{limb} * scale + carry;
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
  return IntFromMagnitude(std::move(bytes), negative);
}

Value* ValueArena::IntFromMagnitude(std::vector<uint8_t> bytes, bool negative) {
  bytes.push_back(0);  // room for the sign bit
  if (negative) {
    unsigned carry = 1;
    for (auto& b : bytes) {
      const unsigned v = static_cast<uint8_t>(~b) + carry;
      b = static_cast<uint8_t>(v);
      carry = v >> 8;
    }
  }
  return BigInt(std::move(bytes));
}

Value* ValueArena::Float(double d) {
  Value* v = New(ValueKind::kFloat);
  v->real = d;
  return v;
}

Value* ValueArena::Str(std::string s) {
  Value* v = New(ValueKind::kStr);
  v->text = std::move(s);
  return v;
}

Value* ValueArena::Bytes(std::string b) {
  Value* v = New(ValueKind::kBytes);
  v->text = std::move(b);
  v->type_name = "bytes";
  return v;
}

Value* ValueArena::Dict(std::string type_name) {
  Value* v = New(ValueKind::kDict);
  v->type_name = std::move(type_name);
  return v;
}

Value* ValueArena::List() { return New(ValueKind::kList); }

Value* ValueArena::Tuple(std::vector<Value*> items) {
  Value* v = New(ValueKind::kTuple);
  v->items = std::move(items);
  return v;
}

Value* ValueArena::Global(std::string dotted_name) {
  Value* v = New(ValueKind::kGlobal);
  v->type_name = std::move(dotted_name);
  return v;
}

Value* ValueArena::Object(std::string type_name, Value* args) {
  Value* v = New(ValueKind::kObject);
  v->type_name = std::move(type_name);
  v->args = args;
  return v;
}

Value* ValueArena::Tensor(TensorView view) {
  TensorView* stored = AddTensorView(std::move(view));
  Value* v = New(ValueKind::kTensor);
  v->tensor = stored;
  return v;
}

}  // namespace trove
