// trove/checks.h: integrity (Verify) and security (Scan) reports over any file trove reads.
//
// Verify checks every structure and checksum it can: the container, every zip CRC-32, the
// pickle, and every tensor view against its storage. Scan interprets every pickle with the
// permissive data-only unpickler (nothing is executed either way) and reports each global
// outside the allowlist, code records, zip anomalies and unreadable parts. Both return findings
// (trove/findings.h) instead of stopping at the first; both throw Error only when the file cannot
// be read at all (missing, unknown format, container unreadable). Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "trove/findings.h"

namespace trove {

struct VerifyOptions {
  // Called with (bytes checked, bytes to check) as the CRC-32s of a zip container are computed,
  // as WriteOptions::progress is (at most once per 4 MiB and once at the end, never two calls at
  // once); a sharded checkpoint counts each shard's bytes from zero. Empty: never.
  std::function<void(uint64_t, uint64_t)> progress;
};

CheckReport Verify(const std::string& path);
CheckReport Verify(const std::string& path, const VerifyOptions& options);
CheckReport Scan(const std::string& path);

}  // namespace trove
