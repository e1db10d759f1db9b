#include "formats/tensordict/td_classes.h"

#include <array>

namespace trove::tensordict {
namespace {

struct KnownClass {
  std::string_view cls;      // `_class` spelling
  std::string_view dotted;   // module.qualname as in `_type`
  ClassKind kind;
};

constexpr std::array kKnown = {
    KnownClass{"tensordict:TensorDict", "tensordict._td.TensorDict", ClassKind::kTensorDict},
    KnownClass{"tensordict:LazyStackedTensorDict", "tensordict._lazy.LazyStackedTensorDict", ClassKind::kLazyStack},
    KnownClass{"tensordict:NonTensorData", "tensordict.tensorclass.NonTensorData", ClassKind::kNonTensorData},
    KnownClass{"tensordict:MetaData", "tensordict.tensorclass.MetaData", ClassKind::kNonTensorData},
    KnownClass{"tensordict:NonTensorStack", "tensordict.tensorclass.NonTensorStack", ClassKind::kNonTensorStack},
    // Private classes: not exported, so `_class` keeps their own module.
    KnownClass{"tensordict._td:_SubTensorDict", "tensordict._td._SubTensorDict", ClassKind::kSubTensorDict},
    KnownClass{"tensordict._lazy:_UnsqueezedTensorDict", "tensordict._lazy._UnsqueezedTensorDict", ClassKind::kLazyView},
    KnownClass{"tensordict._lazy:_SqueezedTensorDict", "tensordict._lazy._SqueezedTensorDict", ClassKind::kLazyView},
    KnownClass{"tensordict._lazy:_ViewedTensorDict", "tensordict._lazy._ViewedTensorDict", ClassKind::kLazyView},
    KnownClass{"tensordict._lazy:_TransposedTensorDict", "tensordict._lazy._TransposedTensorDict", ClassKind::kLazyView},
    KnownClass{"tensordict._lazy:_PermutedTensorDict", "tensordict._lazy._PermutedTensorDict", ClassKind::kLazyView},
};

}  // namespace

std::string ClassFromTypeRepr(std::string_view repr) {
  constexpr std::string_view kOpen = "<class '", kClose = "'>";
  if (repr.size() <= kOpen.size() + kClose.size() || repr.substr(0, kOpen.size()) != kOpen ||
      repr.substr(repr.size() - kClose.size()) != kClose) {
    return "";
  }
  std::string_view dotted = repr.substr(kOpen.size(), repr.size() - kOpen.size() - kClose.size());
  for (const auto& k : kKnown)
    if (k.dotted == dotted) return std::string(k.cls);
  size_t dot = dotted.rfind('.');
  if (dot == std::string_view::npos) return "builtins:" + std::string(dotted);
  return std::string(dotted.substr(0, dot)) + ":" + std::string(dotted.substr(dot + 1));
}

std::string TypeReprFromClass(std::string_view cls) {
  for (const auto& k : kKnown)
    if (k.cls == cls) return "<class '" + std::string(k.dotted) + "'>";
  size_t colon = cls.find(':');
  if (colon == std::string_view::npos) return "";
  return "<class '" + std::string(cls.substr(0, colon)) + "." + std::string(cls.substr(colon + 1)) + "'>";
}

ClassKind KindOfClass(std::string_view cls) {
  for (const auto& k : kKnown)
    if (k.cls == cls) return k.kind;
  return ClassKind::kOther;
}

bool IsKnownClass(std::string_view cls) { return KindOfClass(cls) != ClassKind::kOther; }

std::string ShortName(std::string_view cls) {
  size_t cut = cls.find_last_of(":.");
  return std::string(cut == std::string_view::npos ? cls : cls.substr(cut + 1));
}

}  // namespace trove::tensordict
