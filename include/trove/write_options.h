// trove/write_options.h: what every writer of a document takes, whatever the format.
//
// Each format's writer takes its own options struct (PtWriteOptions, TensordictWriteOptions,
// SafetensorsWriteOptions, PskdWriteOptions) deriving from WriteOptions: how durable the result
// is, what an existing destination may be, and two callbacks for the caller (a CLI prints them;
// a binding forwards them). Plain values; the callbacks are called on the writing thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "trove/atomic_file.h"

namespace trove {

struct WriteOptions {
  Durability durability = Durability::kReplaceSafe;  // see trove/atomic_file.h
  Replace replace = Replace::kOwnKind;               // kAnything: --force (trove/atomic_file.h)
  // A remark for the user (what was dropped, what was unshared); may be empty.
  std::function<void(const std::string&)> note;
  // (bytes written, bytes total) as tensors stream; may be empty.
  std::function<void(uint64_t, uint64_t)> progress;
};

}  // namespace trove
