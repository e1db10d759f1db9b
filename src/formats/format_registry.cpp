#include "formats/format_registry.h"

namespace trove {

// Adding a format: its folder defines `const FormatDriver& <Name>Format()`, and one line below
// names it. Order matters only on a tie of confidences: the earlier driver wins.
#define TROVE_FORMAT_DRIVERS(X) \
  X(PskdFormat)                 \
  X(PtFormat)                   \
  X(PtLegacyFormat)             \
  X(TorchScriptFormat)          \
  X(PtTarFormat)                \
  X(TdzFormat)                  \
  X(TensordictFormat)           \
  X(SafetensorsFormat)          \
  X(ShardedFormat)              \
  X(NpyFormat)                  \
  X(NpzFormat)                  \
  X(GgufFormat)                 \
  X(DcpFormat)                  \
  X(DeepSpeedFormat)            \
  X(FsdpFormat)

#define TROVE_DECLARE_DRIVER(name) const FormatDriver& name();
TROVE_FORMAT_DRIVERS(TROVE_DECLARE_DRIVER)
#undef TROVE_DECLARE_DRIVER

const std::vector<const FormatDriver*>& FormatDrivers() {
#define TROVE_LIST_DRIVER(name) &name(),
  static const std::vector<const FormatDriver*> drivers{TROVE_FORMAT_DRIVERS(TROVE_LIST_DRIVER)};
#undef TROVE_LIST_DRIVER
  return drivers;
}

const FormatDriver* FindFormatDriver(std::string_view name) {
  for (const FormatDriver* driver : FormatDrivers()) {
    if (driver->format.name() == name) return driver;
  }
  return nullptr;
}

std::string NotADirectoryFormatText() {
  std::string signs;
  for (const FormatDriver* driver : FormatDrivers()) {
    if (driver->directory_sign.empty()) continue;
    signs += (signs.empty() ? "" : "; ") + std::string(driver->directory_sign);
  }
  return "a directory, but none that trove reads: it holds none of " + signs;
}

const FormatDriver* FindFormatDriver(Format format) {
  return format.known() ? FindFormatDriver(format.name()) : nullptr;
}

}  // namespace trove
