// formats/tensordict/td_classes.h: the tensordict classes trove knows, and their two spellings.
//
// meta.json names a class by `_type` (str(cls): "<class 'tensordict._td.TensorDict'>") and, from
// format version 1, by `_class` ("module:qualname", "tensordict:TensorDict" for exported
// classes). The Document uses the `_class` spelling as type_name. Pure table lookups; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace trove::tensordict {

enum class ClassKind {
  kTensorDict,
  kLazyStack,       // LazyStackedTensorDict: children in 0/, 1/, ...
  kNonTensorData,   // NonTensorData and MetaData: fields in meta.json (+ other.pickle)
  kNonTensorStack,  // values in "data" (or pickle.pkl), or children like a lazy stack
  kSubTensorDict,   // _SubTensorDict: "index" + _source/
  kLazyView,        // _UnsqueezedTensorDict & co: op fields + _source/
  kOther,           // not a tensordict class: a tensorclass (with _tensordict/) or unknown
};

inline constexpr std::string_view kTensorDictClass = "tensordict:TensorDict";
inline constexpr std::string_view kLazyStackClass = "tensordict:LazyStackedTensorDict";
inline constexpr std::string_view kNonTensorDataClass = "tensordict:NonTensorData";
inline constexpr std::string_view kNonTensorStackClass = "tensordict:NonTensorStack";

// "<class 'a.b.C'>" -> "a.b:C" ("tensordict:..." for the classes tensordict exports); empty when
// the text is not a class repr.
std::string ClassFromTypeRepr(std::string_view type_repr);
// "module:qualname" -> str(cls) as tensordict writes it in `_type` (private module for the
// exported classes). Empty when `cls` has no ':'.
std::string TypeReprFromClass(std::string_view cls);
ClassKind KindOfClass(std::string_view cls);
// True for classes registered by tensordict itself (load_memmap finds them by `_class`).
bool IsKnownClass(std::string_view cls);
// The `type` entry a parent writes for a collection of this class: the class's __name__.
std::string ShortName(std::string_view cls);

}  // namespace trove::tensordict
