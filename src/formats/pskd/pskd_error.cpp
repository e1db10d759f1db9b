// The spec's E9xxx codes, carried as trove::Error's spec_code field.

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

}  // namespace

void FailPskd(PskdCode code, std::string detail) {
  throw Error(TroveCodeFor(code), std::move(detail)).SetSpecCode(static_cast<int>(code));
}

void FailPskd(PskdCode code, std::string detail, std::string_view file) {
  throw Error(TroveCodeFor(code), std::move(detail)).SetSpecCode(static_cast<int>(code)).SetFile(file);
}

std::optional<PskdCode> PskdCodeOf(const Error& error) {
  std::optional<int> code = error.spec_code();
  if (!code || *code < 9001 || *code > 9005) return std::nullopt;
  return static_cast<PskdCode>(*code);
}

std::string PskdMessageWithoutCode(const Error& error) { return error.MessageWithoutSpecCode(); }

}  // namespace trove::pskd
