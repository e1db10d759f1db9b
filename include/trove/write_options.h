// trove/write_options.h: what every writer of a document takes, whatever the format.
//
// Each format's writer takes its own options struct (PtWriteOptions, TensordictWriteOptions,
// SafetensorsWriteOptions, PskdWriteOptions) deriving from WriteOptions: how durable the result
// is (an existing destination is replaced only as trove/atomic_file.h's rule allows), and two callbacks for the caller (a CLI prints them;
// a binding forwards them). Plain values. `note` is called on the writing thread; `progress`
// there too, except that the tensordict directory writer may call it from one of its helper
// threads (never two calls at once: they are serialized). An exception a callback throws
// abandons the write (nothing appears at the destination) and propagates to the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "trove/atomic_file.h"

namespace trove {

struct WriteOptions {
  Durability durability = Durability::kReplaceSafe;  // see trove/atomic_file.h
  // A remark for the user (what was dropped, what was unshared); may be empty.
  std::function<void(const std::string&)> note;
  // (bytes written, bytes total) as tensors stream; may be empty. Every writer calls it: total is
  // the bytes of tensor payloads it writes (pack/unpack: of the files or entries copied), the
  // same in every call; bytes written never decreases. A call comes only once at least 4 MiB
  // more are written (a payload the kernel copies whole counts at once), and a last one,
  // (total, total), when the payloads are written, before the output is made durable and
  // renamed into place: at most total / 4 MiB + 1 calls.
  std::function<void(uint64_t, uint64_t)> progress;
  // Formats that hold only tensors (safetensors, GGUF, .npy/.npz, .psk.d) refuse a document's
  // other values, naming them, before writing anything; with this they leave them out and `note`
  // names them (`--drop-values`). Writers of formats that hold values ignore it.
  bool drop_values = false;
};

}  // namespace trove
