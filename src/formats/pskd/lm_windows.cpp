// `lm-windows`: cutting a token stream into (input, target) language-modelling windows, streaming.
#include <algorithm>
#include <cstring>

#include "core/little_endian.h"
#include "formats/pskd/pskd_text.h"
#include "formats/pskd/text_input.h"

namespace trove::pskd {
namespace {

// A token longer than this many bytes is not an index (2^64 has 20 digits).
constexpr size_t kMaxTokenBytes = 20;

std::string Quoted(std::string_view token) {
  constexpr size_t kShownBytes = 40;  // a message names the token, not a whole runaway line
  return "'" + std::string(token.substr(0, kShownBytes)) + (token.size() > kShownBytes ? "...'" : "'");
}

}  // namespace

LmWindowsResult WriteLmWindows(const std::string& input, uint64_t vocab, uint64_t seq, uint64_t stride,
                               const std::string& output) {
  if (vocab == 0) FailPskd(PskdCode::kNotClosedType, "--vocab 0: idx[0] has no values");
  if (seq == 0) Fail(ErrorCode::kUsage, "--seq must be at least 1");
  if (stride == 0) Fail(ErrorCode::kUsage, "--stride must be at least 1");
  if (seq > kMaxWindowTokens) {
    Fail(ErrorCode::kLimit, "--seq " + std::to_string(seq) + " is above the cap of " + std::to_string(kMaxWindowTokens) +
                                " tokens a window (kMaxWindowTokens)");
  }
  LmWindowsResult result;
  const std::string leaf = "idx[" + std::to_string(vocab) + "][seq: " + std::to_string(seq) + "]";
  result.type = "(" + leaf + ", " + leaf + ")";
  SampleType type = ParseSampleType(result.type);
  const uint32_t width = type.leaves[0].element_bytes;
  const uint64_t span = seq + 1;  // tokens one window covers

  TextInput in(input, TextInput::Cut::kWhitespace);
  PskdWriter writer(output, std::move(type));
  std::vector<uint8_t> sample(writer.type().sample_bytes);
  std::vector<uint64_t> pending;  // tokens from the next window's first on
  pending.reserve(2 * span);
  size_t head = 0;                // pending[head] is the first token of the next window
  uint64_t skip = 0;              // tokens to drop before the next window starts (stride > span)
  uint64_t line = 1;

  auto emit = [&](const uint64_t* w) {
    uint8_t* input_leaf = sample.data();
    uint8_t* target_leaf = sample.data() + seq * width;
    if (width == 1) {
      for (uint64_t i = 0; i < seq; ++i) input_leaf[i] = static_cast<uint8_t>(w[i]);
      for (uint64_t i = 0; i < seq; ++i) target_leaf[i] = static_cast<uint8_t>(w[i + 1]);
    } else {
      for (uint64_t i = 0; i < seq; ++i) {
        StoreLe(input_leaf + i * width, w[i], width);
        StoreLe(target_leaf + i * width, w[i + 1], width);
      }
    }
    writer.Append(sample);
  };

  for (std::string_view chunk = in.Next(); !chunk.empty(); chunk = in.Next()) {
    const char* p = chunk.data();
    const char* end = p + chunk.size();
    while (p < end) {
      const char c = *p;
      if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
        ++p;
        continue;
      }
      if (c == '\n') {
        ++line;
        ++p;
        continue;
      }
      const char* start = p;
      uint64_t value = 0;
      bool digits_only = true;
      bool overflow = false;
      while (p < end && !(*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == '\v' || *p == '\f')) {
        const unsigned d = static_cast<unsigned char>(*p) - '0';
        if (d > 9) digits_only = false;
        if (value > (~uint64_t{0} - 9) / 10) overflow = true;
        value = value * 10 + d;
        ++p;
      }
      std::string_view token(start, static_cast<size_t>(p - start));
      if (!digits_only || token.size() > kMaxTokenBytes || overflow) {
        if (digits_only) {
          FailPskd(PskdCode::kBadValue, input + ": line " + std::to_string(line) + ": " + Quoted(token) +
                                            " is not below " + std::to_string(vocab));
        }
        FailPskd(PskdCode::kBadValue, input + ": line " + std::to_string(line) + ": " + Quoted(token) + " is not an index");
      }
      if (value >= vocab) {
        FailPskd(PskdCode::kBadValue, input + ": line " + std::to_string(line) + ": " + std::to_string(value) +
                                          " is not below " + std::to_string(vocab));
      }
      ++result.tokens;
      if (skip > 0) {
        --skip;
        continue;
      }
      pending.push_back(value);
      if (pending.size() - head == span) {
        emit(pending.data() + head);
        ++result.windows;
        if (stride <= span) {
          head += stride;
        } else {
          skip = stride - span;
          head = pending.size();
        }
        if (head >= span) {  // compact: keep memory at two windows
          pending.erase(pending.begin(), pending.begin() + static_cast<ptrdiff_t>(head));
          head = 0;
        }
      }
    }
  }
  writer.Commit();
  return result;
}

}  // namespace trove::pskd
