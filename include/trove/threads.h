// trove/threads.h: how many threads trove's parallel work may use.
//
// Casts, GGUF dequantization, verify's checksums and diff's comparisons split their work across
// one pool of worker threads shared by the whole process (started on first use, one fewer than the
// count: the calling thread works too). The count is a process-wide setting: by default the CPUs
// this process may run on (sched_getaffinity, so a container's or taskset's limit is respected),
// at most kMaxThreads. Output never depends on the count: work is split into pieces whose results
// are combined in a fixed order. Safe to call from any thread; a change applies to work started
// after it.
#pragma once

#include <cstdint>

namespace trove {

// Threads beyond this are not started: each reserves a stack (8 MiB of address space by default)
// and the memory-bound work trove splits stops scaling long before (see docs/performance.md).
inline constexpr uint32_t kMaxThreads = 64;

// 0 restores the default (the CPUs this process may use). Larger counts are cut to kMaxThreads.
void SetThreadCount(uint32_t threads);
// The count parallel work uses now: at least 1.
uint32_t ThreadCount();
// The CPUs this process may run on (at least 1).
uint32_t UsableCpus();

}  // namespace trove
