// trove/checks.h: integrity (Verify) and security (Scan) reports over any file trove reads.
//
// Verify checks every structure and checksum it can: the container, every zip CRC-32, the
// pickle, and every tensor view against its storage. Scan interprets every pickle with the
// permissive data-only unpickler (nothing is executed either way) and reports each global
// outside the allowlist, code records, zip anomalies and unreadable parts. Both return findings
// (trove/findings.h) instead of stopping at the first; both throw Error only when the file cannot
// be read at all (missing, unknown format, container unreadable). Thread-safe: no shared state.
#pragma once

#include <string>

#include "trove/findings.h"

namespace trove {

CheckReport Verify(const std::string& path);
CheckReport Scan(const std::string& path);

}  // namespace trove
