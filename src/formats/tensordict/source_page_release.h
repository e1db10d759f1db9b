// formats/tensordict/source_page_release.h: keeps a conversion's resident memory flat.
//
// Writing streams every leaf out of the source's mapping; the pages it touched stay in the
// process's resident set although they are never needed again, so a 1 GB checkpoint converted
// leaf by leaf would end with ~1 GB resident (page cache, but counted). SourcePageRelease drops
// those pages from this process's page tables after each leaf (madvise(MADV_DONTNEED)), which is
// non-destructive only for shared file mappings: it therefore acts only on ranges that
// /proc/self/maps shows as shared and file-backed (never on heap copies, where it would zero
// the data). The page cache keeps the pages; a later read simply faults them in again.
// Built once per write; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "trove/tensor.h"

namespace trove::tensordict {

class SourcePageRelease {
 public:
  SourcePageRelease();  // snapshots the shared file mappings (none when /proc is unavailable)
  // Releases the whole pages of the bytes `view` streams from, when they lie in such a mapping.
  void AfterStreaming(const TensorView& view) const;

 private:
  void Release(const uint8_t* begin, const uint8_t* end) const;
  std::vector<std::pair<uintptr_t, uintptr_t>> shared_file_ranges_;  // sorted [start, end)
};

}  // namespace trove::tensordict
