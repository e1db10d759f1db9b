#include "core/float_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace trove {
namespace {

// Python's repr of a float: the shortest digits that read back to the same value, in positional
// notation when the decimal exponent is in [-4, 16), else as d.ddde±XX; always with a '.' or an
// exponent ("1.0", not "1": an integer to Python, JSON and presk's pack).
template <class F>
void AppendShortest(F value, std::string& out) {
  if (std::isnan(value)) {
    out += "nan";
    return;
  }
  if (std::isinf(value)) {
    out += value > 0 ? "inf" : "-inf";
    return;
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));  // "-1.2345e-05"
  const size_t e = sci.find('e');
  std::string_view mantissa = sci.substr(0, e);
  int exponent = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+'), sci.data() + sci.size(), exponent);
  if (!mantissa.empty() && mantissa[0] == '-') {
    out += '-';
    mantissa.remove_prefix(1);
  }
  std::string digits;  // the significant digits, without the point
  for (char c : mantissa)
    if (c != '.') digits += c;
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += exponent < 0 ? "e-" : "e+";
    const int magnitude = exponent < 0 ? -exponent : exponent;
    if (magnitude < 10) out += '0';
    out += std::to_string(magnitude);
    return;
  }
  if (exponent < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
    return;
  }
  const size_t integer_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integer_digits) {
    out += digits;
    out.append(integer_digits - digits.size(), '0');
    out += ".0";
    return;
  }
  out.append(digits, 0, integer_digits);
  out += '.';
  out.append(digits, integer_digits);
}

}  // namespace

void AppendFloatText(double value, std::string& out) { AppendShortest(value, out); }
void AppendFloatText(float value, std::string& out) { AppendShortest(value, out); }

std::string FloatText(double value) {
  std::string out;
  AppendShortest(value, out);
  return out;
}

std::string FloatText(float value) {
  std::string out;
  AppendShortest(value, out);
  return out;
}

std::string ComplexText(double re, double im) {
  std::string out = "(";
  AppendShortest(re, out);
  if (!std::signbit(im) || std::isnan(im)) out += '+';  // a negative part brings its own '-'
  AppendShortest(im, out);
  return out + "j)";
}

std::string RoundedFloatText(double value, int significant) {
  if (!std::isfinite(value)) return FloatText(value);
  significant = significant < 1 ? 1 : significant > 17 ? 17 : significant;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", significant, value);
  return buf;
}

}  // namespace trove
