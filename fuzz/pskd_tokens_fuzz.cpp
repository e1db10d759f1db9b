// libFuzzer target: the token-id inputs of `presk data lm-windows` and `tokens` (.npy headers and
// ids, raw .bin, text). The first byte picks the input's kind (.npy, .bin of uint16/uint32, text)
// and the shard size of the output; the rest is the file. The stream is written (sharded or not)
// and read back as windows: the tokens read back must be those written. Any trove::Error is a clean
// refusal; a crash, sanitizer report or a stream that differs is a finding.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/pskd/pskd_text.h"
#include "formats/pskd/token_files.h"
#include "trove/error.h"
#include "trove/pskd_dataset.h"
#include "scratch_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trove::pskd;
  if (size < 1) return 0;
  static const std::string dir = [] {
    std::string d = trove_fuzz::ScratchPath("tokens-fuzz");
    ::mkdir(d.c_str(), 0700);
    return d;
  }();
  const uint8_t selector = data[0];
  static const char* const kNames[] = {"input.npy", "input.bin", "input.bin", "input.txt"};
  const std::string path = dir + "/" + kNames[selector & 3];
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data + 1, 1, size - 1, f);
  std::fclose(f);
  TokenJob job;
  job.inputs = {path};
  job.bin_dtype = (selector & 3) == 2 ? trove::DType::kUInt32 : trove::DType::kUInt16;
  if (selector & 4) job.vocab = 1 + ((selector >> 3) & 7) * 9000;
  job.output = dir + "/out.psk.d";
  job.shard_bytes = (selector & 0x80) ? 64 : 0;
  try {
    std::vector<uint64_t> ids;
    TokenFiles(job.inputs, job.bin_dtype).ForEach(job.vocab, [&](const uint64_t* p, size_t n) {
      ids.insert(ids.end(), p, p + n);
    });
    if (!ids.empty() && ids.size() < (1u << 12)) {  // a few thousand ids: runs stay fast
      const LmWindowsResult r = WriteTokenStream(job);
      const Dataset stream = Dataset::Open(r.files.back());
      if (stream.count() != ids.size()) std::abort();
      for (uint64_t i = 0; i < ids.size(); ++i) {
        const auto bytes = stream.Sample(i);
        if (LoadIndex(bytes.data(), stream.type().leaves[0].element_bytes) != ids[i]) std::abort();
      }
    }
  } catch (const trove::Error&) {
  }
  return 0;
}
