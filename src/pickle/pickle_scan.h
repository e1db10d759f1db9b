// pickle/pickle_scan.h: a security scan of one pickle, with the data-only unpickler.
//
// ScanPickle interprets a pickle with the resolver a reader of its format would use (under the
// permissive policy: nothing is refused, nothing is run) and adds to a CheckReport every global
// it names (allowed or not, graded by what the name resolves to: pickle/global_class.h, and with
// the class the default read policy puts it in: data, dangerous, unknown or name), what it
// asks that no data file needs (BUILD on a global, calls of a computed value), where reading
// stopped, and the pickles hidden in its bytes (scanned in turn, to kMaxNestedPickleDepth).
// Formats choose the resolver (formats/pt/pt_checks.h: torch's); ops/checks.cpp drives the scan
// of a whole file. Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <string>

#include "trove/findings.h"
#include "trove/unpickler.h"

namespace trove {

struct PickleScan {
  uint64_t consumed = 0;  // the pickle's length where it was read to its STOP
  bool readable = true;   // false when reading stopped on an error (a finding says where)
};

// `base` is the pickle's offset in `entry` (offsets in findings are relative to the entry).
PickleScan ScanPickle(CheckReport& report, const std::string& entry, const uint8_t* data, uint64_t size,
                      PickleResolver& resolver, uint64_t base = 0, int nesting = 0);

// True when the bytes start like a pickle a Python unpickler would run (PROTO 2..5).
bool LooksLikePickle(const uint8_t* data, uint64_t size);
// LooksLikePickle, or a pickle of protocol 0 or 1, which has no PROTO opcode: the bytes start with
// an opcode those protocols open with and trove's data-only unpickler (nothing run) reads them to
// their STOP or meets a global on the way. pickle.load runs either kind, and torch.load runs the
// first pickle of any file that is not a zip or tar; so scan looks at both.
bool LooksLikeAnyPickle(const uint8_t* data, uint64_t size);

}  // namespace trove
