#include "trove/format.h"

#include "trove/findings.h"

namespace trove {

void CheckReport::AddError(Severity severity, std::string entry, const Error& error, std::string_view prefix,
                           std::string key_path) {
  const bool take_entry = entry.empty() && !error.entry().empty();
  if (take_entry) entry = error.entry();
  // An offset is in the error's entry: the finding takes it when it names that entry.
  const bool take_offset = error.offset().has_value() && (take_entry || error.entry().empty());
  const bool drop_file = !error.file().empty() && error.file() == path;
  std::string message(prefix);
  message += error.MessageWithout(drop_file, take_entry, take_offset);
  Add(severity, std::move(entry), take_offset ? *error.offset() : 0, std::move(message), std::move(key_path));
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
