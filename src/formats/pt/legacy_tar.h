// formats/pt/legacy_tar.h: the members of a pre-0.4 torch.save tar checkpoint, listed the way
// Python's tarfile (which torch.load still tries first on every non-zip file) lists them.
//
// Such a file holds the members `sys_info`, `pickle`, `storages` and `tensors`; torch.load
// extracts `storages` and `tensors` and runs the pickles in them, then runs `pickle`. trove does
// not read these checkpoints; the scanner uses this listing to find every pickle torch would run.
// Pure functions over bytes in memory: nothing is kept, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trove {

// Caps (reasons): members listed from one tar (each takes at least one 512-byte header; real
// checkpoints have four): bounds the listing of a hostile stream of empty members.
inline constexpr uint64_t kMaxTarMembers = uint64_t{1} << 20;

struct TarMember {
  std::string name;        // after pax `path`, GNU long names and the ustar prefix
  char type = '0';         // the header's type flag ('\0' and '7' are regular files too)
  uint64_t header_offset = 0;
  uint64_t data_offset = 0;
  uint64_t size = 0;       // after pax `size`; data_offset + size is within the file
  bool regular() const { return type == '0' || type == '\0' || type == '7'; }
};

// True when the file starts with a header Python's tarfile accepts: its checksum matches,
// whatever magic it carries (v7 headers have none).
bool LooksLikeTar(const uint8_t* data, uint64_t size);

// Every member up to the end-of-archive block or the first header tarfile would not accept
// (where tarfile stops too). Throws Error(kCorrupt) naming the member and offset when a member
// or an extended header runs past the end of the file, or kLimit past kMaxTarMembers.
std::vector<TarMember> ListTarMembers(const uint8_t* data, uint64_t size);

}  // namespace trove
