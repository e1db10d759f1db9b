// formats/tensordict/td_names.h: the names and sentinel strings of tensordict's on-disk layout,
// written once here for the reader, the writer, the archive code and the checks.
//
// char arrays, not string_views, so each joins a std::string with + and converts to one.
#pragma once

#include <string_view>

namespace trove::tensordict {

// A leaf's payload is <encoded key>.memmap; a nested leaf's component sizes are
// <encoded key>.shape.memmap (int64 little-endian, one row per component).
inline constexpr char kMemmapSuffix[] = ".memmap";
inline constexpr char kShapeMemmapSuffix[] = ".shape.memmap";
// NonTensorStack's values when meta.json's "data" names this file, and NonTensorData's fields
// that are not JSON.
inline constexpr char kPickleSidecar[] = "pickle.pkl";
inline constexpr char kOtherPickleSidecar[] = "other.pickle";
// meta.json's "device" for a TensorDict without a device (str(None)).
inline constexpr char kNoDevice[] = "None";
// The Document's class for a nested (jagged) leaf.
inline constexpr char kNestedTensorClass[] = "torch:NestedTensor";

inline bool IsMemmapName(std::string_view name) { return name.ends_with(kMemmapSuffix); }

// The files a tensordict directory holds (meta.json, leaves, sidecars): what a tensordict writer
// may replace along with an existing tree (trove/atomic_file.h's OwnFileTest).
inline bool IsTensordictFileName(std::string_view name) {
  return name == "meta.json" || IsMemmapName(name) || name == kPickleSidecar || name == kOtherPickleSidecar;
}

}  // namespace trove::tensordict
