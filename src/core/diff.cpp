#include "trove/diff.h"

#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include "trove/element_codec.h"
#include "trove/error.h"

namespace trove {
namespace {

// Non-tensor leaves compared per document: beyond this, the rest is summarised, not listed.
constexpr size_t kMaxValueLeaves = 1'000'000;

std::string LeafText(const Value& v) {
  switch (v.kind) {
    case ValueKind::kNone: return "None";
    case ValueKind::kBool: return v.boolean ? "True" : "False";
    case ValueKind::kInt: return v.IntToString();
    case ValueKind::kFloat: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", v.real);
      return buf;
    }
    case ValueKind::kComplex: {
      char buf[96];
      std::snprintf(buf, sizeof buf, "(%.17g%+.17gj)", v.real, v.imag);
      return buf;
    }
    case ValueKind::kStr: return "'" + v.text + "'";
    case ValueKind::kBytes: return "b<" + std::to_string(v.text.size()) + " bytes>";
    case ValueKind::kGlobal: return v.type_name;
    default: return std::string(KindName(v.kind)) + "(" + std::to_string(v.items.size()) + ")";
  }
}

// Non-tensor leaves by key path.
std::map<std::string, std::string> ValueLeaves(const Value* root) {
  std::map<std::string, std::string> out;
  ForEachLeaf(root, [&](const std::string& path, const Value& leaf) {
    if (leaf.kind == ValueKind::kTensor || out.size() >= kMaxValueLeaves) return;
    out.emplace(path, LeafText(leaf));
  });
  return out;
}

double Real(const ElementValue& e) {
  switch (e.kind) {
    case ElementValue::Kind::kFloat: return e.re;
    case ElementValue::Kind::kInt: return static_cast<double>(e.i);
    case ElementValue::Kind::kUInt: return static_cast<double>(e.u);
    case ElementValue::Kind::kBool: return e.b;
    default: return e.re;
  }
}

// Elements compared per window: both tensors are walked side by side in this much memory,
// whatever their logical size (a stride-0 view can be terabytes over a few stored bytes) and
// however they are stored (a compressed .tdz leaf is inflated window by window, never held).
constexpr uint64_t kDiffWindowElements = uint64_t{1} << 18;

// Two views laid out alike over equal stored bytes are equal element for element, without
// walking their (possibly huge) logical extent.
bool SameLayoutAndStorage(const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype || a.shape != b.shape || a.strides != b.strides || a.storage_offset != b.storage_offset ||
      a.byte_order != b.byte_order || a.storage.size() != b.storage.size() || a.cast_source || b.cast_source) {
    return false;
  }
  if (a.storage.SameBytes(b.storage)) return true;
  SharedBytes::Reader ra(a.storage), rb(b.storage);
  std::vector<uint8_t> wa(static_cast<size_t>(std::min<uint64_t>(a.storage.size(), kDiffWindowElements))), wb(wa.size());
  while (ra.remaining() > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(wa.size(), ra.remaining()));
    ra.Read(wa.data(), n);
    rb.Read(wb.data(), n);
    if (std::memcmp(wa.data(), wb.data(), n) != 0) return false;
  }
  return true;
}

void Compare(const TensorView& a, const TensorView& b, const DiffOptions& o, TensorDiff& d) {
  const size_t es = ElementSize(a.dtype);
  const uint64_t n = static_cast<uint64_t>(a.numel());
  if (a.storage.size() <= kDiffWindowElements * es && SameLayoutAndStorage(a, b)) {
    d.identical = true;
    d.within_tolerance = true;
    return;
  }
  std::vector<uint8_t> wa(static_cast<size_t>(std::min(n, kDiffWindowElements) * es));
  std::vector<uint8_t> wb(wa.size());
  d.identical = true;
  {
    ElementReader ra(a), rb(b);
    for (uint64_t first = 0; first < n && d.identical; first += kDiffWindowElements) {
      const uint64_t count = std::min(kDiffWindowElements, n - first);
      ra.Read(count, wa.data());
      rb.Read(count, wb.data());
      d.identical = std::memcmp(wa.data(), wb.data(), count * es) == 0;
    }
  }
  if (d.identical) {
    d.within_tolerance = true;
    // ||a||_2 is still reported for relative figures: zero difference needs no pass over a.
    return;
  }
  const bool complex = Info(a.dtype).kind == DTypeKind::kComplex || a.dtype == DType::kFloat4E2M1FNx2;
  double sum_sq = 0, sum_sq_a = 0, max_abs = 0;
  bool within = true;
  uint64_t differing = 0;
  // A second pass from the start: the first one stopped at the first differing window.
  ElementReader ra(a), rb(b);
  for (uint64_t i = 0; i < n; ++i) {
    if (i % kDiffWindowElements == 0) {
      const uint64_t count = std::min(kDiffWindowElements, n - i);
      ra.Read(count, wa.data());
      rb.Read(count, wb.data());
    }
    const uint64_t w = (i % kDiffWindowElements) * es;
    ElementValue x = DecodeElement(a.dtype, wa.data() + w), y = DecodeElement(b.dtype, wb.data() + w);
    double parts_a[2] = {Real(x), complex ? x.im : 0}, parts_b[2] = {Real(y), complex ? y.im : 0};
    bool differs = false;
    for (int k = 0; k < (complex ? 2 : 1); ++k) {
      double va = parts_a[k], vb = parts_b[k];
      if (std::isnan(va) && std::isnan(vb)) continue;
      double diff = va - vb;
      if (va == vb) diff = 0;  // equal infinities
      double ad = std::fabs(diff);
      if (std::isnan(ad)) ad = INFINITY;
      sum_sq += diff * diff;
      if (std::isfinite(va)) sum_sq_a += va * va;
      max_abs = std::max(max_abs, ad);
      if (ad != 0) differs = true;
      if (!(ad <= o.atol + o.rtol * std::fabs(vb))) within = false;
    }
    differing += differs;
  }
  d.max_abs = max_abs;
  d.l2 = std::sqrt(sum_sq);
  d.l2_a = std::sqrt(sum_sq_a);
  d.within_tolerance = within;
  d.elements_differing = differing;
}

}  // namespace

bool DiffReport::equal() const {
  if (!only_in_a.empty() || !only_in_b.empty() || !values.empty()) return false;
  for (const auto& t : tensors)
    if (!t.comparable || !t.within_tolerance) return false;
  return true;
}

DiffReport Diff(const Document& a, const Document& b, const DiffOptions& options) {
  DiffReport r;
  std::unordered_map<std::string, const TensorView*> in_b;
  for (const auto& t : b.tensors) in_b.emplace(t.key, t.view);
  std::unordered_map<std::string, bool> seen_in_a;
  for (const auto& t : a.tensors) {
    seen_in_a.emplace(t.key, true);
    auto it = in_b.find(t.key);
    if (it == in_b.end()) {
      r.only_in_a.push_back(t.key);
      continue;
    }
    const TensorView& va = *t.view;
    const TensorView& vb = *it->second;
    TensorDiff d;
    d.key = t.key;
    d.a_dtype = Name(va.dtype);
    d.b_dtype = Name(vb.dtype);
    d.a_shape = va.shape;
    d.b_shape = vb.shape;
    d.comparable = va.dtype == vb.dtype && va.shape == vb.shape;
    if (d.comparable) {
      if (!Info(va.dtype).readable || !va.has_data || !vb.has_data) {
        d.identical = d.within_tolerance = !va.has_data && !vb.has_data;
      } else {
        WithContext("tensor '" + t.key + "'", [&] { Compare(va, vb, options, d); });
        r.bytes_compared += va.nbytes();
      }
    }
    r.tensors.push_back(std::move(d));
  }
  for (const auto& t : b.tensors)
    if (!seen_in_a.count(t.key)) r.only_in_b.push_back(t.key);
  auto la = ValueLeaves(a.root), lb = ValueLeaves(b.root);
  for (const auto& [k, v] : la) {
    auto it = lb.find(k);
    if (it == lb.end()) r.values.push_back({k, v, ""});
    else if (it->second != v) r.values.push_back({k, v, it->second});
  }
  for (const auto& [k, v] : lb)
    if (!la.count(k)) r.values.push_back({k, "", v});
  return r;
}

}  // namespace trove
