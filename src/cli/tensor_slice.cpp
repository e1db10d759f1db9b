#include "cli/tensor_slice.h"

#include <charconv>
#include <vector>

#include "trove/error.h"

namespace trove::cli {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::optional<int64_t> Integer(std::string_view s, std::string_view item) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    Fail(ErrorCode::kUsage, "slice item '" + std::string(item) + "': '" + std::string(s) + "' is not an integer");
  }
  return v;
}

// Python's clamping of a slice bound to [0, n].
int64_t Bound(std::optional<int64_t> b, int64_t n, int64_t otherwise) {
  if (!b) return otherwise;
  int64_t v = *b < 0 ? *b + n : *b;
  return v < 0 ? 0 : (v > n ? n : v);
}

}  // namespace

std::optional<std::pair<std::string, std::string>> SplitSlice(std::string_view text) {
  if (text.empty() || text.back() != ']') return std::nullopt;
  const size_t open = text.rfind('[');
  if (open == std::string_view::npos || open == 0) return std::nullopt;
  return std::make_pair(std::string(text.substr(0, open)), std::string(text.substr(open + 1, text.size() - open - 2)));
}

TensorView SliceView(const TensorView& v, std::string_view items) {
  std::vector<std::string_view> parts;
  for (size_t at = 0;;) {
    const size_t comma = items.find(',', at);
    parts.push_back(items.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at));
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  if (parts.size() == 1 && Trim(parts[0]).empty()) parts.clear();  // KEY[]: the whole tensor
  if (parts.size() > v.shape.size()) {
    Fail(ErrorCode::kUsage, std::to_string(parts.size()) + " slice items for a tensor of " +
                                std::to_string(v.shape.size()) + " axes");
  }
  if (v.quantizer && v.quantizer->per_channel()) {
    // Its channels follow the unsliced axis: a slice would pair elements with the wrong scales.
    Fail(ErrorCode::kUnsupported, "a per-channel quantized tensor is printed whole, not sliced");
  }
  if (IsBlockDType(v.dtype) && parts.size() == v.shape.size() && Trim(parts.back()) != ":") {
    // Its last axis is bytes of blocks: a slice of it would cut blocks apart.
    Fail(ErrorCode::kUnsupported, "a block-quantized tensor (" + std::string(Name(v.dtype)) +
                                      ") is sliced along its rows only: its last axis is printed whole (--head N: its first values)");
  }
  TensorView out = v;
  out.shape.clear();
  out.strides.clear();
  for (size_t d = 0; d < v.shape.size(); ++d) {
    const int64_t n = v.shape[d], stride = v.strides[d];
    if (d >= parts.size()) {
      out.shape.push_back(n);
      out.strides.push_back(stride);
      continue;
    }
    const std::string_view item = Trim(parts[d]);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      std::optional<int64_t> i = Integer(item, item);
      if (!i) Fail(ErrorCode::kUsage, "slice item " + std::to_string(d) + " is empty (use ':' for the whole axis)");
      const int64_t at = *i < 0 ? *i + n : *i;
      if (at < 0 || at >= n) {
        Fail(ErrorCode::kUsage, "index " + std::to_string(*i) + " is out of range for axis " + std::to_string(d) +
                                    " of size " + std::to_string(n));
      }
      out.storage_offset += at * stride;
      continue;
    }
    const std::string_view rest = item.substr(colon + 1);
    const size_t colon2 = rest.find(':');
    const std::optional<int64_t> start = Integer(item.substr(0, colon), item);
    const std::optional<int64_t> stop = Integer(rest.substr(0, colon2), item);
    const std::optional<int64_t> step = colon2 == std::string_view::npos ? std::nullopt : Integer(rest.substr(colon2 + 1), item);
    if (step && *step <= 0) Fail(ErrorCode::kUsage, "slice item '" + std::string(item) + "': the step must be positive");
    const int64_t s = step.value_or(1);
    const int64_t b = Bound(start, n, 0), e = Bound(stop, n, n);
    // ceil((e - b) / s) without e - b + s - 1, which overflows for a step near INT64_MAX. With
    // len > 1 the step is below n, so stride * s is within the valid view's extent.
    const int64_t len = e > b ? 1 + (e - b - 1) / s : 0;
    if (len > 0) out.storage_offset += b * stride;
    out.shape.push_back(len);
    out.strides.push_back(len > 1 ? stride * s : stride);
  }
  out.Validate();
  // A view of bytes produced when read (a tensor assembled from chunks or rank files): the slice
  // keeps only the range its elements reach, so printing it reads only the chunks its rows lie in.
  return NarrowedToReach(out);
}

}  // namespace trove::cli
