// Documents to .psk.d: tensors of a common leading dimension become one tuple-typed sample each.
#include "trove/pskd.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "core/progress.h"
#include "formats/pskd/sharded_writer.h"
#include "formats/tensor_only_values.h"

namespace trove {
namespace {

// A tensor as messages name it: its key path quoted, or "the root tensor" for a bare one.
std::string Named(const std::string& key) { return key.empty() ? "the root tensor" : "'" + key + "'"; }

enum class ElementClass { kReal, kSigned, kUnsigned, kBool };

// Elements read per window: samples are written column by column, each column front to back,
// so every column is read in bounded memory whatever its size or storage (a compressed .tdz
// leaf is inflated as it is read, never held).
constexpr uint64_t kWindowElements = uint64_t{1} << 16;

// One column's elements front to back, as C-contiguous little-endian bytes.
class ElementCursor {
 public:
  explicit ElementCursor(const TensorView& v) : reader_(v), esize_(ElementSize(v.dtype)) {}
  const uint8_t* Next() {
    if (pos_ == count_) {
      count_ = std::min(kWindowElements, reader_.remaining());
      window_.resize(static_cast<size_t>(count_ * esize_));
      reader_.Read(count_, window_.data());
      pos_ = 0;
    }
    return window_.data() + (pos_++) * esize_;
  }

 private:
  ElementReader reader_;
  size_t esize_;
  std::vector<uint8_t> window_;
  uint64_t count_ = 0, pos_ = 0;
};

struct Column {
  std::string key;
  const TensorView* view;
  ElementClass element_class;
  uint64_t per_sample = 1;  // elements of one sample
};

ElementClass ClassOf(const NamedTensor& t) {
  switch (t.view->dtype) {
    case DType::kFloat64: case DType::kFloat32: case DType::kBFloat16: return ElementClass::kReal;
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64: return ElementClass::kSigned;
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64: return ElementClass::kUnsigned;
    case DType::kBool: return ElementClass::kBool;
    default: break;
  }
  Fail(ErrorCode::kUnsupported, Named(t.key) + ": dtype " + std::string(Name(t.view->dtype)) +
                                    " has no .psk.d leaf (reals are float64/float32/bfloat16, indices integers)");
}

pskd::Encoding EncodingOf(const Column& c) {
  return c.view->dtype == DType::kFloat64 ? pskd::Encoding::kF64
         : c.view->dtype == DType::kFloat32 ? pskd::Encoding::kF32
                                            : pskd::Encoding::kBF16;
}

// A .psk.d source written again keeps its type (index bounds, axis names, bool leaves, nested
// tuples), which the tensors alone do not say, when they are its leaves as read: as many, each
// of its kind and per-sample shape. The real leaves' encodings follow the tensors' dtypes (a
// --dtype cast changes them); a bound no value reaches stays (E9004 otherwise).
std::optional<pskd::SampleType> KeptSourceType(const Document& doc, const std::vector<Column>& columns) {
  if (doc.format != "pskd") return std::nullopt;
  const auto type_text = std::find_if(doc.properties.begin(), doc.properties.end(), [](const auto& p) { return p.first == "type"; });
  if (type_text == doc.properties.end()) return std::nullopt;
  pskd::SampleType type = pskd::ParseSampleType(type_text->second.text);
  if (type.is_params || type.leaves.size() != columns.size()) return std::nullopt;
  std::vector<pskd::Encoding> encodings;
  for (size_t k = 0; k < columns.size(); ++k) {
    const pskd::Leaf& leaf = type.leaves[k];
    const Column& c = columns[k];
    if ((leaf.kind == pskd::LeafKind::kReal) != (c.element_class == ElementClass::kReal)) return std::nullopt;
    const std::vector<int64_t> sample_shape(c.view->shape.begin() + 1, c.view->shape.end());
    if (leaf.shape() != sample_shape) return std::nullopt;
    encodings.push_back(leaf.kind == pskd::LeafKind::kReal ? EncodingOf(c) : pskd::Encoding::kF64);
  }
  type.SetEncodings(encodings);
  return type;
}

// Element i (at p), an integer; negative values are refused (an index is never below 0).
uint64_t IndexAt(const Column& c, const uint8_t* p, uint64_t i) {
  const uint32_t size = static_cast<uint32_t>(ElementSize(c.view->dtype));
  uint64_t v = pskd::LoadIndex(p, size);
  if (c.element_class == ElementClass::kSigned && size < 8 && (v >> (8 * size - 1)) != 0) {
    Fail(ErrorCode::kUsage, Named(c.key) + ": element " + std::to_string(i) + " is negative: not an index");
  }
  if (c.element_class == ElementClass::kSigned && size == 8 && static_cast<int64_t>(v) < 0) {
    Fail(ErrorCode::kUsage, Named(c.key) + ": element " + std::to_string(i) + " is negative: not an index");
  }
  return v;
}

// The type the tensors say: one leaf per tensor in key order, reals by dtype, bools, indices
// bounded by --vocab or their max + 1 (a pass over each integer tensor).
pskd::SampleType InferredType(const std::vector<Column>& columns, const PskdWriteOptions& options) {
  std::vector<pskd::Encoding> encodings;
  std::string text;
  for (const Column& c : columns) {
    std::string dims = "[";
    for (size_t d = 1; d < c.view->shape.size(); ++d) {
      if (d > 1) dims += ", ";
      dims += std::to_string(c.view->shape[d]);
    }
    dims += "]";
    const uint64_t n = static_cast<uint64_t>(c.view->numel());
    std::string leaf;
    if (c.element_class == ElementClass::kReal) {
      leaf = "\xE2\x84\x9D" + dims;
      encodings.push_back(EncodingOf(c));
    } else if (c.element_class == ElementClass::kBool) {
      leaf = "bool" + dims;
      encodings.push_back(pskd::Encoding::kF64);
    } else {
      uint64_t max = 0, bound = 0;
      ElementCursor elements(*c.view);
      for (uint64_t i = 0; i < n; ++i) max = std::max(max, IndexAt(c, elements.Next(), i));
      if (options.vocab) {
        if (n > 0 && max >= *options.vocab) {
          Fail(ErrorCode::kUsage, Named(c.key) + ": value " + std::to_string(max) + " is not below the vocabulary " +
                                      std::to_string(*options.vocab));
        }
        bound = *options.vocab;
      } else {
        if (max == ~uint64_t{0}) Fail(ErrorCode::kUsage, Named(c.key) + ": value 2^64-1 leaves no bound N = max + 1");
        bound = max + 1;
      }
      leaf = "idx[" + std::to_string(bound) + "]" + dims;
      encodings.push_back(pskd::Encoding::kF64);
    }
    text += (text.empty() ? "" : ", ") + leaf;
  }
  if (columns.size() > 1) text = "(" + text + ")";
  pskd::SampleType type = pskd::ParseSampleType(text);
  type.SetEncodings(encodings);
  return type;
}

}  // namespace

void WritePskd(const Document& doc, const std::string& path, const PskdWriteOptions& options) {
  RefuseOrDropValues(doc, ".psk.d", options);
  if (doc.tensors.empty()) Fail(ErrorCode::kUsage, "no tensors to write as .psk.d samples");
  std::vector<Column> columns;
  int64_t count = -1;
  for (const NamedTensor& t : doc.tensors) {
    if (!t.view->has_data) Fail(ErrorCode::kUsage, Named(t.key) + ": a meta tensor has no data");
    if (t.view->shape.empty()) Fail(ErrorCode::kUsage, Named(t.key) + ": a scalar has no sample axis");
    if (count >= 0 && t.view->shape[0] != count) {
      Fail(ErrorCode::kUsage, Named(t.key) + ": leading dimension " + std::to_string(t.view->shape[0]) + ", the others have " +
                                  std::to_string(count) + " (every tensor is one leaf of each sample)");
    }
    count = t.view->shape[0];
    Column c{t.key, t.view, ClassOf(t)};
    for (size_t d = 1; d < t.view->shape.size(); ++d) c.per_sample *= static_cast<uint64_t>(t.view->shape[d]);
    columns.push_back(std::move(c));
  }
  std::optional<pskd::SampleType> kept = options.vocab ? std::nullopt : KeptSourceType(doc, columns);
  const pskd::SampleType type = kept ? *std::move(kept) : InferredType(columns, options);
  pskd::ShardedPskdWriter writer(path, type, options.max_shard_bytes, options.durability);
  pskd::SampleEncoder encoder(writer.type());
  ProgressReporter progress(options.progress, writer.type().sample_bytes * static_cast<uint64_t>(count));
  std::vector<ElementCursor> cursors;
  cursors.reserve(columns.size());
  for (const Column& c : columns) cursors.emplace_back(*c.view);
  for (int64_t s = 0; s < count; ++s) {
    encoder.Reset();
    for (size_t k = 0; k < columns.size(); ++k) {
      const Column& c = columns[k];
      const uint64_t first = static_cast<uint64_t>(s) * c.per_sample;
      for (uint64_t e = first; e < first + c.per_sample; ++e) {
        const uint8_t* p = cursors[k].Next();
        if (c.element_class == ElementClass::kReal) {
          encoder.PutStoredReal(p);  // the leaf's encoding is the tensor's dtype
        } else if (c.element_class == ElementClass::kBool) {
          encoder.PutIndex(*p != 0 ? 1 : 0);
        } else {
          encoder.PutIndex(IndexAt(c, p, e));
        }
      }
    }
    writer.Append(encoder.bytes());
    progress.Add(writer.type().sample_bytes);
  }
  progress.Finish();
  writer.Commit();
}

}  // namespace trove
