// Starting writeback while a large file is still being written.
//
// A durable writer (Durability::kDurable, or one replacing an existing destination) makes its
// output durable (fsync or syncfs) before renaming it into place. Left to
// itself the kernel holds the written pages dirty until that call, so the copy and the disk
// write happen one after the other and the final fsync stalls for the whole file. WriteBehind
// asks for the writeback of each completed step as soon as it is written (sync_file_range with
// SYNC_FILE_RANGE_WRITE, which does not wait for the disk), so the disk works while the next step
// is copied and the final fsync waits only for the tail. Submitting writeback still costs CPU
// (allocating blocks, building requests), so the requests go to one helper thread, started on
// first use and shared by all writers: on a machine with a spare core the copy does not pay
// for it. The helper works on a duplicate of the descriptor, so the writer may close its own at
// any time. Safe to call from any thread.
#pragma once
#include <cstdint>
#include <string>

namespace trove {

// Large enough that each request is a big sequential write; small enough that the final fsync
// has little left to do.
constexpr uint64_t kWriteBehindStepBytes = uint64_t{16} << 20;

// The file `fd` now holds `end` bytes, written sequentially; `started` is where writeback was
// last requested up to (0 for a new file) and is advanced here. `complete`: the file is
// finished, so its tail is requested too (a directory of many files smaller than a step then
// streams to disk file by file instead of all at the final syncfs).
void WriteBehind(int fd, uint64_t end, uint64_t& started, bool complete = false);

// Every writer's way of appending bytes to a file: [data, +size) goes to fd's current position,
// which is `written` bytes into the file. Bytes of a MappedFile are copied by the kernel
// (CopyMappedBytes), others written with write(2). `written` advances. With `writeback_started`
// (a writer that will fsync), writeback is started as the steps fill and it advances; null: the
// pages are left to the kernel, as cp leaves them. Throws Error(kIo) naming `name`.
void WriteOut(int fd, const uint8_t* data, uint64_t size, const std::string& name, uint64_t& written,
              uint64_t* writeback_started);

}  // namespace trove
