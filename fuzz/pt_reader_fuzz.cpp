// libFuzzer: the whole-file .pt reader (zip and legacy): container, pickle, views, then every
// tensor's bytes gathered. Inputs go through a file because readers take mapped files.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "formats/pt/pt_reader.h"
#include "trove/error.h"
#include "trove/open.h"
#include "scratch_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = trove_fuzz::ScratchPath("pt-fuzz", ".pt");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  for (trove::PicklePolicy policy :
       {trove::PicklePolicy::kStrict, trove::PicklePolicy::kDefault, trove::PicklePolicy::kPermissive}) {
    try {
      trove::ReadOptions opts;
      opts.pickle_policy = policy;
      trove::Document doc = trove::Open(path, opts);
      for (const auto& t : doc.tensors) {
        if (!t.view->has_data || !trove::Info(t.view->dtype).readable) continue;
        uint64_t sum = 0;
        t.view->ForEachChunk([&](const uint8_t* p, size_t n) {
          for (size_t i = 0; i < n; i += 4096) sum += p[i];
        });
        (void)sum;
      }
    } catch (const trove::Error&) {
    }
  }
  return 0;
}
