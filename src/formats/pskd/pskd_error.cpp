// The spec's E9xxx codes carried inside trove::Error messages.
#include <cstring>

#include "trove/pskd.h"

namespace trove::pskd {
namespace {

ErrorCode TroveCodeFor(PskdCode code) {
  switch (code) {
    case PskdCode::kNotClosedType: return ErrorCode::kUnsupported;
    case PskdCode::kNotPskd: return ErrorCode::kCorrupt;
    case PskdCode::kTruncated: return ErrorCode::kCorrupt;
    case PskdCode::kBadValue: return ErrorCode::kCorrupt;
    case PskdCode::kLayout: return ErrorCode::kCorrupt;
  }
  return ErrorCode::kCorrupt;
}

// Position of "E900x: " in a message, or npos.
size_t MarkerPosition(const std::string& message) {
  for (size_t at = message.find("E900"); at != std::string::npos; at = message.find("E900", at + 1)) {
    if (at + 7 <= message.size() && message[at + 4] >= '1' && message[at + 4] <= '5' && message[at + 5] == ':' &&
        message[at + 6] == ' ' && (at == 0 || message[at - 1] == ' ')) {
      return at;
    }
  }
  return std::string::npos;
}

}  // namespace

void FailPskd(PskdCode code, std::string detail) {
  throw Error(TroveCodeFor(code), "E" + std::to_string(static_cast<int>(code)) + ": " + detail);
}

std::optional<PskdCode> PskdCodeOf(const Error& error) {
  size_t at = MarkerPosition(error.message());
  if (at == std::string::npos) return std::nullopt;
  return static_cast<PskdCode>(9000 + (error.message()[at + 4] - '0'));
}

std::string PskdMessageWithoutCode(const Error& error) {
  std::string message = error.message();
  size_t at = MarkerPosition(message);
  if (at != std::string::npos) message.erase(at, 7);
  return message;
}

}  // namespace trove::pskd
