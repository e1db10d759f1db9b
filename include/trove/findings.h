// trove/findings.h: what a check of a file found, as verify and scan report it.
//
// A CheckReport collects Findings instead of stopping at the first: the layer that checks a
// container (zip, pickle, a format's own checks) adds them, and trove/checks.h's Verify and Scan
// return them. Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trove/error.h"

namespace trove {

enum class Severity : uint8_t { kInfo, kMedium, kHigh, kCritical };
std::string_view SeverityName(Severity s);  // "info", "medium", "high", "critical"

struct Finding {
  Severity severity = Severity::kMedium;
  std::string entry;    // record / entry / file inside the container ("" for the whole file)
  uint64_t offset = 0;  // byte offset in the entry (pickle opcodes) or the file
  std::string message;
  std::string key_path;  // the tensor or value involved, where known ("" otherwise)
  // Scan: the call the pickle asks for, in Python-like text with its arguments
  // ("posix.system('echo hi')"), where a value of the tree records one ("" otherwise); its
  // names and strings are escaped as trove shows text to people (docs/security.md).
  std::string call;
};

struct CheckReport {
  std::string path;
  std::string format;
  uint64_t entries_checked = 0;
  uint64_t bytes_checked = 0;
  // Verify: bytes of the file no checksum covers (a format without checksums, a zip entry that
  // records none): read and bounds-checked, but a flipped bit there goes unnoticed.
  uint64_t bytes_without_checksum = 0;
  std::vector<Finding> findings;
  // Scan only: every global the pickles named, with the entry that named it.
  struct Global {
    std::string entry;
    std::string name;  // module.name
    uint64_t offset = 0;
    bool allowed = false;
    // How trove's default read policy takes it: "data", "dangerous" (refused), "unknown" (what the
    // pickle makes of it is an inert object) or "name" (only referred to: read as its name).
    std::string policy_class;
  };
  std::vector<Global> globals;

  void Add(Severity severity, std::string entry, uint64_t offset, std::string message, std::string key_path = {}) {
    findings.push_back({severity, std::move(entry), offset, std::move(message), std::move(key_path), {}});
  }
  // A finding for a caught error, placed by its fields: its entry when `entry` is "", its offset
  // (when it is in that entry), and a message of `prefix` + the error's text without what the
  // finding states apart (the file when it is `path`, the entry and offset it took).
  void AddError(Severity severity, std::string entry, const Error& error, std::string_view prefix = {},
                std::string key_path = {});
};

}  // namespace trove
