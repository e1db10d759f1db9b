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
  // Called with (bytes checked, bytes to check) as the checks run, as WriteOptions::progress is
  // (at most once per 4 MiB and once at the end of each step, never two calls at once). Each step
  // counts from zero with a total of its own and is announced by a call (0, total) when it
  // starts: a zip container's CRC-32s (the entries' bytes); reading the structure (a file's
  // bytes, a zip's pickles, a directory's files), which says (0, total) when it starts and
  // (total, total) when it ends; a checkpoint directory's archives and assembled tensors; each
  // shard of a sharded checkpoint. Empty: never.
  std::function<void(uint64_t, uint64_t)> progress;
};

CheckReport Verify(const std::string& path);
CheckReport Verify(const std::string& path, const VerifyOptions& options);
CheckReport Scan(const std::string& path);

}  // namespace trove
