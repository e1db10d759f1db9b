// trove/quantizer.h: what the integers of a quantized tensor (torch.qint8, quint8, qint32) stand for.
//
// torch stores a quantized tensor as its integer representation plus a quantizer, the
// `quantizer_params` of `torch._utils._rebuild_qtensor`:
//   (torch.per_tensor_affine, scale: float, zero_point: int)
//   (torch.per_channel_affine, scales: float64[C], zero_points: int64[C], axis: int)
//   (torch.per_channel_affine_float_qparams, scales: float32[C], zero_points: float32[C], axis: int)
// with C = shape[axis]; the value of a stored q is (q - zero_point) * scale, per channel with the
// channel's pair. A reader puts the quantizer in the tensor's view (TensorView::quantizer); it is
// immutable and shared by every copy of the view. The scales and zero points are views of the
// same file, read only when values are asked for (CastView dequantizes; `trove cat --dequantize`).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "trove/dtype.h"

namespace trove {

struct TensorView;

enum class QScheme : uint8_t { kPerTensorAffine, kPerChannelAffine, kPerChannelAffineFloatQParams };

// torch's name ("per_tensor_affine"); the global torch pickles is `torch.<name>`.
std::string_view QSchemeName(QScheme scheme);
std::optional<QScheme> QSchemeOfName(std::string_view name);

struct Quantizer {
  QScheme scheme = QScheme::kPerTensorAffine;
  double scale = 1;        // per tensor
  int64_t zero_point = 0;  // per tensor
  // Per channel: one scale and zero point for each index along `axis`.
  std::shared_ptr<const TensorView> scales, zero_points;
  int64_t axis = 0;

  bool per_channel() const { return scheme != QScheme::kPerTensorAffine; }
};

// The integer dtype a quantized dtype stores (qint8 -> int8, quint8 -> uint8, qint32 -> int32);
// none for the packed sub-byte types (quint4x2, quint2x4), whose elements trove does not decode.
std::optional<DType> IntReprDType(DType quantized);

// The same view with the integer dtype: torch's `int_repr()`, zero-copy. Throws Error(kUnsupported)
// for the packed types.
TensorView IntReprView(const TensorView& quantized);

// Checks `q` against the tensor it quantizes (`quantized`, dtype and shape): a finite scale, a zero
// point its integers can hold for the per-tensor scheme; for the per-channel ones an axis inside
// the shape and 1-D scales and zero points of shape[axis] elements of the dtypes torch writes.
// Throws Error(kCorrupt) naming what is wrong.
void ValidateQuantizer(const Quantizer& q, const TensorView& quantized);

// "per_tensor_affine, scale 0.05, zero point 3" / "per_channel_affine along axis 0, 4 channels".
std::string QuantizerText(const Quantizer& q);

}  // namespace trove
