#include "trove/format.h"

#include "trove/findings.h"

namespace trove {

std::string_view FormatName(Format format) {
  switch (format) {
    case Format::kUnknown: return "unknown";
    case Format::kPt: return "pt";
    case Format::kPtLegacy: return "pt-legacy";
    case Format::kPtTar: return "pt-tar";
    case Format::kTorchScript: return "torchscript";
    case Format::kTensordictDir: return "tensordict";
    case Format::kTdz: return "tdz";
    case Format::kPskd: return "pskd";
    case Format::kSafetensors: return "safetensors";
    case Format::kShardedIndex: return "sharded";
  }
  return "unknown";
}

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kInfo: return "info";
    case Severity::kMedium: return "medium";
    case Severity::kHigh: return "high";
    case Severity::kCritical: return "critical";
  }
  return "?";
}

}  // namespace trove
