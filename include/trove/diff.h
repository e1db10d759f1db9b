// trove/diff.h: what differs between two files, in any two formats trove reads.
//
// Tensors are matched by key path (after strip_prefix_a/_b). For each common key: a shape change,
// else whether the bytes are identical, else max |a-b|, ||a-b||_2 and ||a-b||_2/||a||_2 computed
// in float64 while streaming both tensors window by window, and whether every element is within
// atol + rtol*|b| (NaN equals NaN). Values are compared across dtypes too (float32 against its
// bfloat16 cast: the error of the cast) when both are real (float, int, uint, bool) or both
// complex; a dtype change still makes the documents differ unless ignore_dtype.
// Non-tensor values are compared leaf by leaf, by key path.
// Thread-compatible; peak memory is bounded by the largest non-contiguous tensor.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trove/document.h"

namespace trove {

struct DiffOptions {
  double rtol = 0;
  double atol = 0;
  ReadOptions read;
  // Removed from the start of each side's keys before they are matched (the first that applies):
  // "model" turns "model/blocks.0.w" and "model.blocks.0.w" into "blocks.0.w"; a prefix ending in
  // '/' or '.' is removed as given. Keys that do not start with one are kept as they are.
  std::vector<std::string> strip_prefix_a, strip_prefix_b;
  // Which tensors are compared, by their (stripped) key; empty: all. A tensor not selected is
  // counted in tensors_skipped and is neither compared nor listed as only in one side.
  std::function<bool(const std::string& key)> select;
  // Which of the tensors a document holds beside what it stands for (Document::opt_in_prefixes:
  // DeepSpeed's 16-bit module weights and Adam moments) are compared, by their (stripped) key:
  // only those this returns true for, as convert writes them only when --keys names them; empty:
  // none. `select` alone (an --exclude) never brings them in.
  std::function<bool(const std::string& key)> opt_in;
  // A dtype change alone does not make the documents differ (their values still must agree).
  bool ignore_dtype = false;
  // Called with (bytes of A compared so far, bytes of A to compare) as the comparisons stream,
  // as WriteOptions::progress is (core/progress.h: at most once per 4 MiB and once at the end,
  // never two calls at once); empty: never. The command line's progress line is this callback.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct TensorDiff {
  std::string key;
  std::string a_dtype, b_dtype;
  std::vector<int64_t> a_shape, b_shape;
  bool comparable = true;     // values compared: same shape, both real or both complex dtypes
  bool identical = false;     // byte for byte (never when the dtypes differ)
  bool within_tolerance = false;
  double max_abs = 0, l2 = 0, l2_a = 0;
  // Flat (row-major) index of the first element where |a-b| is max_abs; meaningful only when
  // elements_differing > 0.
  uint64_t max_abs_index = 0;
  uint64_t elements = 0;  // of a (when comparable, of b too)
  uint64_t elements_differing = 0;
  bool dtype_changed() const { return a_dtype != b_dtype; }
  // ||a-b||_2 / ||a||_2: 0 when equal, infinity when only a is all zeros.
  double relative() const { return l2 == 0 ? 0 : l2_a > 0 ? l2 / l2_a : INFINITY; }
};

struct ValueDiff {
  std::string key;
  // Each side's leaf, null when the key is absent there; owned by the report's arenas.
  const Value* a = nullptr;
  const Value* b = nullptr;
  std::string a_text, b_text;  // Python-like text of each side, escaped for people ("" when absent)
};

struct DiffReport {
  std::vector<std::string> only_in_a, only_in_b;  // tensor keys
  std::vector<TensorDiff> tensors;                // every common key, in A's order
  std::vector<ValueDiff> values;                  // differing non-tensor leaves
  uint64_t bytes_compared = 0;
  uint64_t tensors_skipped = 0;  // not selected by DiffOptions::select or opt_in (both sides)
  bool ignore_dtype = false;     // as DiffOptions::ignore_dtype
  // The documents' value trees, kept alive for `values` (they hold no tensor data).
  std::shared_ptr<const ValueArena> a_values, b_values;
  bool equal() const;
};

DiffReport Diff(const Document& a, const Document& b, const DiffOptions& options);

}  // namespace trove
