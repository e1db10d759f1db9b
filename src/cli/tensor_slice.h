// cli/tensor_slice.h: `KEY[0:4, :, -1]`, numpy's basic indexing on a TensorView.
//
// SplitSlice takes "KEY[...]" apart; SliceView applies the items to a view without touching its
// bytes: an integer picks one index and drops its axis, `start:stop:step` (each part optional,
// negative counts from the end, a step > 0) narrows it, `:` keeps it, and missing trailing items
// keep the rest. A view of deferred bytes (a tensor assembled from a checkpoint's chunks or
// ranks) keeps only the byte range its elements reach, produced on its own
// (NarrowedToReach): printing it reads only the pieces that range overlaps.
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "trove/tensor.h"

namespace trove::cli {

// ("KEY", "0:4, :") for "KEY[0:4, :]"; nullopt when the text does not end in a bracketed part.
std::optional<std::pair<std::string, std::string>> SplitSlice(std::string_view text);

// The view of `v` the items select. Throws Error(kUsage) naming the item for a malformed one,
// an index out of range, a zero or negative step, or more items than axes.
TensorView SliceView(const TensorView& v, std::string_view items);

}  // namespace trove::cli
