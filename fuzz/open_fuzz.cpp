// libFuzzer target: the whole-file entry points a user reaches first. The input is written to a
// file (readers take mapped files), then DetectFormat routes it like `trove info` would: .pt zip
// and legacy, .tdz, .psk.d, TorchScript and tar refusals. After Open, every tensor's bytes are
// walked (a view past its storage is caught by ASan), and Scan and Verify run over the same
// file, since `trove scan` exists precisely to be pointed at hostile files.
// Any trove::Error is an expected outcome; a crash, sanitizer report, leak or hang is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "trove/checks.h"
#include "trove/error.h"
#include "trove/open.h"
#include "scratch_path.h"

namespace {

void WalkTensors(const trove::Document& doc) {
  uint64_t sum = 0;
  for (const auto& t : doc.tensors) {
    if (!t.view->has_data || !trove::Info(t.view->dtype).readable) continue;
    t.view->ForEachChunk([&](const uint8_t* p, size_t n) {
      for (size_t i = 0; i < n; i += 509) sum += p[i];
      if (n) sum += p[n - 1];
    });
  }
  if (sum == 0xdeadbeefcafe) std::abort();  // keeps the walk from being optimised out
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = trove_fuzz::ScratchPath("open-fuzz");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    (void)trove::FormatName(trove::DetectFormat(path));
  } catch (const trove::Error&) {
  }
  for (trove::PicklePolicy policy :
       {trove::PicklePolicy::kStrict, trove::PicklePolicy::kDefault, trove::PicklePolicy::kPermissive}) {
    try {
      trove::ReadOptions opts;
      opts.pickle_policy = policy;
      opts.allow_pickle = policy != trove::PicklePolicy::kStrict;
      WalkTensors(trove::Open(path, opts));
    } catch (const trove::Error&) {
    }
  }
  try {
    (void)trove::Scan(path);
  } catch (const trove::Error&) {
  }
  try {
    (void)trove::Verify(path);
  } catch (const trove::Error&) {
  }
  return 0;
}
