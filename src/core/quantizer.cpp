#include "trove/quantizer.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <limits>

#include "core/float_text.h"
#include "trove/error.h"
#include "trove/tensor.h"

namespace trove {

std::string_view QSchemeName(QScheme scheme) {
  switch (scheme) {
    case QScheme::kPerTensorAffine: return "per_tensor_affine";
    case QScheme::kPerChannelAffine: return "per_channel_affine";
    case QScheme::kPerChannelAffineFloatQParams: return "per_channel_affine_float_qparams";
  }
  return "?";
}

std::optional<QScheme> QSchemeOfName(std::string_view name) {
  for (QScheme s : {QScheme::kPerTensorAffine, QScheme::kPerChannelAffine, QScheme::kPerChannelAffineFloatQParams}) {
    if (QSchemeName(s) == name) return s;
  }
  return std::nullopt;
}

std::optional<DType> IntReprDType(DType quantized) {
  switch (quantized) {
    case DType::kQInt8: return DType::kInt8;
    case DType::kQUInt8: return DType::kUInt8;
    case DType::kQInt32: return DType::kInt32;
    default: return std::nullopt;
  }
}

TensorView IntReprView(const TensorView& quantized) {
  const std::optional<DType> repr = IntReprDType(quantized.dtype);
  if (!repr) {
    Fail(ErrorCode::kUnsupported, std::string(Name(quantized.dtype)) +
                                      " packs several values a byte: trove does not decode its elements");
  }
  TensorView v = quantized;
  v.dtype = *repr;
  v.quantizer = nullptr;
  return v;
}

namespace {

// Whether `v` is a value of the integer type a quantized dtype stores (quint8: 0..255, qint8:
// -128..127, qint32: its 32 bits, ...).
bool FitsIntRepr(int64_t v, DType repr) {
  const unsigned bits = Info(repr).bits;
  if (bits >= 64) return true;
  return Info(repr).kind == DTypeKind::kUInt ? v >= 0 && v < (int64_t{1} << bits)
                                            : v >= -(int64_t{1} << (bits - 1)) && v < (int64_t{1} << (bits - 1));
}

}  // namespace

void ValidateQuantizer(const Quantizer& q, const TensorView& t) {
  const std::optional<DType> repr = IntReprDType(t.dtype);
  if (!repr && Info(t.dtype).kind != DTypeKind::kQuantized) Fail(ErrorCode::kCorrupt, "a quantizer on a tensor that is not quantized");
  if (!q.per_channel()) {
    if (!std::isfinite(q.scale)) Fail(ErrorCode::kCorrupt, "quantizer scale " + FloatText(q.scale) + " is not finite");
    // torch checks the zero point against the integer type's range when it quantizes.
    if (repr && !FitsIntRepr(q.zero_point, *repr)) {
      Fail(ErrorCode::kCorrupt, "quantizer zero point " + std::to_string(q.zero_point) + " is outside the range of " +
                                    std::string(Name(t.dtype)));
    }
    return;
  }
  const int64_t rank = static_cast<int64_t>(t.shape.size());
  if (q.axis < 0 || q.axis >= rank) {
    Fail(ErrorCode::kCorrupt, "quantizer axis " + std::to_string(q.axis) + " is outside the tensor's " +
                                  std::to_string(rank) + " dimensions");
  }
  const int64_t channels = t.shape[static_cast<size_t>(q.axis)];
  const bool float_qparams = q.scheme == QScheme::kPerChannelAffineFloatQParams;
  auto check = [&](const std::shared_ptr<const TensorView>& p, const char* what, bool want_float) {
    if (!p) Fail(ErrorCode::kCorrupt, std::string("quantizer has no ") + what);
    const DTypeKind kind = Info(p->dtype).kind;
    const bool ok = want_float ? kind == DTypeKind::kFloat && Info(p->dtype).element_size >= 2
                               : kind == DTypeKind::kInt || kind == DTypeKind::kUInt;
    if (!ok || !p->has_data) Fail(ErrorCode::kCorrupt, std::string("quantizer ") + what + " have dtype " + std::string(Name(p->dtype)));
    if (p->shape.size() != 1 || p->shape[0] != channels) {
      Fail(ErrorCode::kCorrupt, std::string("quantizer ") + what + " have shape " + ShapeString(p->shape) + ", not [" +
                                    std::to_string(channels) + "] (the size of axis " + std::to_string(q.axis) + ")");
    }
  };
  check(q.scales, "scales", true);
  check(q.zero_points, "zero points", float_qparams);
  // Integer zero points, as the per-tensor one, within the integer type (torch refuses both).
  // Each distinct stored one is read once: a stride-0 view of one over 2^27 channels is one.
  if (repr && !float_qparams) {
    const TensorView& z = *q.zero_points;
    const int64_t distinct = z.strides[0] == 0 ? std::min<int64_t>(channels, 1) : channels;
    for (int64_t c = 0; c < distinct; ++c) {
      const ElementValue e = z.Element(std::span<const int64_t>(&c, 1));
      const bool fits = e.kind == ElementValue::Kind::kInt ? FitsIntRepr(e.i, *repr)
                                                            : e.u <= static_cast<uint64_t>(INT64_MAX) &&
                                                                  FitsIntRepr(static_cast<int64_t>(e.u), *repr);
      if (!fits) {
        Fail(ErrorCode::kCorrupt, "quantizer zero point " + (e.kind == ElementValue::Kind::kInt ? std::to_string(e.i) : std::to_string(e.u)) +
                                      " (channel " + std::to_string(c) + ") is outside the range of " + std::string(Name(t.dtype)));
      }
    }
  }
}

std::string QuantizerText(const Quantizer& q) {
  if (!q.per_channel()) {
    return std::string(QSchemeName(q.scheme)) + ", scale " + FloatText(q.scale) + ", zero point " +
           std::to_string(q.zero_point);
  }
  const int64_t channels = q.scales && !q.scales->shape.empty() ? q.scales->shape[0] : 0;
  return std::string(QSchemeName(q.scheme)) + " along axis " + std::to_string(q.axis) + ", " +
         std::to_string(channels) + " channels";
}

}  // namespace trove
