// Samples as text (info) and JSON (export), and value-for-value comparison (diff).
#include <charconv>
#include <cmath>

#include "core/float_text.h"
#include "formats/pskd/pskd_text.h"
#include "formats/pskd/text_output.h"
#include "trove/atomic_file.h"

namespace trove::pskd {
namespace {

// Text at the leaf's precision (core/float_text.h: an f32 or bf16 leaf as the float32 it is);
// export's JSON at the double's, which is what its readers hold.
void AppendElement(const Leaf& leaf, const uint8_t* p, bool json, std::string& out) {
  if (leaf.kind == LeafKind::kIndex) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, LoadIndex(p, leaf.element_bytes));
    out.append(buf, r.ptr);
  } else if (json) {
    AppendReal(LoadReal(p, leaf.encoding), out);
  } else if (leaf.encoding == Encoding::kF64) {
    AppendFloatText(LoadReal(p, leaf.encoding), out);
  } else {
    AppendFloatText(static_cast<float>(LoadReal(p, leaf.encoding)), out);
  }
}

// Elements [*element, ...) of dims[axis...] as nested lists.
void AppendTensor(const Leaf& leaf, const uint8_t* base, size_t axis, bool json, uint64_t& element, std::string& out) {
  if (axis == leaf.dims.size()) {
    AppendElement(leaf, base + element * leaf.element_bytes, json, out);
    ++element;
    return;
  }
  out += '[';
  for (uint64_t i = 0; i < leaf.dims[axis].size; ++i) {
    if (i > 0) out += ", ";
    AppendTensor(leaf, base, axis + 1, json, element, out);
  }
  out += ']';
}

void AppendNode(const SampleType& type, uint32_t node, std::span<const uint8_t> sample, bool json,
                uint64_t max_leaf_elements, std::string& out) {
  const TypeNode& n = type.nodes[node];
  if (n.is_tuple) {
    out += json ? '[' : '(';
    for (size_t i = 0; i < n.children.size(); ++i) {
      if (i > 0) out += ", ";
      AppendNode(type, n.children[i], sample, json, max_leaf_elements, out);
    }
    if (!json && n.children.size() == 1) out += ',';
    out += json ? ']' : ')';
    return;
  }
  const Leaf& leaf = type.leaves[n.leaf];
  if (max_leaf_elements != 0 && leaf.elements > max_leaf_elements) {
    out += "<" + std::to_string(leaf.elements) + " elements>";
    return;
  }
  uint64_t element = 0;
  AppendTensor(leaf, sample.data() + leaf.offset, 0, json, element, out);
}

bool SameLayout(const SampleType& a, const SampleType& b) {
  if (a.leaves.size() != b.leaves.size() || a.nodes.size() != b.nodes.size()) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    if (a.nodes[i].is_tuple != b.nodes[i].is_tuple || a.nodes[i].children != b.nodes[i].children ||
        a.nodes[i].leaf != b.nodes[i].leaf) {
      return false;
    }
  }
  for (size_t k = 0; k < a.leaves.size(); ++k) {
    const Leaf& x = a.leaves[k];
    const Leaf& y = b.leaves[k];
    if (x.kind != y.kind || x.bound != y.bound || x.shape() != y.shape()) return false;
  }
  return true;
}

}  // namespace

void AppendReal(double value, std::string& out) {
  // export's files are read with Python's json module, which reads these three words.
  if (std::isnan(value)) {
    out += "NaN";
    return;
  }
  if (std::isinf(value)) {
    out += value < 0 ? "-Infinity" : "Infinity";
    return;
  }
  AppendFloatText(value, out);  // "1.0", not "1" (the form of an index)
}

void AppendSampleText(const SampleType& type, std::span<const uint8_t> sample, bool json, uint64_t max_leaf_elements,
                      std::string& out) {
  AppendNode(type, 0, sample, json, max_leaf_elements, out);
}

uint64_t ExportJson(const PskdFile& file, const std::string& output) {
  file.RequireLayout();
  TextOutput out(output);
  std::string text = "[";
  // Flushed at this size so that memory stays bounded whatever the file's size.
  constexpr size_t kFlushBytes = size_t{1} << 20;
  for (uint64_t i = 0; i < file.count(); ++i) {
    file.CheckIndices(i);
    if (i > 0) text += ",";
    text += "\n";
    AppendSampleText(file.type(), file.Sample(i), true, 0, text);
    if (text.size() >= kFlushBytes) {
      out.Write(text.data(), text.size());
      text.clear();
    }
  }
  text += file.count() > 0 ? "\n]\n" : "]\n";
  out.Write(text.data(), text.size());
  out.Commit();
  return file.count();
}

DiffResult DiffFiles(const PskdFile& a, const PskdFile& b) {
  a.RequireLayout();
  b.RequireLayout();
  if (!SameLayout(a.type(), b.type())) {
    FailPskd(PskdCode::kLayout, a.name() + " is of type " + a.type().text + ", " + b.name() + " of type " + b.type().text);
  }
  if (a.count() != b.count()) {
    FailPskd(PskdCode::kLayout, a.name() + " holds " + std::to_string(a.count()) + " samples, " + b.name() + " holds " +
                                    std::to_string(b.count()));
  }
  DiffResult r;
  // long double: its wider exponent keeps sums of squares of large f64 values finite.
  long double diff_sq = 0, a_sq = 0;
  const SampleType& ta = a.type();
  const SampleType& tb = b.type();
  for (uint64_t i = 0; i < a.count(); ++i) {
    std::span<const uint8_t> sa = a.Sample(i);
    std::span<const uint8_t> sb = b.Sample(i);
    for (size_t k = 0; k < ta.leaves.size(); ++k) {
      const Leaf& la = ta.leaves[k];
      const Leaf& lb = tb.leaves[k];
      const uint8_t* pa = sa.data() + la.offset;
      const uint8_t* pb = sb.data() + lb.offset;
      if (la.kind == LeafKind::kIndex) {
        for (uint64_t e = 0; e < la.elements; ++e) {
          r.index_differences += LoadIndex(pa + e * la.element_bytes, la.element_bytes) !=
                                 LoadIndex(pb + e * lb.element_bytes, lb.element_bytes);
        }
        r.indices += la.elements;
        continue;
      }
      for (uint64_t e = 0; e < la.elements; ++e) {
        long double x = LoadReal(pa + e * la.element_bytes, la.encoding);
        long double y = LoadReal(pb + e * lb.element_bytes, lb.encoding);
        diff_sq += (x - y) * (x - y);
        a_sq += x * x;
      }
      r.reals += la.elements;
    }
  }
  r.diff_norm = static_cast<double>(std::sqrt(diff_sq));
  r.a_norm = static_cast<double>(std::sqrt(a_sq));
  return r;
}

}  // namespace trove::pskd
