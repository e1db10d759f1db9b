#include "trove/io_mode.h"

#include <atomic>

namespace trove {

namespace {

std::atomic<IoMode> g_io_mode{IoMode::kAuto};

}  // namespace

void SetIoMode(IoMode mode) { g_io_mode.store(mode); }
IoMode GetIoMode() { return g_io_mode.load(); }

std::string_view IoModeName(IoMode mode) {
  switch (mode) {
    case IoMode::kMmap: return "mmap";
    case IoMode::kPread: return "pread";
    case IoMode::kAuto: break;
  }
  return "auto";
}

std::optional<IoMode> ParseIoMode(std::string_view name) {
  for (IoMode m : {IoMode::kAuto, IoMode::kMmap, IoMode::kPread}) {
    if (IoModeName(m) == name) return m;
  }
  return std::nullopt;
}

}  // namespace trove
