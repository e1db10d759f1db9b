// `pack`: text samples, one a line, values in leaf order, into a .psk.d file.
#include <charconv>

#include "formats/pskd/pskd_text.h"
#include "formats/pskd/sharded_writer.h"
#include "formats/pskd/text_input.h"

namespace trove::pskd {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n'; }

std::string Quoted(std::string_view token) {
  constexpr size_t kShownBytes = 40;  // a message names the value, not a whole runaway line
  return "'" + std::string(token.substr(0, kShownBytes)) + (token.size() > kShownBytes ? "...'" : "'");
}

uint64_t CountValues(std::string_view line) {
  uint64_t n = 0;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && IsSpace(line[i])) ++i;
    if (i == line.size()) break;
    ++n;
    while (i < line.size() && !IsSpace(line[i])) ++i;
  }
  return n;
}

void PutValue(std::string_view token, SampleEncoder& encoder) {
  if (encoder.next_is_index()) {
    if (token == "true" || token == "false") {
      encoder.PutIndex(token == "true" ? 1 : 0);  // bounds-checked: only bool/idx[≥2] leaves take it
      return;
    }
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (ec == std::errc::result_out_of_range) {
      bool digits = true;
      for (char c : token) digits = digits && c >= '0' && c <= '9';
      if (digits) FailPskd(PskdCode::kBadValue, Quoted(token) + " is not below 2^64");
    }
    if (ec != std::errc() || end != token.data() + token.size()) {
      FailPskd(PskdCode::kBadValue, Quoted(token) + " is not an index");
    }
    encoder.PutIndex(value);
    return;
  }
  std::string_view number = token;
  if (!number.empty() && number[0] == '+') number.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec == std::errc::result_out_of_range) FailPskd(PskdCode::kBadValue, Quoted(token) + " is beyond the range of f64");
  if (ec != std::errc() || end != number.data() + number.size() || number.empty() ||
      (number[0] == '-' && number.size() > 1 && number[1] == '+')) {
    FailPskd(PskdCode::kBadValue, Quoted(token) + " is not a real");
  }
  encoder.PutReal(value);
}

}  // namespace

bool PackLine(std::string_view line, uint64_t line_number, SampleEncoder& encoder) {
  size_t i = 0;
  while (i < line.size() && IsSpace(line[i])) ++i;
  if (i == line.size() || line.substr(i, 2) == "--") return false;
  encoder.Reset();
  try {
    while (i < line.size()) {
      while (i < line.size() && IsSpace(line[i])) ++i;
      if (i == line.size()) break;
      size_t start = i;
      while (i < line.size() && !IsSpace(line[i])) ++i;
      if (encoder.complete()) {
        FailPskd(PskdCode::kBadValue, "too many values: " + std::to_string(CountValues(line)) + ", a sample holds " +
                                          std::to_string(encoder.values_per_sample()));
      }
      PutValue(line.substr(start, i - start), encoder);
    }
    if (!encoder.complete()) {
      FailPskd(PskdCode::kBadValue, "too few values: " + std::to_string(encoder.values_written()) + ", a sample holds " +
                                        std::to_string(encoder.values_per_sample()));
    }
  } catch (Error& e) {
    throw e.AddContext("line " + std::to_string(line_number));
  }
  return true;
}

uint64_t PackFile(const std::string& input, const SampleType& type, const std::string& output, uint64_t shard_bytes,
                  std::vector<std::string>* files) {
  TextInput in(input, TextInput::Cut::kLine);
  ShardedPskdWriter writer(output, type, shard_bytes);
  SampleEncoder encoder(writer.type());
  uint64_t line_number = 0;
  for (std::string_view chunk = in.Next(); !chunk.empty(); chunk = in.Next()) {
    size_t pos = 0;
    while (pos < chunk.size()) {
      size_t nl = chunk.find('\n', pos);
      size_t stop = nl == std::string_view::npos ? chunk.size() : nl;
      ++line_number;
      // An error of the text names its file (then the line), as encode's do.
      if (WithContext(input, [&] { return PackLine(chunk.substr(pos, stop - pos), line_number, encoder); })) {
        writer.Append(encoder.bytes());
      }
      pos = stop + 1;
    }
  }
  std::vector<std::string> written = writer.Commit();
  if (files != nullptr) *files = std::move(written);
  return writer.count();
}

}  // namespace trove::pskd
