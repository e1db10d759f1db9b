#include "trove/error.h"

namespace trove {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUsage: return "usage";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kNotFound: return "not-found";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kRefused: return "refused";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kLimit: return "limit";
  }
  return "unknown";
}

Error& Error::AddContext(std::string_view context) {
  if (!context.empty()) {
    std::string m;
    m.reserve(context.size() + 2 + message_.size());
    // "entry" + "@ 57: reason" reads "entry @ 57: reason"; anything else joins with ": ".
    bool offset_follows = message_.size() > 2 && message_[0] == '@' && message_[1] == ' ';
    m.append(context).append(offset_follows ? " " : ": ").append(message_);
    message_ = std::move(m);
  }
  return *this;
}

void Fail(ErrorCode code, std::string message) { throw Error(code, std::move(message)); }

}  // namespace trove
