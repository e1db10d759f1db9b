// trove/checks.h: integrity (Verify) and security (Scan) reports over any file trove reads.
//
// Verify checks every structure and checksum it can: the container, every zip CRC-32, the
// pickle, and every tensor view against its storage. Scan interprets every pickle with the
// permissive data-only unpickler (nothing is executed either way) and reports each global
// outside the allowlist, code records, zip anomalies and unreadable parts. Both return findings
// instead of stopping at the first; both throw Error only when the file cannot be read at all
// (missing, unknown format, container unreadable). Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trove/document.h"

namespace trove {

enum class Severity : uint8_t { kInfo, kMedium, kHigh, kCritical };
std::string_view SeverityName(Severity s);  // "info", "medium", "high", "critical"

struct Finding {
  Severity severity = Severity::kMedium;
  std::string entry;    // record / entry / file inside the container ("" for the whole file)
  uint64_t offset = 0;  // byte offset in the entry (pickle opcodes) or the file
  std::string message;
};

struct CheckReport {
  std::string path;
  std::string format;
  uint64_t entries_checked = 0;
  uint64_t bytes_checked = 0;
  std::vector<Finding> findings;
  // Scan only: every global the pickles named, with the entry that named it.
  struct Global {
    std::string entry;
    std::string name;  // module.name
    uint64_t offset = 0;
    bool allowed = false;
  };
  std::vector<Global> globals;
};

CheckReport Verify(const std::string& path);
CheckReport Scan(const std::string& path);

}  // namespace trove
