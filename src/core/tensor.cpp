#include "trove/tensor.h"

#include <algorithm>
#include <cmath>
#include <bit>
#include <cstring>
#include <memory>
#include <string>

#include "core/ggml_blocks.h"
#include "trove/element_codec.h"
#include "trove/error.h"

namespace trove {
namespace {

int64_t CheckedMul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) Fail(ErrorCode::kCorrupt, std::string(what) + " overflows 64 bits");
  return r;
}

int64_t CheckedAdd(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) Fail(ErrorCode::kCorrupt, std::string(what) + " overflows 64 bits");
  return r;
}

size_t SwapUnit(DType dtype) {
  const auto& info = Info(dtype);
  if (info.kind == DTypeKind::kComplex) return info.element_size / 2;
  return info.element_size;
}

void StoreElement(DType dtype, double value, uint8_t* out) {
  switch (dtype) {
    case DType::kFloat32: { float f = static_cast<float>(value); std::memcpy(out, &f, 4); return; }
    case DType::kFloat64: std::memcpy(out, &value, 8); return;
    case DType::kFloat16: { uint16_t h = FloatToHalf(static_cast<float>(value)); std::memcpy(out, &h, 2); return; }
    case DType::kBFloat16: { uint16_t b = FloatToBFloat16(static_cast<float>(value)); std::memcpy(out, &b, 2); return; }
    case DType::kInt64: { int64_t v = static_cast<int64_t>(value); std::memcpy(out, &v, 8); return; }
    case DType::kInt32: { int32_t v = static_cast<int32_t>(value); std::memcpy(out, &v, 4); return; }
    case DType::kInt16: { int16_t v = static_cast<int16_t>(value); std::memcpy(out, &v, 2); return; }
    case DType::kInt8: { int8_t v = static_cast<int8_t>(value); std::memcpy(out, &v, 1); return; }
    case DType::kUInt8: out[0] = static_cast<uint8_t>(value); return;
    case DType::kUInt16: { uint16_t v = static_cast<uint16_t>(value); std::memcpy(out, &v, 2); return; }
    case DType::kUInt32: { uint32_t v = static_cast<uint32_t>(value); std::memcpy(out, &v, 4); return; }
    case DType::kUInt64: { uint64_t v = static_cast<uint64_t>(value); std::memcpy(out, &v, 8); return; }
    default: Fail(ErrorCode::kUnsupported, "cannot convert to " + std::string(Name(dtype)));
  }
}

double NumericValue(const ElementValue& e) {
  switch (e.kind) {
    case ElementValue::Kind::kFloat: return e.re;
    case ElementValue::Kind::kInt: return static_cast<double>(e.i);
    case ElementValue::Kind::kUInt: return static_cast<double>(e.u);
    case ElementValue::Kind::kBool: return e.b ? 1 : 0;
    default: Fail(ErrorCode::kUnsupported, "complex values cannot be converted to a real dtype");
  }
}

}  // namespace

// torch's arithmetic (its CPU kernels): per tensor in float32, the scale rounded to float first;
// per channel in the scales' own dtype (float64 for per_channel_affine, float32 for float qparams).
double Dequantized(double q, double zero_point, double scale, bool in_double) {
  if (in_double) return (q - zero_point) * scale;
  return static_cast<double>((static_cast<float>(q) - static_cast<float>(zero_point)) * static_cast<float>(scale));
}

bool DequantizesInDouble(const Quantizer& q) { return q.per_channel() && q.scales->dtype == DType::kFloat64; }

// The values of a quantized view: (q - zero_point) * scale, a channel's pair for the per-channel
// schemes. The channel of the i-th element in C order is (i / inner) % channels.
class Dequantizer {
 public:
  explicit Dequantizer(const TensorView& q) {
    if (!q.quantizer) Fail(ErrorCode::kUnsupported, "a quantized tensor without its quantizer has no values");
    repr_ = IntReprView(q).dtype;
    const Quantizer& z = *q.quantizer;
    in_double_ = DequantizesInDouble(z);
    if (!z.per_channel()) {
      scales_.values = {z.scale};
      zero_points_.values = {static_cast<double>(z.zero_point)};
      return;
    }
    const size_t axis = static_cast<size_t>(z.axis);
    channels_ = static_cast<uint64_t>(q.shape[axis]);
    for (size_t d = axis + 1; d < q.shape.size(); ++d) inner_ *= static_cast<uint64_t>(std::max<int64_t>(q.shape[d], 1));
    scales_ = ChannelTable(*z.scales);
    zero_points_ = ChannelTable(*z.zero_points);
  }

  double Value(const uint8_t* in, uint64_t flat) const {
    const double v = NumericValue(DecodeElement(repr_, in));
    const uint64_t c = channels_ == 0 ? 0 : (flat / inner_) % channels_;
    return Dequantized(v, zero_points_.At(c), scales_.At(c), in_double_);
  }
  DType repr() const { return repr_; }

 private:
  // A per-channel parameter as doubles, read once per stream: the stored elements the channels'
  // view spans (channel c is element c * stride of the table), so the table is at most the
  // stored scales' own size whatever the channel count: a stride-0 view of one stored scale
  // over 2^27 channels is a table of one.
  struct ChannelTable {
    ChannelTable() = default;
    explicit ChannelTable(const TensorView& t) {
      const int64_t channels = t.shape.empty() ? 1 : t.shape[0];
      stride = t.shape.empty() || channels <= 1 ? 0 : static_cast<uint64_t>(t.strides[0]);
      const uint64_t span = channels == 0 ? 0 : static_cast<uint64_t>(channels - 1) * stride + 1;
      TensorView stored = t;  // the stored elements [offset, offset + span), validated inside the storage
      stored.shape = {static_cast<int64_t>(span)};
      stored.strides = {1};
      values.resize(static_cast<size_t>(span));
      for (uint64_t i = 0; i < span; ++i) {
        const int64_t at = static_cast<int64_t>(i);
        values[static_cast<size_t>(i)] = NumericValue(stored.Element(std::span<const int64_t>(&at, 1)));
      }
    }
    double At(uint64_t channel) const { return values[static_cast<size_t>(channel * stride)]; }
    std::vector<double> values;
    uint64_t stride = 0;
  };
  DType repr_ = DType::kInt8;
  uint64_t inner_ = 1, channels_ = 0;
  bool in_double_ = false;
  ChannelTable scales_, zero_points_;
};

namespace {

// The casts people run on whole checkpoints (float32 to bfloat16 or float16 and back), as tight
// loops over a run of whole elements: the same rounding as the element path (FloatToBFloat16,
// FloatToHalf: round to nearest even, NaN stays NaN), without going through double, and the
// losses counted alongside. Returns false for other pairs (the element path does them).
struct LossCounts {
  uint64_t overflowed = 0, underflowed = 0;
};

// Branch-free, so that the compiler vectorizes it (the optimize attribute asks GCC for that at
// -O2 too); counts in 32 bits per call, whose runs are at most one chunk.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
// Chosen at load time for the CPU it runs on (AVX2 where present, the SSE2 baseline elsewhere).
__attribute__((optimize("tree-vectorize"), target_clones("avx2", "default")))
#elif defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize")))
#endif
void Float32ToBFloat16Run(const uint8_t* in, uint8_t* out, size_t n, LossCounts& losses) {
  uint32_t overflowed = 0, underflowed = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t f;
    std::memcpy(&f, in + 4 * i, 4);
    const uint32_t magnitude = f & 0x7FFFFFFFu;
    const uint32_t nan = magnitude > 0x7F800000u;
    const uint32_t rounded = (f + 0x7FFFu + ((f >> 16) & 1u)) >> 16;
    const uint32_t quiet = (f >> 16) | 0x40u;
    const uint16_t b = static_cast<uint16_t>(nan ? quiet : rounded);
    overflowed += (magnitude < 0x7F800000u) & ((b & 0x7F80u) == 0x7F80u);
    underflowed += (magnitude != 0) & (nan ^ 1u) & ((b & 0x7FFFu) == 0);
    std::memcpy(out + 2 * i, &b, 2);
  }
  losses.overflowed += overflowed;
  losses.underflowed += underflowed;
}

bool CastRun(DType from, DType to, const uint8_t* in, uint8_t* out, size_t n, LossCounts& losses) {
  if (from == DType::kFloat32 && to == DType::kBFloat16) {
    // 32-bit counters: split a run that could reach 2^32 elements.
    constexpr size_t kRun = size_t{1} << 30;
    for (size_t done = 0; done < n; done += kRun) {
      const size_t m = std::min(kRun, n - done);
      Float32ToBFloat16Run(in + 4 * done, out + 2 * done, m, losses);
    }
    return true;
  }
  if (from == DType::kFloat32 && to == DType::kFloat16) {
    for (size_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, in + 4 * i, 4);
      const uint16_t h = FloatToHalf(f);
      const uint32_t magnitude = std::bit_cast<uint32_t>(f) & 0x7FFFFFFFu;
      losses.overflowed += (magnitude < 0x7F800000u) & ((h & 0x7C00u) == 0x7C00u);
      losses.underflowed += (magnitude != 0) & (magnitude <= 0x7F800000u) & ((h & 0x7FFFu) == 0);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return true;
  }
  if (from == DType::kBFloat16 && to == DType::kFloat32) {  // exact
    for (size_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, in + 2 * i, 2);
      const uint32_t f = uint32_t{b} << 16;
      std::memcpy(out + 4 * i, &f, 4);
    }
    return true;
  }
  if (from == DType::kFloat16 && to == DType::kFloat32) {  // exact
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      const float f = static_cast<float>(HalfToDouble(h));
      std::memcpy(out + 4 * i, &f, 4);
    }
    return true;
  }
  return false;
}

// A block source's values (CastView): its bytes streamed in C order are whole blocks, each
// dequantized to float32 and then rounded to dtype (float32 as it is), at most about chunk_bytes
// of output at a time.
void ForEachBlockCastChunk(const TensorView& source, DType dtype, const std::function<void(const uint8_t*, size_t)>& fn,
                           size_t chunk_bytes, CastLosses* losses) {
  const DTypeInfo& info = Info(source.dtype);
  const size_t block_bytes = info.block_bytes, block_values = info.block_values, out_size = ElementSize(dtype);
  const size_t per_chunk = std::max<size_t>(1, chunk_bytes / (block_values * out_size));  // blocks
  std::vector<float> values(per_chunk * block_values);
  std::vector<uint8_t> out(dtype == DType::kFloat32 ? 0 : per_chunk * block_values * out_size);
  std::vector<uint8_t> partial;  // a block split across the source's chunks
  partial.reserve(block_bytes);
  LossCounts counts;
  auto emit = [&](const uint8_t* blocks, size_t n) {
    DequantizeBlocks(source.dtype, blocks, n, values.data());
    const size_t count = n * block_values;
    const auto* as_bytes = reinterpret_cast<const uint8_t*>(values.data());
    if (dtype == DType::kFloat32) return fn(as_bytes, count * 4);
    if (!CastRun(DType::kFloat32, dtype, as_bytes, out.data(), count, counts)) {
      for (size_t i = 0; i < count; ++i) StoreElement(dtype, values[i], out.data() + i * out_size);  // float64: exact
    }
    fn(out.data(), count * out_size);
  };
  source.ForEachChunk([&](const uint8_t* p, size_t n) {
    while (n > 0) {
      if (!partial.empty()) {
        const size_t take = std::min(n, block_bytes - partial.size());
        partial.insert(partial.end(), p, p + take);
        p += take;
        n -= take;
        if (partial.size() == block_bytes) {
          emit(partial.data(), 1);
          partial.clear();
        }
        continue;
      }
      const size_t whole = std::min(n / block_bytes, per_chunk);
      if (whole == 0) {
        partial.assign(p, p + n);
        break;
      }
      emit(p, whole);
      p += whole * block_bytes;
      n -= whole * block_bytes;
    }
  }, chunk_bytes);
  if (!partial.empty()) Fail(ErrorCode::kCorrupt, "a " + std::string(info.name) + " tensor ends inside a block");
  if (losses != nullptr) {
    losses->overflowed = counts.overflowed;
    losses->underflowed = counts.underflowed;
    losses->sign_lost = 0;
    losses->counted = true;
  }
}

// Streams source's elements converted to dtype, chunk by chunk (bounded memory), counting into
// `losses` (when given) what the conversion did to the values.
void ForEachCastChunk(const TensorView& source, DType dtype, const std::function<void(const uint8_t*, size_t)>& fn,
                      size_t chunk_bytes, CastLosses* losses) {
  if (IsBlockDType(source.dtype)) return ForEachBlockCastChunk(source, dtype, fn, chunk_bytes, losses);
  const size_t in_size = ElementSize(source.dtype), out_size = ElementSize(dtype);
  // The converted chunk: grown when a chunk needs more, never zero-filled (every byte is written
  // before it is handed on).
  std::unique_ptr<uint8_t[]> out;
  size_t out_capacity = 0, out_used = 0;
  auto reserve = [&](size_t bytes) {
    if (bytes <= out_capacity) return;
    auto grown = std::make_unique_for_overwrite<uint8_t[]>(bytes);
    if (out_used > 0) std::memcpy(grown.get(), out.get(), out_used);
    out = std::move(grown);
    out_capacity = bytes;
  };
  std::string carry;
  uint64_t overflowed = 0, underflowed = 0, sign_lost = 0;
  std::optional<Dequantizer> dequantizer;
  if (source.quantizer) dequantizer.emplace(source);
  uint64_t flat = 0;  // the element's index in C order
  auto convert = [&](const uint8_t* in, uint8_t* to) {
    const double value = dequantizer ? dequantizer->Value(in, flat++) : NumericValue(DecodeElement(source.dtype, in));
    StoreElement(dtype, value, to);
    if (losses == nullptr || std::isnan(value)) return;
    const double result = NumericValue(DecodeElement(dtype, to));
    overflowed += std::isfinite(value) && !std::isfinite(result);
    underflowed += value != 0 && result == 0;
    sign_lost += std::signbit(value) && !std::signbit(result);
  };
  source.ForEachChunk([&](const uint8_t* p, size_t n) {
    out_used = 0;
    size_t pos = 0;
    if (!carry.empty()) {  // an element split across chunks
      size_t take = std::min(in_size - carry.size(), n);
      carry.append(reinterpret_cast<const char*>(p), take);
      pos = take;
      if (carry.size() == in_size) {
        reserve(out_size);
        convert(reinterpret_cast<const uint8_t*>(carry.data()), out.get());
        out_used = out_size;
        carry.clear();
      }
    }
    size_t whole = (n - pos) / in_size;
    const size_t base = out_used;
    reserve(base + whole * out_size);
    out_used = base + whole * out_size;
    LossCounts run;
    if (dequantizer || !CastRun(source.dtype, dtype, p + pos, out.get() + base, whole, run)) {
      for (size_t i = 0; i < whole; ++i) convert(p + pos + i * in_size, out.get() + base + i * out_size);
    }
    overflowed += run.overflowed;
    underflowed += run.underflowed;
    pos += whole * in_size;
    carry.append(reinterpret_cast<const char*>(p + pos), n - pos);
    if (out_used > 0) fn(out.get(), out_used);
  }, chunk_bytes);
  if (losses != nullptr) {
    losses->overflowed = overflowed;
    losses->underflowed = underflowed;
    losses->sign_lost = sign_lost;
    losses->counted = true;
  }
}

}  // namespace

namespace {

// Why a ggml block view has no values through CastView, or none.
std::optional<std::string> BlockValuesRefusal(const TensorView& v) {
  const DTypeInfo& info = Info(v.dtype);
  if (!CanDequantizeBlocks(v.dtype)) return "dequantizing " + std::string(info.name) + " (trove dequantizes " + DequantizedBlockTypes() + ")";
  if (v.byte_order == ByteOrder::kBig) return std::string("dequantizing a big-endian file's blocks");
  if (v.shape.empty() || v.shape.back() % info.block_bytes != 0 || (v.shape.back() > 1 && v.strides.back() != 1)) {
    return "a " + std::string(info.name) + " view whose last dimension is not whole blocks of " + std::to_string(info.block_bytes) + " bytes";
  }
  return std::nullopt;
}

}  // namespace

bool Dequantizable(const TensorView& v) {
  if (IsBlockDType(v.dtype)) return !BlockValuesRefusal(v);
  return v.quantizer && IntReprDType(v.dtype);
}

TensorView CastView(const TensorView& source, DType dtype) {
  const auto kind = Info(dtype).kind;
  const auto from = Info(source.dtype).kind;
  const bool blocks = IsBlockDType(source.dtype);
  if (blocks) {
    if (auto why = BlockValuesRefusal(source)) Fail(ErrorCode::kUnsupported, *why);
    if (kind != DTypeKind::kFloat) Fail(ErrorCode::kUnsupported, "a block-quantized tensor converts only to a floating dtype (its values)");
  } else if (!Info(source.dtype).readable) {
    if (!source.quantizer || !IntReprDType(source.dtype)) Fail(ErrorCode::kUnsupported, "quantized tensors without their quantizer cannot be converted");
    if (kind != DTypeKind::kFloat) Fail(ErrorCode::kUnsupported, "a quantized tensor converts only to a floating dtype (its values)");
  }
  if (kind != DTypeKind::kFloat && kind != DTypeKind::kInt && kind != DTypeKind::kUInt)
    Fail(ErrorCode::kUnsupported, "cannot convert to " + std::string(Name(dtype)));
  if (from == DTypeKind::kComplex) Fail(ErrorCode::kUnsupported, "cannot convert complex values to " + std::string(Name(dtype)));
  TensorView v;
  v.dtype = dtype;
  v.shape = source.shape;
  if (blocks) v.shape.back() = v.shape.back() / Info(source.dtype).block_bytes * Info(source.dtype).block_values;
  v.strides.assign(source.shape.size(), 1);
  for (size_t i = v.shape.size(); i-- > 1;) v.strides[i - 1] = v.strides[i] * std::max<int64_t>(v.shape[i], 1);
  v.has_data = source.has_data;
  v.requires_grad = source.requires_grad;
  v.is_parameter = source.is_parameter;
  v.bare_storage = source.bare_storage;
  v.storage_index = source.storage_index;
  v.storage_key = source.storage_key;
  v.cast_source = std::make_shared<TensorView>(source);
  if (kind == DTypeKind::kFloat) v.cast_losses = std::make_shared<CastLosses>();
  return v;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void ByteSwapElements(uint8_t* data, uint64_t count, DType dtype) {
  size_t unit = SwapUnit(dtype);
  if (unit <= 1) return;
  uint64_t units = count * (ElementSize(dtype) / unit);
  for (uint64_t i = 0; i < units; ++i) std::reverse(data + i * unit, data + (i + 1) * unit);
}

// A converting view's element: the source's element stored as the target dtype and read back, so
// that it rounds exactly as the streamed bytes do.
static ElementValue CastElement(const TensorView& view, std::span<const int64_t> index) {
  uint8_t bytes[16];
  const TensorView& source = *view.cast_source;
  if (IsBlockDType(source.dtype)) {
    // The one block holding the element, read in place and dequantized (CastView made sure the
    // last dimension is whole blocks, stride 1).
    if (index.size() != view.shape.size()) {
      Fail(ErrorCode::kUsage, "element index has " + std::to_string(index.size()) + " coordinates; the tensor " +
                                  ShapeString(view.shape) + " has " + std::to_string(view.shape.size()));
    }
    uint64_t at = static_cast<uint64_t>(source.storage_offset);
    for (size_t d = 0; d < index.size(); ++d) {
      if (index[d] < 0 || index[d] >= view.shape[d]) {
        Fail(ErrorCode::kUsage, "element index " + std::to_string(index[d]) + " is out of range for dimension " +
                                    std::to_string(d) + " of size " + std::to_string(view.shape[d]));
      }
      if (d + 1 < index.size()) at += static_cast<uint64_t>(index[d]) * static_cast<uint64_t>(source.strides[d]);
    }
    const DTypeInfo& info = Info(source.dtype);
    const uint64_t column = static_cast<uint64_t>(index.back());
    at += column / info.block_values * info.block_bytes;
    float values[kMaxBlockValues];
    DequantizeBlocks(source.dtype, source.storage.Slice(at, info.block_bytes).data(), 1, values);
    StoreElement(view.dtype, values[column % info.block_values], bytes);
    return DecodeElement(view.dtype, bytes);
  }
  if (source.quantizer) {
    // One element: its channel's scale and zero point read in place, not the whole table.
    const ElementValue q = IntReprView(source).Element(index);
    const Quantizer& z = *source.quantizer;
    double scale = z.scale, zero_point = static_cast<double>(z.zero_point);
    if (z.per_channel()) {
      const int64_t c = index[static_cast<size_t>(z.axis)];
      scale = NumericValue(z.scales->Element(std::span<const int64_t>(&c, 1)));
      zero_point = NumericValue(z.zero_points->Element(std::span<const int64_t>(&c, 1)));
    }
    StoreElement(view.dtype, Dequantized(NumericValue(q), zero_point, scale, DequantizesInDouble(z)), bytes);
    return DecodeElement(view.dtype, bytes);
  }
  StoreElement(view.dtype, NumericValue(source.Element(index)), bytes);
  return DecodeElement(view.dtype, bytes);
}

ElementValue TensorView::Element(std::span<const int64_t> index) const {
  if (cast_source) return CastElement(*this, index);
  if (!has_data) Fail(ErrorCode::kUnsupported, "tensor has no data (meta tensor)");
  if (index.size() != shape.size()) {
    Fail(ErrorCode::kUsage, "element index has " + std::to_string(index.size()) + " coordinates; the tensor " +
                                ShapeString(shape) + " has " + std::to_string(shape.size()));
  }
  // Validate() bounded every element inside the storage, so the sum below cannot overflow.
  uint64_t element = static_cast<uint64_t>(storage_offset);
  for (size_t d = 0; d < index.size(); ++d) {
    if (index[d] < 0 || index[d] >= shape[d]) {
      Fail(ErrorCode::kUsage, "element index " + std::to_string(index[d]) + " is out of range for dimension " +
                                  std::to_string(d) + " of size " + std::to_string(shape[d]));
    }
    element += static_cast<uint64_t>(index[d]) * static_cast<uint64_t>(strides[d]);
  }
  const uint64_t esize = ElementSize(dtype);
  uint8_t bytes[16];
  SharedBytes one = storage.Slice(element * esize, esize);
  std::copy(one.data(), one.data() + esize, bytes);
  if (byte_order == ByteOrder::kBig && SwapUnit(dtype) > 1) ByteSwapElements(bytes, 1, dtype);
  return DecodeElement(dtype, bytes);
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (shape[i] == 0) return true;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

void TensorView::Validate() const {
  if (shape.size() > kMaxTensorRank) {
    Fail(ErrorCode::kLimit, "tensor rank " + std::to_string(shape.size()) + " exceeds kMaxTensorRank (" +
                                std::to_string(kMaxTensorRank) + ")");
  }
  if (strides.size() != shape.size()) {
    Fail(ErrorCode::kCorrupt, "tensor has " + std::to_string(shape.size()) + " sizes but " +
                                  std::to_string(strides.size()) + " strides");
  }
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) Fail(ErrorCode::kCorrupt, "negative size " + std::to_string(shape[i]) + " in shape");
    if (strides[i] < 0) Fail(ErrorCode::kCorrupt, "negative stride " + std::to_string(strides[i]));
    n = CheckedMul(n, shape[i], "element count");
  }
  if (storage_offset < 0) Fail(ErrorCode::kCorrupt, "negative storage offset " + std::to_string(storage_offset));
  const int64_t esize = static_cast<int64_t>(ElementSize(dtype));
  CheckedMul(n, esize, "tensor byte size");
  // An empty view reaches no element: torch takes any offset for it (even one whose bytes
  // overflow), and so does trove; nothing computes an address from it (StoredBytes,
  // first_element).
  if (n == 0) return;
  CheckedMul(storage_offset, esize, "storage offset in bytes");
  if (!has_data) return;
  int64_t last = storage_offset;  // index of the last element reached
  for (size_t i = 0; i < shape.size(); ++i)
    last = CheckedAdd(last, CheckedMul(shape[i] - 1, strides[i], "view extent"), "view extent");
  int64_t end_bytes = CheckedMul(CheckedAdd(last, 1, "view extent"), esize, "view extent in bytes");
  if (static_cast<uint64_t>(end_bytes) > storage.size()) {
    Fail(ErrorCode::kCorrupt, "view of shape " + ShapeString(shape) + " at offset " + std::to_string(storage_offset) +
                                  " needs " + std::to_string(end_bytes) + " bytes but its storage has " +
                                  std::to_string(storage.size()));
  }
}

std::optional<SharedBytes> TensorView::StoredBytes() const {
  if (cast_source || !has_data || !is_contiguous()) return std::nullopt;
  if (byte_order == ByteOrder::kBig && SwapUnit(dtype) > 1) return std::nullopt;
  if (numel() == 0) return storage.Slice(0, 0);  // its offset may lie anywhere (Validate)
  return storage.Slice(static_cast<uint64_t>(storage_offset) * ElementSize(dtype), nbytes());
}

void TensorView::ForEachChunk(const std::function<void(const uint8_t*, size_t)>& fn, size_t chunk_bytes) const {
  const uint64_t total = nbytes();
  if (total == 0) return;
  if (cast_source) {
    ForEachCastChunk(*cast_source, dtype, fn, chunk_bytes, cast_losses.get());
    return;
  }
  if (!has_data) Fail(ErrorCode::kUsage, "tensor has no data (meta tensor)");
  const size_t esize = ElementSize(dtype);
  const bool swap = byte_order == ByteOrder::kBig && SwapUnit(dtype) > 1;
  if (is_contiguous() && !swap) {
    storage.Slice(static_cast<uint64_t>(storage_offset) * esize, total).Stream(fn);  // zero-copy
    return;
  }
  chunk_bytes = std::max(chunk_bytes, esize);
  std::vector<uint8_t> scratch;
  scratch.reserve(std::min<uint64_t>(total, chunk_bytes));
  auto flush = [&] {
    if (scratch.empty()) return;
    if (swap) ByteSwapElements(scratch.data(), scratch.size() / esize, dtype);
    fn(scratch.data(), scratch.size());
    scratch.clear();
    ThrowIfMappedFileChanged();  // no point gathering on through zeros
  };
  if (is_contiguous()) {  // only needs swapping
    const uint8_t* p = first_element();
    for (uint64_t done = 0; done < total;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes - chunk_bytes % esize, total - done));
      scratch.assign(p + done, p + done + n);
      flush();
      done += n;
    }
    return;
  }
  // Gather in row-major order; rows whose last dimension has stride 1 are copied whole.
  const size_t rank = shape.size();
  const int64_t inner = shape[rank - 1];
  const bool inner_dense = strides[rank - 1] == 1;
  std::vector<int64_t> index(rank, 0);
  const uint8_t* base = storage.data();
  for (;;) {
    int64_t off = storage_offset;
    for (size_t d = 0; d + 1 < rank; ++d) off += index[d] * strides[d];
    if (inner_dense) {
      const uint8_t* src = base + static_cast<uint64_t>(off) * esize;
      uint64_t row = static_cast<uint64_t>(inner) * esize;
      for (uint64_t done = 0; done < row;) {
        size_t room = chunk_bytes - scratch.size();
        if (room < esize) { flush(); room = chunk_bytes; }
        size_t n = static_cast<size_t>(std::min<uint64_t>(room - room % esize, row - done));
        scratch.insert(scratch.end(), src + done, src + done + n);
        done += n;
      }
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        if (scratch.size() + esize > chunk_bytes) flush();
        const uint8_t* src = base + static_cast<uint64_t>(off + j * strides[rank - 1]) * esize;
        scratch.insert(scratch.end(), src, src + esize);
      }
    }
    // Advance the outer index (odometer).
    size_t d = rank - 1;
    for (;;) {
      if (d == 0) { flush(); return; }
      --d;
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

void TensorView::CopyElements(uint64_t first, uint64_t count, uint8_t* out) const {
  if (cast_source) Fail(ErrorCode::kUsage, "CopyElements of a converting view");
  if (!has_data) Fail(ErrorCode::kUsage, "tensor has no data (meta tensor)");
  const uint64_t n = static_cast<uint64_t>(numel());
  if (first > n || count > n - first) Fail(ErrorCode::kUsage, "element range outside the tensor");
  if (count == 0) return;
  const size_t esize = ElementSize(dtype);
  const bool swap = byte_order == ByteOrder::kBig && SwapUnit(dtype) > 1;
  const uint8_t* base = storage.data();
  if (is_contiguous()) {
    std::memcpy(out, base + (static_cast<uint64_t>(storage_offset) + first) * esize, count * esize);
  } else {
    const size_t rank = shape.size();
    std::vector<int64_t> index(rank, 0);
    uint64_t rest = first;
    for (size_t d = rank; d-- > 0;) {
      index[d] = static_cast<int64_t>(rest % static_cast<uint64_t>(shape[d]));
      rest /= static_cast<uint64_t>(shape[d]);
    }
    int64_t off = storage_offset;
    for (size_t d = 0; d < rank; ++d) off += index[d] * strides[d];
    for (uint64_t i = 0; i < count; ++i) {
      std::memcpy(out + i * esize, base + static_cast<uint64_t>(off) * esize, esize);
      for (size_t d = rank; d-- > 0;) {  // odometer, keeping the offset in step
        off += strides[d];
        if (++index[d] < shape[d]) break;
        off -= strides[d] * shape[d];
        index[d] = 0;
      }
    }
  }
  if (swap) ByteSwapElements(out, count, dtype);
  ThrowIfMappedFileChanged();
}

// A converting view's source elements are read this many at a time before conversion.
constexpr uint64_t kCastReadElements = 4096;

ElementReader::ElementReader(const TensorView& view) : view_(view) {
  numel_ = static_cast<uint64_t>(view.numel());
  if (view.cast_source) {
    source_ = std::make_unique<ElementReader>(*view.cast_source);
    if (view.cast_source->quantizer) dequantizer_ = std::make_shared<const Dequantizer>(*view.cast_source);
    return;
  }
  if (!view.has_data) Fail(ErrorCode::kUsage, "tensor has no data (meta tensor)");
  swap_ = view.byte_order == ByteOrder::kBig && SwapUnit(view.dtype) > 1;
  if (numel_ > 0 && view.is_contiguous()) {
    const uint64_t esize = ElementSize(view.dtype);
    bytes_.emplace(view.storage.Slice(static_cast<uint64_t>(view.storage_offset) * esize, numel_ * esize));
  }
}

void ElementReader::Read(uint64_t count, uint8_t* out) {
  if (count > remaining()) Fail(ErrorCode::kUsage, "element range outside the tensor");
  if (count == 0) return;
  if (source_ && IsBlockDType(view_.cast_source->dtype)) {
    // Whole blocks from the source, dequantized kCastReadElements values or so at a time.
    const DType from = view_.cast_source->dtype;
    const DTypeInfo& info = Info(from);
    const size_t out_size = ElementSize(view_.dtype);
    for (uint64_t done = 0; done < count;) {
      if (block_values_next_ == block_values_.size()) {
        const uint64_t blocks = std::min<uint64_t>(std::max<uint64_t>(1, kCastReadElements / info.block_values),
                                                   source_->remaining() / info.block_bytes);
        if (blocks == 0) Fail(ErrorCode::kCorrupt, "a " + std::string(info.name) + " tensor ends inside a block");
        scratch_.resize(static_cast<size_t>(blocks * info.block_bytes));
        source_->Read(blocks * info.block_bytes, scratch_.data());
        block_values_.resize(static_cast<size_t>(blocks * info.block_values));
        DequantizeBlocks(from, scratch_.data(), blocks, block_values_.data());
        block_values_next_ = 0;
      }
      const uint64_t k = std::min<uint64_t>(count - done, block_values_.size() - block_values_next_);
      uint8_t* to = out + done * out_size;
      if (view_.dtype == DType::kFloat32) {
        std::memcpy(to, block_values_.data() + block_values_next_, static_cast<size_t>(k) * 4);
      } else {
        for (uint64_t i = 0; i < k; ++i) StoreElement(view_.dtype, block_values_[block_values_next_ + i], to + i * out_size);
      }
      block_values_next_ += static_cast<size_t>(k);
      done += k;
    }
  } else if (source_) {
    const DType from = view_.cast_source->dtype;
    const size_t in_size = ElementSize(from), out_size = ElementSize(view_.dtype);
    for (uint64_t done = 0; done < count;) {
      const uint64_t k = std::min(kCastReadElements, count - done);
      scratch_.resize(static_cast<size_t>(k * in_size));
      source_->Read(k, scratch_.data());
      for (uint64_t i = 0; i < k; ++i) {
        const uint8_t* in = scratch_.data() + i * in_size;
        StoreElement(view_.dtype,
                     dequantizer_ ? dequantizer_->Value(in, next_ + done + i) : NumericValue(DecodeElement(from, in)),
                     out + (done + i) * out_size);
      }
      done += k;
    }
  } else if (bytes_) {
    bytes_->Read(out, static_cast<size_t>(count * ElementSize(view_.dtype)));
    if (swap_) ByteSwapElements(out, count, view_.dtype);
  } else {
    view_.CopyElements(next_, count, out);
  }
  next_ += count;
}

SharedBytes TensorView::ContiguousLittleEndian() const {
  const bool swap = byte_order == ByteOrder::kBig && SwapUnit(dtype) > 1;
  if (nbytes() == 0) return SharedBytes();
  if (cast_source) {
    std::vector<uint8_t> out;
    out.reserve(nbytes());
    ForEachChunk([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
    return SharedBytes::FromVector(std::move(out));
  }
  if (numel() == 0) return storage.Slice(0, 0);  // its offset may lie anywhere (Validate)
  if (is_contiguous() && !swap) return storage.Slice(static_cast<uint64_t>(storage_offset) * ElementSize(dtype), nbytes());
  std::vector<uint8_t> out;
  out.reserve(nbytes());
  ForEachChunk([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
  return SharedBytes::FromVector(std::move(out));
}

}  // namespace trove
