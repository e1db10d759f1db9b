// tests/ops/ops_fixtures.h: a small checkpoint built in memory, written by trove's own writers or
// made by Debian's torch, for the ops-layer tests (open/detect, convert, verify, scan, diff).
// Scratch folders and the Python runner come from the tensordict tests' fixture.
#pragma once

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "formats/tensordict/td_fixtures.h"
#include "trove/document.h"
#include "trove/dtype.h"
#include "trove/element_codec.h"
#include "trove/pt_writer.h"

namespace trove::opstest {

using tdtest::ExpectError;

// One tensor of a sample document: where it sits (dict keys joined by '/'), its dtype, shape and
// elements in row-major order.
struct Leaf {
  std::string path;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<double> values;
};

// {"enc": {"0": {"weight", "bias"}, "1": {"weight"}}, "head.w", "ids"}: every leading dimension 2
// (so .psk.d can hold it too).
inline std::vector<Leaf> SampleLeaves() {
  return {
      {"enc/0/weight", DType::kFloat32, {2, 3}, {0, 1, 2, 3, 4, 5}},
      {"enc/0/bias", DType::kFloat32, {2}, {1, 2}},
      {"enc/1/weight", DType::kFloat32, {2, 3}, {10, 11, 12, 13, 14, 15}},
      {"head.w", DType::kFloat64, {2}, {0.5, -1.25}},
      {"ids", DType::kInt64, {2}, {3, 7}},
  };
}

inline std::vector<uint8_t> Encode(DType dtype, const std::vector<double>& values) {
  std::vector<uint8_t> out(values.size() * ElementSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* p = out.data() + i * ElementSize(dtype);
    if (dtype == DType::kFloat32) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(p, &f, 4);
    } else if (dtype == DType::kFloat64) {
      std::memcpy(p, &values[i], 8);
    } else if (dtype == DType::kInt64) {
      const int64_t v = static_cast<int64_t>(values[i]);
      std::memcpy(p, &v, 8);
    } else if (dtype == DType::kBFloat16) {
      const uint16_t v = FloatToBFloat16(static_cast<float>(values[i]));
      std::memcpy(p, &v, 2);
    } else if (dtype == DType::kComplex64) {  // the real part; imaginary 0
      const float parts[2] = {static_cast<float>(values[i]), 0};
      std::memcpy(p, parts, 8);
    } else {
      ADD_FAILURE() << "Encode: no encoding for " << Name(dtype);
    }
  }
  return out;
}

// A document holding `leaves` in nested dicts, in the order given.
inline Document MakeDocument(const std::vector<Leaf>& leaves) {
  Document doc;
  ValueArena& a = *doc.arena;
  doc.root = a.Dict();
  for (const Leaf& leaf : leaves) {
    Value* dict = doc.root;
    std::vector<std::string> parts = SplitKeyPath(leaf.path);
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      Value* next = const_cast<Value*>(dict->Find(parts[i]));  // the arena owns it, mutable
      if (next == nullptr) {
        next = a.Dict();
        tdtest::Put(a, dict, parts[i], next);
      }
      dict = next;
    }
    tdtest::Put(a, dict, parts.back(), a.Tensor(tdtest::MakeTensor(leaf.dtype, leaf.shape, Encode(leaf.dtype, leaf.values))));
  }
  doc.tensors = CollectTensors(doc.root);
  return doc;
}

// Every element of a tensor as double, in row-major order.
inline std::vector<double> Values(const TensorView& t) {
  std::vector<double> out;
  std::vector<int64_t> index(t.shape.size(), 0);
  for (int64_t k = 0; k < t.numel(); ++k) {
    out.push_back(TensorView::As<double>(t.Element(index)));
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// The values / dtype of the tensor at `key`; a failure (and nothing) when there is none.
inline std::vector<double> ValuesAt(const Document& doc, const std::string& key) {
  const NamedTensor* t = doc.FindTensor(key);
  if (t == nullptr) {
    ADD_FAILURE() << doc.format << ": no tensor " << key;
    return {};
  }
  return Values(*t->view);
}
inline std::optional<DType> DTypeAt(const Document& doc, const std::string& key) {
  const NamedTensor* t = doc.FindTensor(key);
  if (t == nullptr) ADD_FAILURE() << doc.format << ": no tensor " << key;
  return t ? std::optional<DType>(t->view->dtype) : std::nullopt;
}

inline std::vector<std::string> Keys(const Document& doc) {
  std::vector<std::string> keys;
  for (const auto& t : doc.tensors) keys.push_back(t.key);
  return keys;
}

// The key a sample leaf has in a format without nesting (safetensors): its path as one name.
inline std::string FlatKey(const std::string& path) { return EncodeKeyComponent(path); }

// Expects `doc` to hold exactly the sample's tensors under their keys (flat: FlatKey), dtypes,
// shapes and values.
inline void ExpectSample(const Document& doc, bool flat = false) {
  const std::vector<Leaf> leaves = SampleLeaves();
  ASSERT_EQ(doc.tensors.size(), leaves.size()) << doc.format;
  for (const Leaf& leaf : leaves) {
    const NamedTensor* t = doc.FindTensor(flat ? FlatKey(leaf.path) : leaf.path);
    ASSERT_NE(t, nullptr) << doc.format << ": no " << leaf.path;
    EXPECT_EQ(t->view->dtype, leaf.dtype) << doc.format << ": " << leaf.path;
    EXPECT_EQ(t->view->shape, leaf.shape) << doc.format << ": " << leaf.path;
    EXPECT_EQ(Values(*t->view), leaf.values) << doc.format << ": " << leaf.path;
  }
}

class OpsTest : public tdtest::TdTest {
 protected:
  // The sample written by trove's .pt writer; returns its path.
  std::string SamplePt(const std::string& name = "sample.pt") const {
    WritePt(MakeDocument(SampleLeaves()), P(name));
    return P(name);
  }
  // Runs `script` after `import torch` (and `os`, `io`, `zipfile`), with ROOT the scratch folder.
  void Torch(const std::string& script) const {
    std::string out;
    ASSERT_EQ(Python("import io, os, zipfile, torch\nROOT = '" + root_ + "'\n" + script, &out), 0) << out;
  }
};

}  // namespace trove::opstest
