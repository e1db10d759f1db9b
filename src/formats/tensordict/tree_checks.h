// formats/tensordict/tree_checks.h: what a security scan knows about tensordict's own files.
//
// tensordict's loaders run pickle.load on the pickled sidecars a tree may hold (NonTensorData,
// NonTensorStack) and follow symlinks; a scan lists both, in a directory or a .tdz, and scans
// each sidecar's pickle as data (pickle/pickle_scan.h). Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "trove/findings.h"
#include "trove/shared_bytes.h"

namespace trove {

// A name tensordict unpickles when it loads a tree (NonTensorData fields, NonTensorStack data);
// any other *.pkl / *.pickle in a tree is unpickled by whoever reads it, so it counts too.
bool IsPickledSidecar(std::string_view name);
// A pickled sidecar's finding and the scan of its pickle.
void ScanSidecar(CheckReport& report, const std::string& entry, const SharedBytes& bytes);
// A tensordict directory: every file and directory under it, without following symlinks
// (symlinks, special files and sidecars reported). Error(kIo) when the root cannot be listed.
void ScanTensordictDir(CheckReport& report, const std::string& root);

}  // namespace trove
