#include "core/float_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace trove {
namespace {

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
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  const std::string_view text(buf, static_cast<size_t>(r.ptr - buf));
  out += text;
  // A float reads as a float: "1.0", not "1" (an integer to Python, JSON and presk's pack).
  if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
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

std::string RoundedFloatText(double value, int significant) {
  if (!std::isfinite(value)) return FloatText(value);
  significant = significant < 1 ? 1 : significant > 17 ? 17 : significant;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", significant, value);
  return buf;
}

}  // namespace trove
