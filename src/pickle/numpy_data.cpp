#include "pickle/numpy_data.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "trove/element_codec.h"
#include "trove/error.h"
#include "trove/tensor.h"

namespace trove::numpy_data {
namespace {

constexpr std::string_view kArrayClass = "numpy.ndarray";
constexpr std::string_view kDtypeClass = "numpy.dtype";

struct ArrayType {
  DType dtype;
  ByteOrder order;
};

// numpy's dtype string ("f4", "i8", "b1", "c16": kind and bytes per element) as trove's dtype.
std::optional<DType> FromTypeString(std::string_view s) {
  if (s.size() < 2) return std::nullopt;
  const char kind = s[0];
  const std::string_view size = s.substr(1);
  struct Row { char kind; std::string_view size; DType dtype; };
  static constexpr Row kRows[] = {
      {'b', "1", DType::kBool},     {'i', "1", DType::kInt8},       {'i', "2", DType::kInt16},
      {'i', "4", DType::kInt32},    {'i', "8", DType::kInt64},      {'u', "1", DType::kUInt8},
      {'u', "2", DType::kUInt16},   {'u', "4", DType::kUInt32},     {'u', "8", DType::kUInt64},
      {'f', "2", DType::kFloat16},  {'f', "4", DType::kFloat32},    {'f', "8", DType::kFloat64},
      {'c', "8", DType::kComplex64}, {'c', "16", DType::kComplex128},
  };
  for (const Row& r : kRows) {
    if (r.kind == kind && r.size == size) return r.dtype;
  }
  return std::nullopt;
}

// A built dtype object as an element type trove reads; nullopt for records, subarrays, objects,
// strings, datetimes and anything else without a tensor meaning.
std::optional<ArrayType> TypeOf(const Value* dtype) {
  if (dtype == nullptr || dtype->kind != ValueKind::kObject || dtype->type_name != kDtypeClass) return std::nullopt;
  const Value* args = dtype->args;
  if (args == nullptr || args->items.empty() || args->items[0]->kind != ValueKind::kStr) return std::nullopt;
  std::optional<DType> d = FromTypeString(args->items[0]->text);
  if (!d) return std::nullopt;
  ByteOrder order = ByteOrder::kLittle;  // '<', '|' (one byte) and '=' (native: numpy writes '<' or '>')
  if (const Value* state = dtype->state) {
    // (version, byte order, subarray, names, fields, elsize, alignment, flags[, metadata])
    if (state->kind != ValueKind::kTuple || state->items.size() < 5) return std::nullopt;
    const Value* endian = state->items[1];
    if (endian->kind != ValueKind::kStr) return std::nullopt;
    if (endian->text == ">") order = ByteOrder::kBig;
    else if (endian->text != "<" && endian->text != "|" && endian->text != "=") return std::nullopt;
    for (size_t i = 2; i < 5; ++i) {
      if (state->items[i]->kind != ValueKind::kNone) return std::nullopt;  // subarray, names, fields
    }
  }
  return ArrayType{*d, order};
}

const std::string* RawBytes(const Value* v) {
  // bytes, a bytearray (protocol 5 buffers), or a Python 2 str that was valid UTF-8.
  if (v == nullptr || (v->kind != ValueKind::kBytes && v->kind != ValueKind::kStr)) return nullptr;
  return &v->text;
}

std::optional<std::vector<int64_t>> Shape(const Value* v) {
  if (v == nullptr || (v->kind != ValueKind::kTuple && v->kind != ValueKind::kList)) return std::nullopt;
  if (v->items.size() > kMaxTensorRank) {
    Fail(ErrorCode::kLimit, "numpy array of " + std::to_string(v->items.size()) +
                                " dimensions, more than kMaxTensorRank (" + std::to_string(kMaxTensorRank) + ")");
  }
  std::vector<int64_t> shape;
  for (const Value* d : v->items) {
    if (d->kind != ValueKind::kInt || d->is_big_int() || d->integer < 0) return std::nullopt;
    shape.push_back(d->integer);
  }
  return shape;
}

// How numpy gives back a big-endian array: ndarray.__setstate__ (protocols 0-4) in the
// machine's byte order, _frombuffer (protocol 5) as it was.
enum class Unpickled : uint8_t { kNative, kAsStored };

// The view of a copy of `bytes` as an array of `type` and `shape`, C or Fortran order, in the
// byte order numpy gives it back in (`unpickled`).
TensorView ArrayView(const ArrayType& type, const std::vector<int64_t>& shape, bool fortran, const std::string& bytes,
                     Unpickled unpickled) {
  TensorView view;
  view.dtype = type.dtype;
  view.byte_order = unpickled == Unpickled::kNative ? ByteOrder::kLittle : type.order;
  view.shape = shape;
  view.strides.assign(shape.size(), 1);
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) Fail(ErrorCode::kCorrupt, "numpy array shape overflows");
  }
  uint64_t expected = 0;
  if (__builtin_mul_overflow(numel, ElementSize(type.dtype), &expected)) Fail(ErrorCode::kCorrupt, "numpy array shape overflows");
  if (expected != bytes.size()) {
    Fail(ErrorCode::kCorrupt, "numpy array of shape " + ShapeString(shape) + " and dtype " + std::string(Name(type.dtype)) +
                                  " holds " + std::to_string(bytes.size()) + " bytes, not " + std::to_string(expected));
  }
  view.strides = ContiguousStrides(shape, fortran);
  if (type.order == ByteOrder::kBig && view.byte_order == ByteOrder::kLittle) {
    std::vector<uint8_t> swapped(bytes.begin(), bytes.end());
    ByteSwapElements(swapped.data(), swapped.size() / ElementSize(type.dtype), type.dtype);
    view.storage = SharedBytes::FromVector(std::move(swapped));
  } else {
    view.storage = SharedBytes::CopyOf(bytes.data(), bytes.size());
  }
  view.storage_key = "(numpy array)";
  view.Validate();
  return view;
}

void BecomeTensor(Value* node, TensorView view, ValueArena& arena) {
  node->kind = ValueKind::kTensor;
  node->tensor = arena.AddTensorView(std::move(view));
  node->type_name = kArrayClass;  // a numpy array, as torch.load gives it back
  node->args = nullptr;
  node->state = nullptr;
}

// numpy's scalar class of a dtype ("numpy.float32"; numpy 1's "numpy.bool_").
std::string ScalarClass(DType dtype) {
  return dtype == DType::kBool ? "numpy.bool_" : "numpy." + std::string(Name(dtype));
}

Value* Number(const ArrayType& type, const std::string& raw, ValueArena& arena) {
  if (raw.size() != ElementSize(type.dtype)) return nullptr;
  std::string bytes = raw;
  if (type.order == ByteOrder::kBig) ByteSwapElements(reinterpret_cast<uint8_t*>(bytes.data()), 1, type.dtype);
  const ElementValue e = DecodeElement(type.dtype, reinterpret_cast<const uint8_t*>(bytes.data()));
  Value* number = nullptr;
  switch (e.kind) {
    case ElementValue::Kind::kFloat: number = arena.Float(e.re); break;
    case ElementValue::Kind::kInt: number = arena.Int(e.i); break;
    case ElementValue::Kind::kUInt: {
      if (e.u <= static_cast<uint64_t>(INT64_MAX)) {
        number = arena.Int(static_cast<int64_t>(e.u));
        break;
      }
      std::vector<uint8_t> le(9, 0);  // a ninth byte keeps the sign bit clear
      for (int i = 0; i < 8; ++i) le[static_cast<size_t>(i)] = static_cast<uint8_t>(e.u >> (8 * i));
      number = arena.BigInt(std::move(le));
      break;
    }
    case ElementValue::Kind::kBool: number = arena.Bool(e.b); break;
    case ElementValue::Kind::kComplex:
      number = arena.New(ValueKind::kComplex);
      number->real = e.re;
      number->imag = e.im;
      break;
    case ElementValue::Kind::kFloatPair: return nullptr;
  }
  // What numpy pickled, for a reader that gives numpy scalars back bit for bit (a NaN's payload).
  number->type_name = ScalarClass(type.dtype);
  number->text = std::move(bytes);
  return number;
}

}  // namespace

std::optional<Function> Lookup(std::string_view dotted) {
  static constexpr std::pair<std::string_view, Function> kNames[] = {
      {"numpy.core.multiarray._reconstruct", Function::kReconstruct}, {"numpy._core.multiarray._reconstruct", Function::kReconstruct},
      {"numpy.ndarray", Function::kNdarray},                          {"numpy.dtype", Function::kDtype},
      {"numpy.core.multiarray.scalar", Function::kScalar},            {"numpy._core.multiarray.scalar", Function::kScalar},
      {"numpy.core.numeric._frombuffer", Function::kFromBuffer},      {"numpy._core.numeric._frombuffer", Function::kFromBuffer},
  };
  for (const auto& [name, n] : kNames) {
    if (name == dotted) return n;
  }
  return std::nullopt;
}

Value* Call(Function name, Value* args, ValueArena& arena) {
  const auto& a = args->items;
  switch (name) {
    case Function::kReconstruct:
      // _reconstruct(ndarray, (0,), b'b'): an empty array BUILD fills.
      if (a.size() != 3 || a[0]->kind != ValueKind::kGlobal || a[0]->type_name != kArrayClass) return nullptr;
      return arena.Object(std::string(kArrayClass), args);
    case Function::kDtype:
      if (a.empty() || a.size() > 3 || a[0]->kind != ValueKind::kStr) return nullptr;
      return arena.Object(std::string(kDtypeClass), args);
    case Function::kScalar: {
      // scalar(dtype, raw bytes): one element.
      if (a.size() != 2) return nullptr;
      const std::optional<ArrayType> type = TypeOf(a[0]);
      const std::string* raw = RawBytes(a[1]);
      if (!type || raw == nullptr) return nullptr;
      return Number(*type, *raw, arena);
    }
    case Function::kFromBuffer: {
      // _frombuffer(buffer, dtype, shape, order): protocol 5's contiguous arrays.
      if (a.size() != 4 || a[3]->kind != ValueKind::kStr || (a[3]->text != "C" && a[3]->text != "F")) return nullptr;
      const std::optional<ArrayType> type = TypeOf(a[1]);
      const std::optional<std::vector<int64_t>> shape = Shape(a[2]);
      const std::string* raw = a[0]->kind == ValueKind::kBytes ? &a[0]->text : nullptr;
      if (!type || !shape || raw == nullptr) return nullptr;
      Value* array = arena.Tensor(ArrayView(*type, *shape, a[3]->text == "F", *raw, Unpickled::kAsStored));
      array->type_name = kArrayClass;
      return array;
    }
    case Function::kNdarray: break;
  }
  return nullptr;
}

bool Build(Value* object, Value* state, ValueArena& arena) {
  if (object->kind != ValueKind::kObject || object->unknown_class) return false;
  if (object->type_name == kDtypeClass) {
    object->state = state;
    return true;
  }
  if (object->type_name != kArrayClass) return false;
  object->state = state;  // what stays when the array has no tensor meaning
  if (state->kind != ValueKind::kTuple || (state->items.size() != 5 && state->items.size() != 4)) return true;
  const size_t first = state->items.size() == 5 ? 1 : 0;  // (version,) shape, dtype, is_fortran, data
  const std::optional<std::vector<int64_t>> shape = Shape(state->items[first]);
  const std::optional<ArrayType> type = TypeOf(state->items[first + 1]);
  const Value* fortran = state->items[first + 2];
  const std::string* raw = RawBytes(state->items[first + 3]);
  if (!shape || !type || fortran->kind != ValueKind::kBool || raw == nullptr) return true;
  BecomeTensor(object, ArrayView(*type, *shape, fortran->boolean, *raw, Unpickled::kNative), arena);
  return true;
}

}  // namespace trove::numpy_data
