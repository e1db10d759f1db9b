#include "trove/diff.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/display_escape.h"
#include "core/float_text.h"
#include "core/progress.h"
#include "core/worker_pool.h"
#include "trove/element_codec.h"
#include "trove/error.h"

namespace trove {
namespace {

// Non-tensor leaves compared per document: beyond this, the rest is summarised, not listed.
constexpr size_t kMaxValueLeaves = 1'000'000;

// A leaf as Python would show it, its text escaped for a person (core/display_escape.h).
std::string LeafText(const Value& v) {
  switch (v.kind) {
    case ValueKind::kNone: return "None";
    case ValueKind::kBool: return v.boolean ? "True" : "False";
    case ValueKind::kInt: return v.IntToString();
    case ValueKind::kFloat: return FloatText(v.real);
    case ValueKind::kComplex: return ComplexText(v.real, v.imag);
    case ValueKind::kStr: return "'" + EscapeForDisplay(v.text, DisplayEscape::kName, '\'') + "'";
    case ValueKind::kBytes: return "b<" + std::to_string(v.text.size()) + " bytes>";
    case ValueKind::kGlobal: return EscapeForDisplay(v.type_name);
    case ValueKind::kTuple:
      if (v.type_name == "torch.Size") {
        std::string s = "torch.Size([";
        for (size_t i = 0; i < v.items.size(); ++i) s += (i ? ", " : "") + LeafText(*v.items[i]);
        return s + "])";
      }
      [[fallthrough]];
    default: return std::string(KindName(v.kind)) + "(" + std::to_string(v.items.size()) + ")";
  }
}

// Non-tensor leaves by key path.
std::string StripPrefix(const std::string& key, const std::vector<std::string>& prefixes);

// Non-tensor leaves by key path (stripped as tensor keys are).
struct Leaf {
  const Value* value;
  std::string text;
};
std::map<std::string, Leaf> ValueLeaves(const Value* root, const std::vector<std::string>& prefixes) {
  std::map<std::string, Leaf> out;
  ForEachLeaf(root, [&](const std::string& path, const Value& leaf) {
    if (leaf.kind == ValueKind::kTensor || out.size() >= kMaxValueLeaves) return;
    out.emplace(StripPrefix(path, prefixes), Leaf{&leaf, LeafText(leaf)});
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

// The windows of a comparison, kept by each thread from one tensor to the next. A fresh pair per
// tensor cost its zero fill and page faults every time (malloc hands such sizes back to the
// kernel on free): a diff of two 1 GB files of 200 tensors spent 60% of its time there. Each
// function that reads windows has its own slot, since Compare calls SameElements while holding
// its pair. At most a few windows per thread (kDiffWindowElements elements of 16 bytes at most).
enum class WindowSlot { kStorage, kElements, kCompare, kCount };
struct WindowPair {
  uint8_t* a = nullptr;
  uint8_t* b = nullptr;
};
WindowPair ThreadWindows(WindowSlot slot, size_t a_bytes, size_t b_bytes) {
  thread_local std::vector<uint8_t> held[static_cast<int>(WindowSlot::kCount)][2];
  std::vector<uint8_t>* pair = held[static_cast<int>(slot)];
  if (pair[0].size() < a_bytes) pair[0].resize(a_bytes);
  if (pair[1].size() < b_bytes) pair[1].resize(b_bytes);
  return {pair[0].data(), pair[1].data()};
}

// Two views laid out alike over equal stored bytes are equal element for element, without
// walking their (possibly huge) logical extent.
bool SameLayoutAndStorage(const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype || a.shape != b.shape || a.strides != b.strides || a.storage_offset != b.storage_offset ||
      a.byte_order != b.byte_order || a.storage.size() != b.storage.size() || a.cast_source || b.cast_source) {
    return false;
  }
  if (a.storage.SameBytes(b.storage)) return true;
  SharedBytes::Reader ra(a.storage), rb(b.storage);
  const size_t window = static_cast<size_t>(std::min<uint64_t>(a.storage.size(), kDiffWindowElements));
  const WindowPair w = ThreadWindows(WindowSlot::kStorage, window, window);
  while (ra.remaining() > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(window, ra.remaining()));
    ra.Read(w.a, n);
    rb.Read(w.b, n);
    if (std::memcmp(w.a, w.b, n) != 0) return false;
  }
  return true;
}

// Which dtypes compare by value with which: real numbers with real numbers, complex with complex;
// float4_e2m1fn_x2 (two values an element), bits and quantized types only with themselves
// (quantized ones with their quantizers by their values).
enum class Family { kReal, kComplex, kOwn };

Family FamilyOf(DType d) {
  const DTypeInfo& info = Info(d);
  if (!info.readable || d == DType::kFloat4E2M1FNx2) return Family::kOwn;
  switch (info.kind) {
    case DTypeKind::kFloat:
    case DTypeKind::kInt:
    case DTypeKind::kUInt:
    case DTypeKind::kBool: return Family::kReal;
    case DTypeKind::kComplex: return Family::kComplex;
    default: return Family::kOwn;
  }
}

bool ValuesComparable(DType a, DType b) { return a == b || (FamilyOf(a) == FamilyOf(b) && FamilyOf(a) != Family::kOwn); }

// "model" strips "model/" and "model."; "model/" strips itself. The first prefix that applies.
std::string StripPrefix(const std::string& key, const std::vector<std::string>& prefixes) {
  for (const std::string& p : prefixes) {
    if (p.empty() || key.size() <= p.size() || key.compare(0, p.size(), p) != 0) continue;
    if (p.back() == '/' || p.back() == '.') return key.substr(p.size());
    if ((key[p.size()] == '/' || key[p.size()] == '.') && key.size() > p.size() + 1) return key.substr(p.size() + 1);
  }
  return key;
}

// Whether two views of one dtype and shape hold the same elements, byte for byte (any dtype:
// a block type's raw blocks too), window by window.
bool SameElements(const TensorView& a, const TensorView& b) {
  const size_t es = ElementSize(a.dtype);
  const uint64_t n = static_cast<uint64_t>(a.numel());
  if (a.storage.size() <= kDiffWindowElements * es && SameLayoutAndStorage(a, b)) return true;
  const size_t window = static_cast<size_t>(std::min(n, kDiffWindowElements) * es);
  const WindowPair w = ThreadWindows(WindowSlot::kElements, window, window);
  ElementReader ra(a), rb(b);
  for (uint64_t first = 0; first < n; first += kDiffWindowElements) {
    const uint64_t count = std::min(kDiffWindowElements, n - first);
    ra.Read(count, w.a);
    rb.Read(count, w.b);
    if (std::memcmp(w.a, w.b, count * es) != 0) return false;
  }
  return true;
}

// What a comparison adds up over elements, combined piece by piece in order (CombineSums).
struct DiffSums {
  double sum_sq = 0, sum_sq_a = 0, max_abs = 0;
  uint64_t max_abs_index = 0;  // flat index in the whole tensor
  uint64_t differing = 0;
  bool within = true;
};

// `a` and `b` element by element into `s`; their first element is the tensor's `first_index`.
// `progress` gets `weight` bytes in all, spread over the windows compared.
void AddDifferences(const TensorView& a, const TensorView& b, uint64_t first_index, const DiffOptions& o, DiffSums& into,
                    ProgressReporter& progress, uint64_t weight) {
  const size_t es = ElementSize(a.dtype), es_b = ElementSize(b.dtype);
  const uint64_t n = static_cast<uint64_t>(a.numel());
  if (n == 0) return;
  const bool complex = Info(a.dtype).kind == DTypeKind::kComplex || a.dtype == DType::kFloat4E2M1FNx2;
  const WindowPair w = ThreadWindows(WindowSlot::kCompare, static_cast<size_t>(std::min(n, kDiffWindowElements) * es),
                                     static_cast<size_t>(std::min(n, kDiffWindowElements) * es_b));
  uint8_t* const wa = w.a;
  uint8_t* const wb = w.b;
  ElementReader ra(a), rb(b);
  // Summed here, not in `into`: the pieces' sums lie side by side, and threads writing them
  // element by element would fight over their cache lines.
  DiffSums s = into;
  for (uint64_t i = 0; i < n; ++i) {
    if (i % kDiffWindowElements == 0) {
      const uint64_t count = std::min(kDiffWindowElements, n - i);
      ra.Read(count, wa);
      rb.Read(count, wb);
      if (progress.active()) {
        progress.Add(static_cast<uint64_t>(static_cast<double>(weight) * static_cast<double>(count) / static_cast<double>(n)));
      }
    }
    const uint64_t at = i % kDiffWindowElements;
    ElementValue x = DecodeElement(a.dtype, wa + at * es), y = DecodeElement(b.dtype, wb + at * es_b);
    double parts_a[2] = {Real(x), complex ? x.im : 0}, parts_b[2] = {Real(y), complex ? y.im : 0};
    bool differs = false;
    for (int k = 0; k < (complex ? 2 : 1); ++k) {
      double va = parts_a[k], vb = parts_b[k];
      if (std::isnan(va) && std::isnan(vb)) continue;
      double diff = va - vb;
      if (va == vb) diff = 0;  // equal infinities
      double ad = std::fabs(diff);
      if (std::isnan(ad)) ad = INFINITY;
      s.sum_sq += diff * diff;
      if (std::isfinite(va)) s.sum_sq_a += va * va;
      if (ad > s.max_abs) {
        s.max_abs = ad;
        s.max_abs_index = first_index + i;
      }
      if (ad != 0) differs = true;
      if (!(ad <= o.atol + o.rtol * std::fabs(vb))) s.within = false;
    }
    s.differing += differs;
  }
  into = s;
}

// The next piece's sums into `into` (pieces in order: the first element reaching the maximum
// stays the one reported).
void CombineSums(DiffSums& into, const DiffSums& piece) {
  into.sum_sq += piece.sum_sq;
  into.sum_sq_a += piece.sum_sq_a;
  if (piece.max_abs > into.max_abs) {
    into.max_abs = piece.max_abs;
    into.max_abs_index = piece.max_abs_index;
  }
  into.differing += piece.differing;
  into.within = into.within && piece.within;
}

void SetDifferences(const DiffSums& s, TensorDiff& d) {
  d.max_abs = s.max_abs;
  d.l2 = std::sqrt(s.sum_sq);
  d.l2_a = std::sqrt(s.sum_sq_a);
  d.max_abs_index = s.max_abs_index;
  d.within_tolerance = s.within;
  d.elements_differing = s.differing;
}

// `progress` gets `weight` bytes (A's stored bytes) in all, spread over the windows compared.
void Compare(const TensorView& a, const TensorView& b, const DiffOptions& o, TensorDiff& d, ProgressReporter& progress,
             uint64_t weight) {
  const uint64_t n = static_cast<uint64_t>(a.numel());
  d.identical = a.dtype == b.dtype && SameElements(a, b);
  if (d.identical || n == 0) {
    progress.Add(weight);
    d.within_tolerance = true;
    // ||a||_2 is still reported for relative figures: zero difference needs no pass over a.
    return;
  }
  // A second pass from the start: the first one stopped at the first differing window.
  DiffSums s;
  AddDifferences(a, b, 0, o, s, progress, weight);
  SetDifferences(s, d);
}

// Tensors of more elements than this are compared in pieces of this many on the worker threads
// at once: compared whole, one huge tensor (an embedding of several GB) kept one thread busy
// while the others waited. 16 MiB of float32 a piece, so that starting one costs nothing. The
// pieces are fixed by the data, not by the thread count, and combined in order, so the report
// is the same for any thread count.
constexpr uint64_t kDiffPieceElements = uint64_t{1} << 22;

// Views whose elements a flat range of the storage holds, in order: cut into pieces as they are.
bool SplitsFlat(const TensorView& v) {
  return v.has_data && !v.cast_source && !v.quantizer && !IsBlockDType(v.dtype) && Info(v.dtype).readable &&
         v.is_contiguous();
}

// Elements [first, +count) of a SplitsFlat view, as a view of their own.
TensorView FlatPiece(const TensorView& v, uint64_t first, uint64_t count) {
  TensorView piece = v;
  piece.shape = {static_cast<int64_t>(count)};
  piece.strides = {1};
  piece.storage_offset = v.storage_offset + static_cast<int64_t>(first);
  return piece;
}

// A tensor compared in pieces: first whether each piece is the same bytes, then (when one is
// not) every piece's differences, in a second round.
struct PiecewiseComparison {
  size_t index = 0;  // in DiffReport::tensors
  const TensorView* a = nullptr;
  const TensorView* b = nullptr;
  uint64_t elements = 0;
  std::vector<char> identical;  // per piece, from the first round
  std::vector<DiffSums> sums;   // per piece, from the second
  uint64_t pieces() const { return (elements + kDiffPieceElements - 1) / kDiffPieceElements; }
  uint64_t first(uint64_t p) const { return p * kDiffPieceElements; }
  uint64_t count(uint64_t p) const { return std::min(kDiffPieceElements, elements - first(p)); }
  // A's stored bytes of piece p, for the progress reporter.
  uint64_t weight(uint64_t p) const { return count(p) * ElementSize(a->dtype); }
};

}  // namespace

bool DiffReport::equal() const {
  if (!only_in_a.empty() || !only_in_b.empty() || !values.empty()) return false;
  for (const auto& t : tensors)
    if (!t.comparable || !t.within_tolerance || (t.dtype_changed() && !ignore_dtype)) return false;
  return true;
}

DiffReport Diff(const Document& a, const Document& b, const DiffOptions& options) {
  DiffReport r;
  r.ignore_dtype = options.ignore_dtype;
  // Each side's tensors by their stripped, selected key (two keys stripping to one: an error).
  auto keyed = [&](const Document& doc, const std::vector<std::string>& prefixes, const char* side) {
    std::vector<std::pair<std::string, const TensorView*>> out;
    std::unordered_map<std::string, std::string> original;
    for (const auto& t : doc.tensors) {
      std::string key = StripPrefix(t.key, prefixes);
      // A tensor the document holds beside what it stands for is compared only when selected.
      const bool compared = doc.IsOptIn(t.key) ? options.opt_in && options.opt_in(key) : !options.select || options.select(key);
      if (!compared) {
        ++r.tensors_skipped;
        continue;
      }
      auto [it, fresh] = original.emplace(key, t.key);
      if (!fresh) {
        throw Error(ErrorCode::kUsage, std::string("in ") + side + ", '" + it->second + "' and '" + t.key +
                                           "' both become '" + key + "' once the prefix is stripped");
      }
      out.emplace_back(std::move(key), t.view);
    }
    return out;
  };
  const auto tensors_a = keyed(a, options.strip_prefix_a, "A"), tensors_b = keyed(b, options.strip_prefix_b, "B");
  std::unordered_map<std::string, const TensorView*> in_b;
  for (const auto& [key, view] : tensors_b) in_b.emplace(key, view);
  std::unordered_map<std::string, bool> seen_in_a;
  std::vector<std::pair<size_t, std::function<void()>>> comparisons;  // (tensor, its comparison)
  std::optional<ProgressReporter> reporter;  // made once bytes_compared is known, before any comparison runs
  std::deque<PiecewiseComparison> piecewise;  // large tensors, compared in pieces (stable addresses)
  for (const auto& [key, view] : tensors_a) {
    seen_in_a.emplace(key, true);
    auto it = in_b.find(key);
    if (it == in_b.end()) {
      r.only_in_a.push_back(key);
      continue;
    }
    const TensorView& va = *view;
    const TensorView& vb = *it->second;
    TensorDiff d;
    d.key = key;
    d.a_dtype = Name(va.dtype);
    d.b_dtype = Name(vb.dtype);
    d.a_shape = va.shape;
    d.b_shape = vb.shape;
    d.comparable = va.shape == vb.shape && ValuesComparable(va.dtype, vb.dtype);
    d.elements = static_cast<uint64_t>(va.numel());
    const auto dequantizable = [](const TensorView& v) { return Dequantizable(v) && v.has_data; };
    const bool same_blocks = IsBlockDType(va.dtype) && va.dtype == vb.dtype && va.shape == vb.shape && va.has_data && vb.has_data;
    const size_t index = r.tensors.size();
    // The comparisons run after this loop, tensor by tensor on the worker threads; each writes
    // only its own TensorDiff, so the report is the same whatever the thread count.
    if (dequantizable(va) && dequantizable(vb)) {
      // Quantized tensors compare by their values (what torch's dequantize() or ggml's
      // dequantizers give), in the shape of their values; the same blocks are identical.
      TensorView fa = CastView(va, DType::kFloat32), fb = CastView(vb, DType::kFloat32);
      d.a_shape = fa.shape;
      d.b_shape = fb.shape;
      d.comparable = fa.shape == fb.shape;
      d.elements = static_cast<uint64_t>(fa.numel());
      if (d.comparable) {
        comparisons.push_back({index, [&r, &options, &reporter, index, same_blocks, pa = &va, pb = &vb, fa = std::move(fa), fb = std::move(fb)] {
          TensorDiff& t = r.tensors[index];
          if (same_blocks && SameElements(*pa, *pb)) {
            t.identical = t.within_tolerance = true;
            reporter->Add(pa->nbytes());
          } else {
            Compare(fa, fb, options, t, *reporter, pa->nbytes());
          }
        }});
        r.bytes_compared += va.nbytes();
      }
    } else if (d.comparable && same_blocks) {
      // Blocks trove does not dequantize: the same blocks or not.
      comparisons.push_back({index, [&r, &reporter, index, pa = &va, pb = &vb] {
        TensorDiff& t = r.tensors[index];
        t.identical = t.within_tolerance = SameElements(*pa, *pb);
        reporter->Add(pa->nbytes());
      }});
      r.bytes_compared += va.nbytes();
    } else if (d.comparable) {
      if (!Info(va.dtype).readable || !Info(vb.dtype).readable || !va.has_data || !vb.has_data) {
        d.within_tolerance = !va.has_data && !vb.has_data;
        d.identical = d.within_tolerance && va.dtype == vb.dtype;
      } else {
        if (d.elements > kDiffPieceElements && SplitsFlat(va) && SplitsFlat(vb)) {
          PiecewiseComparison& c = piecewise.emplace_back();
          c.index = index;
          c.a = &va;
          c.b = &vb;
          c.elements = d.elements;
          c.identical.assign(c.pieces(), 0);
          c.sums.resize(c.pieces());
          for (uint64_t p = 0; p < c.pieces(); ++p) {
            comparisons.push_back({index, [&reporter, &c, p] {
              // Dtypes that differ are never identical: the second round compares every piece.
              if (c.a->dtype != c.b->dtype) return;
              c.identical[p] = SameElements(FlatPiece(*c.a, c.first(p), c.count(p)), FlatPiece(*c.b, c.first(p), c.count(p)));
              if (c.identical[p]) reporter->Add(c.weight(p));
            }});
          }
        } else {
          comparisons.push_back({index, [&r, &options, &reporter, index, pa = &va, pb = &vb] {
            Compare(*pa, *pb, options, r.tensors[index], *reporter, pa->nbytes());
          }});
        }
        r.bytes_compared += va.nbytes();
      }
    }
    r.tensors.push_back(std::move(d));
  }
  reporter.emplace(options.progress, r.bytes_compared);
  RunPieces(comparisons.size(), [&](uint64_t k) {
    WithContext("tensor '" + r.tensors[comparisons[k].first].key + "'", comparisons[k].second);
  });
  // The second round: the pieces of large tensors that are not the same bytes throughout.
  std::vector<std::pair<PiecewiseComparison*, uint64_t>> second;
  for (PiecewiseComparison& c : piecewise) {
    TensorDiff& d = r.tensors[c.index];
    d.identical = std::all_of(c.identical.begin(), c.identical.end(), [](char same) { return same != 0; });
    // ||a||_2 is still reported for relative figures: zero difference needs no pass over a.
    if (d.identical) {
      d.within_tolerance = true;
      continue;
    }
    for (uint64_t p = 0; p < c.pieces(); ++p) second.emplace_back(&c, p);
  }
  RunPieces(second.size(), [&](uint64_t k) {
    PiecewiseComparison& c = *second[k].first;
    const uint64_t p = second[k].second;
    WithContext("tensor '" + r.tensors[c.index].key + "'", [&] {
      // The bytes of a piece found identical are counted already.
      ProgressReporter& progress = *reporter;
      AddDifferences(FlatPiece(*c.a, c.first(p), c.count(p)), FlatPiece(*c.b, c.first(p), c.count(p)), c.first(p), options,
                     c.sums[p], progress, c.identical[p] ? 0 : c.weight(p));
    });
  });
  for (PiecewiseComparison& c : piecewise) {
    TensorDiff& d = r.tensors[c.index];
    if (d.identical) continue;
    DiffSums total;
    for (const DiffSums& piece : c.sums) CombineSums(total, piece);
    SetDifferences(total, d);
  }
  reporter->Finish();
  for (const auto& [key, view] : tensors_b)
    if (!seen_in_a.count(key)) r.only_in_b.push_back(key);
  auto la = ValueLeaves(a.root, options.strip_prefix_a), lb = ValueLeaves(b.root, options.strip_prefix_b);
  for (const auto& [k, v] : la) {
    auto it = lb.find(k);
    if (it == lb.end()) r.values.push_back({k, v.value, nullptr, v.text, ""});
    else if (it->second.text != v.text) r.values.push_back({k, v.value, it->second.value, v.text, it->second.text});
  }
  for (const auto& [k, v] : lb)
    if (!la.count(k)) r.values.push_back({k, nullptr, v.value, "", v.text});
  r.a_values = a.arena;
  r.b_values = b.arena;
  return r;
}

}  // namespace trove
