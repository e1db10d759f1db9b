// trove/diff.h: what differs between two files, in any two formats trove reads.
//
// Tensors are matched by key path. For each common key: dtype or shape changes, else whether the
// bytes are identical, else max |a-b|, ||a-b||_2 and ||a-b||_2/||a||_2 computed in float64 while
// streaming both tensors, and whether every element is within atol + rtol*|b| (NaN equals NaN).
// Non-tensor values are compared leaf by leaf, by key path.
// Thread-compatible; peak memory is bounded by the largest non-contiguous tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trove/document.h"

namespace trove {

struct DiffOptions {
  double rtol = 0;
  double atol = 0;
  ReadOptions read;
};

struct TensorDiff {
  std::string key;
  std::string a_dtype, b_dtype;
  std::vector<int64_t> a_shape, b_shape;
  bool comparable = true;     // same dtype and shape
  bool identical = false;     // byte for byte
  bool within_tolerance = false;
  double max_abs = 0, l2 = 0, l2_a = 0;
  uint64_t elements_differing = 0;
};

struct ValueDiff {
  std::string key;
  std::string a, b;  // text of each side ("" when absent)
};

struct DiffReport {
  std::vector<std::string> only_in_a, only_in_b;  // tensor keys
  std::vector<TensorDiff> tensors;                // every common key, in A's order
  std::vector<ValueDiff> values;                  // differing non-tensor leaves
  uint64_t bytes_compared = 0;
  bool equal() const;
};

DiffReport Diff(const Document& a, const Document& b, const DiffOptions& options);

}  // namespace trove
