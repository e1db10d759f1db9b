// formats/pskd/text_output.h: where a text command of presk data writes: a file, or stdout.
//
// A path is written atomically (AtomicFile: nothing appears unless the command succeeds); "-"
// streams to stdout, for the commands whose output is text (chars, encode, export), so that
// `presk data export f.psk.d -o - | jq` needs no file. A failure then leaves what was already
// written on the pipe, as any filter does. One object per output; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trove/atomic_file.h"

namespace trove::pskd {

inline constexpr const char* kStdoutPath = "-";

class TextOutput {
 public:
  explicit TextOutput(const std::string& path);
  void Write(const void* data, uint64_t size);  // throws Error(kIo) naming the destination
  void Commit();

 private:
  std::optional<AtomicFile> file_;  // empty for stdout
};

}  // namespace trove::pskd
