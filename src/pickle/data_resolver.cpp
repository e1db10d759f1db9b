// DataResolver: the plain-data names of Python, interpreted without running anything.
//
// Each known name is a constructor of data: calling it builds the Value Python would have built
// (an OrderedDict, a set, bytes from _codecs.encode, a tensor from a numpy array...). Arguments
// are checked by kind; a call that does not fit is refused (strict) or recorded as an inert
// object (default, permissive), so a file can never make the resolver guess. Names without a
// data meaning follow the policy (trove/unpickler.h).
#include <cmath>
#include <optional>
#include <string_view>
#include <utility>

#include "pickle/global_class.h"
#include "pickle/numpy_data.h"
#include "pickle/py_keys.h"
#include "core/utf8.h"
#include "trove/error.h"
#include "trove/unpickler.h"

namespace trove {
namespace {

enum class Known {
  kOrderedDict, kCounter, kSet, kFrozenSet, kByteArray, kComplex, kCodecsEncode,
  kList, kDict, kTuple, kStr, kInt, kFloat, kBool, kBytes, kReconstructor,
  kDefaultDict, kNamespace, kObject,
};

std::optional<Known> Lookup(std::string_view dotted) {
  static constexpr std::pair<std::string_view, Known> kNames[] = {
      {"collections.OrderedDict", Known::kOrderedDict}, {"collections.Counter", Known::kCounter},
      {"builtins.set", Known::kSet},                     {"builtins.frozenset", Known::kFrozenSet},
      {"builtins.bytearray", Known::kByteArray},         {"builtins.complex", Known::kComplex},
      {"_codecs.encode", Known::kCodecsEncode},          {"builtins.list", Known::kList},
      {"builtins.dict", Known::kDict},                   {"builtins.tuple", Known::kTuple},
      {"builtins.str", Known::kStr},                     {"builtins.int", Known::kInt},
      {"builtins.float", Known::kFloat},                 {"builtins.bool", Known::kBool},
      {"builtins.bytes", Known::kBytes},                 {"copyreg._reconstructor", Known::kReconstructor},
      {"collections.defaultdict", Known::kDefaultDict},  {"argparse.Namespace", Known::kNamespace},
      // The base of protocol 0/1 instances (copyreg._reconstructor(cls, object, None)).
      {"builtins.object", Known::kObject},
  };
  for (const auto& [name, known] : kNames) {
    if (name == dotted) return known;
  }
  return std::nullopt;
}

constexpr std::string_view kGetattr = "builtins.getattr";

[[noreturn]] void Refuse(const std::string& message) { throw Error(ErrorCode::kRefused, message); }

std::string ArgKinds(const Value* args) {
  std::string s = "(";
  for (size_t i = 0; i < args->items.size(); ++i) {
    if (i > 0) s += ", ";
    s += KindName(args->items[i]->kind);
  }
  return s + ")";
}

bool IsSequence(const Value* v) {
  return v->kind == ValueKind::kList || v->kind == ValueKind::kTuple || v->kind == ValueKind::kSet ||
         v->kind == ValueKind::kFrozenSet;
}

// Iterating a value as Python would for list(x)/set(x): sequences give items, dicts their keys.
std::optional<std::vector<Value*>> Iterate(const Value* v) {
  if (IsSequence(v)) return v->items;
  if (v->kind == ValueKind::kDict) {
    std::vector<Value*> keys;
    keys.reserve(v->entries.size());
    for (const auto& e : v->entries) keys.push_back(e.first);
    return keys;
  }
  return std::nullopt;
}

std::optional<double> AsDouble(const Value* v) {
  switch (v->kind) {
    case ValueKind::kBool: return v->boolean ? 1.0 : 0.0;
    case ValueKind::kInt:
      if (v->is_big_int()) return std::nullopt;
      return static_cast<double>(v->integer);
    case ValueKind::kFloat: return v->real;
    default: return std::nullopt;
  }
}

// str -> bytes for the encodings Python data pickles use (latin-1 for bytes/bytearray in
// protocols 0-2, utf-8 when a caller asked for it).
std::optional<std::string> Encode(const Value* text, const Value* encoding, bool allow_utf8) {
  if (text->kind != ValueKind::kStr || encoding->kind != ValueKind::kStr) return std::nullopt;
  const std::string& enc = encoding->text;
  if (enc == "latin1" || enc == "latin-1") {
    std::string out;
    out.reserve(text->text.size());
    size_t i = 0;
    uint32_t cp = 0;
    while (i < text->text.size()) {
      if (!utf8::Next(text->text, i, cp) || cp > 0xFF) return std::nullopt;
      out.push_back(static_cast<char>(cp));
    }
    return out;
  }
  if (allow_utf8 && (enc == "utf-8" || enc == "utf8")) {
    // Python's utf-8 encoder refuses lone surrogates (trove's str may hold them).
    size_t i = 0;
    uint32_t cp = 0;
    while (i < text->text.size()) {
      if (!utf8::Next(text->text, i, cp) || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
    }
    return text->text;
  }
  return std::nullopt;
}

std::optional<std::string> BytesFromInts(const Value* v) {
  if (!IsSequence(v) || v->kind == ValueKind::kSet || v->kind == ValueKind::kFrozenSet) return std::nullopt;
  std::string out;
  out.reserve(v->items.size());
  for (const Value* x : v->items) {
    if (x->kind != ValueKind::kInt || x->is_big_int() || x->integer < 0 || x->integer > 255) return std::nullopt;
    out.push_back(static_cast<char>(x->integer));
  }
  return out;
}

bool Truth(const Value* v) {
  switch (v->kind) {
    case ValueKind::kNone: return false;
    case ValueKind::kBool: return v->boolean;
    case ValueKind::kInt: return v->is_big_int() || v->integer != 0;
    case ValueKind::kFloat: return v->real != 0.0;
    case ValueKind::kComplex: return v->real != 0.0 || v->imag != 0.0;
    case ValueKind::kStr:
    case ValueKind::kBytes: return !v->text.empty();
    case ValueKind::kDict: return !v->entries.empty();
    default: return v->is_container() ? !v->items.empty() : true;
  }
}

// dict(x) / OrderedDict(x): a mapping, or an iterable of 2-item pairs.
bool FillDict(Value* dict, const Value* source) {
  KeyIndex keys;
  if (source->kind == ValueKind::kDict) {
    for (const auto& [k, v] : source->entries) keys.SetItem(dict, k, v);
    return true;
  }
  if (!IsSequence(source)) return false;
  for (const Value* pair : source->items) {
    if ((pair->kind != ValueKind::kTuple && pair->kind != ValueKind::kList) || pair->items.size() != 2) return false;
    keys.SetItem(dict, pair->items[0], pair->items[1]);
  }
  return true;
}

Value* MakeBytes(ValueArena& arena, std::string data, bool bytearray) {
  Value* v = arena.Bytes(std::move(data));
  if (bytearray) v->type_name = "bytearray";
  return v;
}

// A defaultdict factory that makes plain data when called: None (no factory) or a data
// constructor of containers and scalars (list, dict, int, OrderedDict...).
bool IsDataFactory(const Value* factory) {
  if (factory->kind == ValueKind::kNone) return true;
  if (factory->kind != ValueKind::kGlobal) return false;
  const std::optional<Known> k = Lookup(factory->type_name);
  return k && k != Known::kReconstructor && k != Known::kCodecsEncode && k != Known::kNamespace;
}

// The data a known constructor builds from `args`, or null when the arguments do not fit.
Value* Construct(Known known, const Value* args, ValueArena& arena) {
  const auto& a = args->items;
  const size_t n = a.size();
  switch (known) {
    case Known::kOrderedDict:
    case Known::kCounter:
    case Known::kDict: {
      const char* type = known == Known::kOrderedDict ? "collections.OrderedDict"
                         : known == Known::kCounter   ? "collections.Counter"
                                                      : "dict";
      if (n > 1) return nullptr;
      Value* d = arena.Dict(type);
      // Counter(iterable) counts elements rather than taking pairs; only its mapping form is data.
      if (n == 1 && (known == Known::kCounter && a[0]->kind != ValueKind::kDict)) return nullptr;
      if (n == 1 && !FillDict(d, a[0])) return nullptr;
      return d;
    }
    case Known::kSet:
    case Known::kFrozenSet:
    case Known::kList:
    case Known::kTuple: {
      if (n > 1) return nullptr;
      std::vector<Value*> items;
      if (n == 1) {
        auto it = Iterate(a[0]);
        if (!it) return nullptr;
        items = std::move(*it);
      }
      if (known == Known::kList || known == Known::kTuple) {
        Value* v = arena.New(known == Known::kList ? ValueKind::kList : ValueKind::kTuple);
        v->items = std::move(items);
        return v;
      }
      Value* s = arena.New(known == Known::kSet ? ValueKind::kSet : ValueKind::kFrozenSet);
      KeyIndex keys;
      for (Value* x : items) keys.AddItem(s, x);
      return s;
    }
    case Known::kByteArray:
    case Known::kBytes: {
      bool bytearray = known == Known::kByteArray;
      if (n == 0) return MakeBytes(arena, "", bytearray);
      if (n == 1 && a[0]->kind == ValueKind::kBytes) return MakeBytes(arena, a[0]->text, bytearray);
      // bytes(n) / bytearray(n) would allocate n zero bytes on the file's say-so: not data.
      if (n == 1) {
        auto b = BytesFromInts(a[0]);
        return b ? MakeBytes(arena, std::move(*b), bytearray) : nullptr;
      }
      if (n == 2) {
        auto b = Encode(a[0], a[1], /*allow_utf8=*/true);
        return b ? MakeBytes(arena, std::move(*b), bytearray) : nullptr;
      }
      return nullptr;
    }
    case Known::kCodecsEncode: {
      if (n != 2) return nullptr;
      auto b = Encode(a[0], a[1], /*allow_utf8=*/false);
      return b ? arena.Bytes(std::move(*b)) : nullptr;
    }
    case Known::kComplex: {
      if (n > 2) return nullptr;
      Value* c = arena.New(ValueKind::kComplex);
      if (n == 1 && a[0]->kind == ValueKind::kComplex) {
        c->real = a[0]->real;
        c->imag = a[0]->imag;
        return c;
      }
      for (size_t i = 0; i < n; ++i) {
        auto d = AsDouble(a[i]);
        if (!d) return nullptr;
        (i == 0 ? c->real : c->imag) = *d;
      }
      return c;
    }
    case Known::kStr:
      if (n == 0) return arena.Str("");
      if (n == 1 && a[0]->kind == ValueKind::kStr) return a[0];  // str(s) is s
      return nullptr;
    case Known::kInt:
      if (n == 0) return arena.Int(0);
      if (n != 1) return nullptr;
      if (a[0]->kind == ValueKind::kInt) return a[0];
      if (a[0]->kind == ValueKind::kBool) return arena.Int(a[0]->boolean ? 1 : 0);
      if (a[0]->kind == ValueKind::kFloat) {
        double t = std::trunc(a[0]->real);
        // Finite and inside int64: larger floats would need a big-int conversion no data needs.
        if (!std::isfinite(t) || t < -9223372036854775808.0 || t >= 9223372036854775808.0) return nullptr;
        return arena.Int(static_cast<int64_t>(t));
      }
      return nullptr;
    case Known::kFloat: {
      if (n == 0) return arena.Float(0.0);
      if (n != 1) return nullptr;
      auto d = AsDouble(a[0]);
      return d ? arena.Float(*d) : nullptr;
    }
    case Known::kBool:
      if (n > 1) return nullptr;
      return arena.Bool(n == 1 && Truth(a[0]));
    case Known::kDefaultDict: {
      // defaultdict(factory[, mapping]): the factory is kept as its argument. Python calls it for
      // every missing key, so only None and the data constructors are data here; any other
      // factory leaves the call an object of that factory's class (DefaultDictFactoryClass).
      if (n > 2 || (n >= 1 && !IsDataFactory(a[0]))) return nullptr;
      Value* d = arena.Dict("collections.defaultdict");
      if (n >= 1) d->args = arena.Tuple({a[0]});
      if (n == 2 && !FillDict(d, a[1])) return nullptr;
      return d;
    }
    case Known::kNamespace:
      // Namespace(): its attributes come with BUILD and are its entries.
      return n == 0 ? arena.Dict("argparse.Namespace") : nullptr;
    case Known::kReconstructor:
    case Known::kObject:
      break;  // _reconstructor: handled by the caller (it needs the resolver's other names); object(): no data
  }
  return nullptr;
}

}  // namespace

Value* DataResolver::Global(const std::string& module, const std::string& name, bool& allowed, ValueArena& arena) {
  std::string dotted = module + "." + name;
  if (dotted == kGetattr && ReadsEnumMembers()) {
    // Called, it must be getattr(EnumClass, 'NAME') (Call checks); left as a value it is an
    // inert name like any other (nothing is ever called), which no format reads as data.
    allowed = true;
    return arena.Global(std::move(dotted));
  }
  if (!Lookup(dotted) && !numpy_data::Lookup(dotted)) return OtherGlobal(dotted, allowed, arena);
  allowed = true;
  return arena.Global(std::move(dotted));
}

Value* DataResolver::OtherGlobal(const std::string& dotted, bool& allowed, ValueArena& arena) {
  allowed = false;
  if (policy_ == PicklePolicy::kStrict) {
    throw Error(ErrorCode::kRefused, "refused global '" + dotted + "'").SetRefusedGlobal(dotted);
  }
  if (policy_ == PicklePolicy::kDefault) {
    const GlobalVerdict v = ClassifyGlobal(dotted);
    if (v.klass != GlobalClass::kUnknown) {
      throw Error(ErrorCode::kRefused, "refused global '" + dotted + "': it resolves to " + v.target + " (" +
                                           std::string(GlobalClassName(v.klass)) + ": " +
                                           std::string(GlobalClassEffect(v.klass)) + ")")
          .SetRefusedGlobal(dotted);
    }
  }
  return arena.Global(dotted);
}

Value* DataResolver::UnknownObject(Value* cls, Value* args, bool new_object, ValueArena& arena) {
  if (policy_ == PicklePolicy::kStrict || cls->kind != ValueKind::kGlobal) {
    if (cls->kind == ValueKind::kObject && policy_ == PicklePolicy::kPermissive) {
      // Calling what an earlier call made (gadget chains do): only a permissive reader reads on.
      Value* v = arena.Object(cls->type_name, args);
      v->unknown_class = true;
      v->module_size = cls->module_size;
      return v;
    }
    if (cls->kind == ValueKind::kGlobal) Refuse("refused call of global '" + cls->type_name + "'");
    if (cls->kind == ValueKind::kObject) {
      Refuse("refused call of object '" + cls->type_name + "' (made by the file itself: only a global can be called)");
    }
    Refuse("refused call of a " + std::string(KindName(cls->kind)) + " (only a global can be called)");
  }
  Value* v = arena.Object(cls->type_name, args);
  v->unknown_class = true;
  v->new_object = new_object;
  v->module_size = cls->module_size;
  return v;
}

namespace {

// What a known name makes from `args`, or null when the arguments do not fit it.
Value* ConstructKnown(const Value* callable, Value* args, ValueArena& arena) {
  if (callable->kind != ValueKind::kGlobal || args->kind != ValueKind::kTuple) return nullptr;
  if (auto n = numpy_data::Lookup(callable->type_name)) return numpy_data::Call(*n, args, arena);
  std::optional<Known> known = Lookup(callable->type_name);
  if (!known || known == Known::kReconstructor) return nullptr;
  return Construct(*known, args, arena);
}

}  // namespace

Value* DataResolver::Call(Value* callable, Value* args, ValueArena& arena) {
  if (callable->kind != ValueKind::kGlobal) return UnknownObject(callable, args, false, arena);
  const std::string& name = callable->type_name;
  if (name == kGetattr && ReadsEnumMembers()) {
    // The one shape Python 3.11 writes for an enum member: a class global and a constant name.
    const bool member = args->kind == ValueKind::kTuple && args->items.size() == 2 &&
                        args->items[0]->kind == ValueKind::kGlobal && args->items[1]->kind == ValueKind::kStr &&
                        EnumMember(args->items[0]->type_name, args->items[1]->text);
    if (!member) {
      throw Error(ErrorCode::kRefused, "refused global 'builtins.getattr': only getattr(<enum class>, '<member>') of an "
                                       "enum this format names is read, not getattr with arguments " + ArgKinds(args))
          .SetRefusedGlobal(std::string(kGetattr));
    }
    Value* v = arena.Global(args->items[0]->type_name + "." + args->items[1]->text);
    v->module_size = args->items[0]->module_size != 0
                         ? args->items[0]->module_size
                         : static_cast<uint32_t>(args->items[0]->type_name.rfind('.'));
    return v;
  }
  if (Lookup(name) == Known::kReconstructor && args->kind == ValueKind::kTuple && args->items.size() == 3) {
    // copyreg._reconstructor(cls, base, state): protocol 0/1's spelling of an instance of cls,
    // made as base.__new__(cls, state) (object.__new__(cls) for a plain class).
    Value* cls = args->items[0];
    Value* base = args->items[1];
    Value* state = args->items[2];
    if (cls->kind == ValueKind::kGlobal && base->kind == ValueKind::kGlobal) {
      std::optional<Known> base_known = Lookup(base->type_name);
      Value* base_args =
          arena.Tuple(state->kind == ValueKind::kNone ? std::vector<Value*>{} : std::vector<Value*>{state});
      if (base_known == Known::kObject && state->kind == ValueKind::kNone) {
        return NewObject(cls, arena.Tuple(), arena);
      }
      if (cls->type_name == base->type_name && base_known && base_known != Known::kReconstructor &&
          base_known != Known::kCodecsEncode && base_known != Known::kObject) {
        if (Value* v = Construct(*base_known, base_args, arena)) return v;
      } else if (base_known == Known::kDict && state->kind == ValueKind::kDict && !Lookup(cls->type_name) &&
                 ClassifyGlobal(cls->type_name).klass == GlobalClass::kUnknown) {
        // A dict subclass: a dict keeping its class name (unknown names only, after the policy
        // let them through as names; a dangerous class stays an inert object under --permissive).
        Value* d = arena.Dict(cls->type_name);
        d->new_object = true;
        d->module_size = cls->module_size;
        FillDict(d, state);
        return d;
      } else if (base_known && base_known != Known::kReconstructor && base_known != Known::kObject) {
        return NewObject(cls, base_args, arena);  // a str subclass (TorchVersion) and the like
      }
    }
    if (policy_ != PicklePolicy::kStrict && cls->kind == ValueKind::kGlobal) return UnknownObject(cls, args, false, arena);
    Refuse("refused copyreg._reconstructor of '" +
           (cls->kind == ValueKind::kGlobal ? cls->type_name : std::string(KindName(cls->kind))) + "' with arguments " +
           ArgKinds(args));
  }
  const bool known = Lookup(name) || numpy_data::Lookup(name);
  if (Value* v = ConstructKnown(callable, args, arena)) return v;
  if (known) {
    // A data name called with arguments it does not take: strict refuses, the others keep the
    // call as an object trove does not understand.
    if (policy_ == PicklePolicy::kStrict) Refuse("refused call of '" + name + "' with arguments " + ArgKinds(args));
  }
  return UnknownObject(callable, args, false, arena);
}

Value* DataResolver::NewObject(Value* cls, Value* args, ValueArena& arena) {
  // cls.__new__(cls, *args) of a data class is what calling it makes; of any other class an
  // inert object made the same way.
  if (cls->kind == ValueKind::kGlobal && (Lookup(cls->type_name) || numpy_data::Lookup(cls->type_name))) {
    return Call(cls, args, arena);
  }
  return UnknownObject(cls, args, /*new_object=*/true, arena);
}

Value* DataResolver::Build(Value* object, Value* state, ValueArena& arena) {
  if (object->kind == ValueKind::kGlobal) {
    // BUILD on a name would set attributes of a module-level object (a known scanner bypass).
    Refuse("refused BUILD on global '" + object->type_name + "'");
  }
  if (numpy_data::Build(object, state, arena)) return object;
  if (object->kind == ValueKind::kObject && (object->unknown_class || policy_ == PicklePolicy::kPermissive)) {
    object->state = state;
    return object;
  }
  // Python's BUILD with a None state changes nothing on plain data.
  if (state->kind == ValueKind::kNone && object->kind != ValueKind::kObject) return object;
  if (object->kind == ValueKind::kDict && state->kind == ValueKind::kDict) {
    KeyIndex keys;
    if (object->type_name == "argparse.Namespace") {
      // A Namespace's attributes are its data: they are its entries.
      for (const auto& [k, v] : state->entries) keys.SetItem(object, k, v);
      return object;
    }
    // OrderedDict attributes (state_dict._metadata). Like Python's `inst.__dict__[k] = v` for
    // each item: the attributes are the object's own dict, not the (possibly memo-shared) state.
    if (state->entries.empty()) return object;
    if (object->state == nullptr || object->state->kind != ValueKind::kDict) object->state = arena.Dict();
    for (const auto& [k, v] : state->entries) keys.SetItem(object->state, k, v);
    return object;
  }
  std::string what = std::string(KindName(object->kind));
  if (!object->type_name.empty() && object->kind != ValueKind::kBytes) what += " '" + object->type_name + "'";
  Refuse("refused BUILD on " + what + " with a " + std::string(KindName(state->kind)) + " state");
}

Value* DataResolver::PersistentLoad(Value* pid, ValueArena& /*arena*/) {
  Refuse("refused persistent id (a " + std::string(KindName(pid->kind)) + "): plain pickles have none");
}

}  // namespace trove
