#include "trove/element_codec.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "trove/error.h"

namespace trove {
namespace {

static_assert(std::endian::native == std::endian::little, "trove assumes a little-endian host");

template <class T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

enum class Special { kIeee, kFn, kFnuz, kFinite };
// kIeee: all-ones exponent is inf/NaN. kFn (e4m3fn): no infinities, all-ones exponent and
// mantissa is NaN. kFnuz: no infinities, no negative zero, sign-bit-only pattern is NaN.
// kFinite: no special values at all.
double SmallFloat(uint32_t bits, int exp_bits, int man_bits, int bias, Special special) {
  const uint32_t sign = (bits >> (exp_bits + man_bits)) & 1;
  const int exp = static_cast<int>((bits >> man_bits) & ((1u << exp_bits) - 1));
  const uint32_t man = bits & ((1u << man_bits) - 1);
  const int exp_max = (1 << exp_bits) - 1;
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  switch (special) {
    case Special::kIeee:
      if (exp == exp_max) return man ? kNaN : (sign ? -INFINITY : INFINITY);
      break;
    case Special::kFn:
      if (exp == exp_max && man == (1u << man_bits) - 1) return kNaN;
      break;
    case Special::kFnuz:
      if (sign && exp == 0 && man == 0) return kNaN;
      break;
    case Special::kFinite:  // float4_e2m1fn: every pattern is a number
      break;
  }
  double v = exp == 0 ? std::ldexp(static_cast<double>(man), 1 - bias - man_bits)
                      : std::ldexp(static_cast<double>((1u << man_bits) + man), exp - bias - man_bits);
  return sign ? -v : v;
}

double Float4(uint8_t nibble) { return SmallFloat(nibble & 0xF, 2, 1, 1, Special::kFinite); }

}  // namespace

double HalfToDouble(uint16_t bits) { return SmallFloat(bits, 5, 10, 15, Special::kIeee); }

double BFloat16ToDouble(uint16_t bits) {
  uint32_t f = uint32_t{bits} << 16;
  return static_cast<double>(std::bit_cast<float>(f));
}

uint16_t FloatToBFloat16(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((f >> 16) | 0x40);
  uint32_t rounding = 0x7FFF + ((f >> 16) & 1);
  return static_cast<uint16_t>((f + rounding) >> 16);
}

uint16_t FloatToHalf(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  uint32_t sign = (f >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((f >> 23) & 0xFF);
  uint32_t man = f & 0x7FFFFF;
  if (exp == 0xFF) return static_cast<uint16_t>(sign | 0x7C00 | (man ? 0x200 : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (man >> 13);
  uint32_t rem = man & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into the exponent: correct
  return static_cast<uint16_t>(half);
}

ElementValue DecodeElement(DType dtype, const uint8_t* p) {
  ElementValue v;
  using K = ElementValue::Kind;
  auto real = [&](double d) { v.kind = K::kFloat; v.re = d; return v; };
  auto sint = [&](int64_t i) { v.kind = K::kInt; v.i = i; return v; };
  auto uint = [&](uint64_t u) { v.kind = K::kUInt; v.u = u; return v; };
  switch (dtype) {
    case DType::kFloat32: return real(Load<float>(p));
    case DType::kFloat64: return real(Load<double>(p));
    case DType::kFloat16: return real(HalfToDouble(Load<uint16_t>(p)));
    case DType::kBFloat16: return real(BFloat16ToDouble(Load<uint16_t>(p)));
    case DType::kInt64: return sint(Load<int64_t>(p));
    case DType::kInt32: return sint(Load<int32_t>(p));
    case DType::kInt16: return sint(Load<int16_t>(p));
    case DType::kInt8: return sint(Load<int8_t>(p));
    case DType::kUInt8: return uint(p[0]);
    case DType::kUInt16: return uint(Load<uint16_t>(p));
    case DType::kUInt32: return uint(Load<uint32_t>(p));
    case DType::kUInt64: return uint(Load<uint64_t>(p));
    case DType::kBool: v.kind = K::kBool; v.b = p[0] != 0; return v;
    case DType::kComplex32:
      v.kind = K::kComplex; v.re = HalfToDouble(Load<uint16_t>(p)); v.im = HalfToDouble(Load<uint16_t>(p + 2)); return v;
    case DType::kComplex64:
      v.kind = K::kComplex; v.re = Load<float>(p); v.im = Load<float>(p + 4); return v;
    case DType::kComplex128:
      v.kind = K::kComplex; v.re = Load<double>(p); v.im = Load<double>(p + 8); return v;
    case DType::kFloat8E4M3FN: return real(SmallFloat(p[0], 4, 3, 7, Special::kFn));
    case DType::kFloat8E5M2: return real(SmallFloat(p[0], 5, 2, 15, Special::kIeee));
    case DType::kFloat8E4M3FNUZ: return real(SmallFloat(p[0], 4, 3, 8, Special::kFnuz));
    case DType::kFloat8E5M2FNUZ: return real(SmallFloat(p[0], 5, 2, 16, Special::kFnuz));
    case DType::kFloat8E8M0FNU:
      return real(p[0] == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, int{p[0]} - 127));
    case DType::kFloat4E2M1FNx2:
      v.kind = K::kFloatPair; v.re = Float4(p[0] & 0xF); v.im = Float4(p[0] >> 4); return v;
    case DType::kBits8: case DType::kBits1x8: case DType::kBits2x4: case DType::kBits4x2: return uint(p[0]);
    case DType::kBits16: return uint(Load<uint16_t>(p));
    case DType::kQInt8: case DType::kQUInt8: case DType::kQInt32: case DType::kQUInt4x2: case DType::kQUInt2x4:
      break;
    // ggml's block types: a byte of a block is no value (trove/dtype.h).
    case DType::kGgmlQ4_0: case DType::kGgmlQ4_1: case DType::kGgmlQ5_0: case DType::kGgmlQ5_1: case DType::kGgmlQ8_0:
    case DType::kGgmlQ8_1: case DType::kGgmlQ2_K: case DType::kGgmlQ3_K: case DType::kGgmlQ4_K: case DType::kGgmlQ5_K:
    case DType::kGgmlQ6_K: case DType::kGgmlQ8_K: case DType::kGgmlIQ2_XXS: case DType::kGgmlIQ2_XS: case DType::kGgmlIQ3_XXS:
    case DType::kGgmlIQ1_S: case DType::kGgmlIQ4_NL: case DType::kGgmlIQ3_S: case DType::kGgmlIQ2_S: case DType::kGgmlIQ4_XS:
    case DType::kGgmlIQ1_M: case DType::kGgmlTQ1_0: case DType::kGgmlTQ2_0: case DType::kGgmlMXFP4:
      break;
  }
  Fail(ErrorCode::kUnsupported, "quantized " + std::string(Name(dtype)) + " elements have no value without their quantizer");
}

}  // namespace trove
