// fuzz/scratch_path.h: where a fuzz target writes its input for readers that take a path. The
// name is under /dev/shm (memory: no disk write per input), unique to the process, and removed
// with everything under it when the process exits normally, as libFuzzer's runs and
// test_hardening's replays of the corpora do, so that neither leaves files behind. Called from
// the targets' static initialisers, one thread.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace trove_fuzz {

inline std::vector<std::string>& ScratchPaths() {
  static auto* paths = new std::vector<std::string>();  // never destroyed: read at exit
  return *paths;
}

inline void RemoveScratchPaths() {
  for (const std::string& p : ScratchPaths()) {
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
  }
}

// "/dev/shm/trove-<name>-<pid><suffix>", removed at exit. Creates nothing.
inline std::string ScratchPath(const std::string& name, const std::string& suffix = "") {
  static const bool registered = std::atexit(RemoveScratchPaths) == 0;
  (void)registered;
  std::string path = "/dev/shm/trove-" + name + "-" + std::to_string(::getpid()) + suffix;
  ScratchPaths().push_back(path);
  return path;
}

}  // namespace trove_fuzz
