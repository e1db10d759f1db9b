// libFuzzer target: any bytes listed as a legacy torch.save tar checkpoint (the headers Python's
// tarfile accepts, pax and GNU long-name records, sizes against the end of the input).
// trove::Error is the only acceptable outcome besides a listing whose members lie inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "formats/pt/legacy_tar.h"
#include "trove/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)trove::LooksLikeTar(data, size);
  try {
    for (const trove::TarMember& m : trove::ListTarMembers(data, size)) {
      if (m.data_offset > size || m.size > size - m.data_offset) std::abort();  // a member outside the input
    }
  } catch (const trove::Error&) {
  }
  return 0;
}
