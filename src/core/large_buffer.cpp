#include "core/large_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace trove {

namespace {
constexpr size_t kHugePageBytes = size_t{2} << 20;
}  // namespace

LargeBuffer AllocateLargeBuffer(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHugePageBytes, rounded));
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  ::madvise(p, rounded, MADV_HUGEPAGE);  // advice: without it, small pages as before
#endif
  return LargeBuffer(p);
}

}  // namespace trove
