// trove/io_mode.h: how the bytes of input files are read when a command streams through them.
//
// Every input file is mapped (trove/shared_bytes.h): headers are parsed in place and a stored
// tensor is a zero-copy view of the mapping. A pass that reads bytes front to back (SharedBytes::
// Stream and SharedBytes::Reader: cat, convert, verify's checksums, diff, casts) can instead read
// them with large pread(2)s into a bounded buffer, with posix_fadvise read-ahead, so that a cold
// file comes in as a few large requests rather than a page fault every few pages: on a network
// file system (NFS, SMB, FUSE, Ceph, Lustre...) that is the difference between crawling and
// running at the link's rate. A hot file (in the page cache) is also faster copied with pread
// than mapped: on a virtual machine each mapped page costs microseconds more than its copy.
// The mode is a process-wide setting: by default (kAuto) streaming passes read every file with
// pread, which measured faster than the mapping on this project's benchmark machine hot and
// cold, on local disks too (docs/performance.md); kMmap keeps the mapping. Output never depends
// on the mode. Views a caller holds (TensorView, the Python module's tensors) are mappings in
// every mode.
// Safe to call from any thread; a change applies to passes started after it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace trove {

enum class IoMode {
  kAuto,   // the default: pread for streaming passes on every file system, network ones
           // included (today the same as kPread; the name leaves room to choose again)
  kMmap,   // always through the mapping (page faults, kernel read-ahead)
  kPread,  // always pread into a bounded buffer, with posix_fadvise read-ahead
};

void SetIoMode(IoMode mode);
IoMode GetIoMode();
// "auto", "mmap", "pread".
std::string_view IoModeName(IoMode mode);
// The mode a name gives, or nullopt for any other word.
std::optional<IoMode> ParseIoMode(std::string_view name);

}  // namespace trove
