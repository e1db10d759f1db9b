// libFuzzer target: a tensordict memmap *directory* whose root meta.json is the input. The tree
// around it is fixed and small: leaf files `a.memmap` (64 bytes) and `b.memmap` (8 bytes), a
// sub-level `sub/` with its own meta.json and leaf, an `other.pickle` sidecar and a
// `pickle.pkl`, so that a mutated meta.json can point the directory reader at leaves of the wrong
// size, at sub-levels, at sidecars and at names that must not resolve ("..", "/etc", symlinks
// are not created: the directory walker's refusal of them is covered by tests). Open walks every
// tensor; Scan runs over the directory too. trove::Error is an expected outcome.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "trove/checks.h"
#include "trove/error.h"
#include "trove/open.h"
#include "scratch_path.h"

namespace {

void WriteFile(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
}

void WriteText(const std::string& path, const std::string& text) { WriteFile(path, text.data(), text.size()); }

// The fixed part of the tree, written once per process.
std::string MakeTree() {
  std::string root = trove_fuzz::ScratchPath("tddir-fuzz");
  ::mkdir(root.c_str(), 0700);
  ::mkdir((root + "/sub").c_str(), 0700);
  uint8_t bytes[64];
  for (int i = 0; i < 64; ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 1);
  WriteFile(root + "/a.memmap", bytes, 64);
  WriteFile(root + "/b.memmap", bytes, 8);
  WriteFile(root + "/sub/c.memmap", bytes, 16);
  WriteText(root + "/sub/meta.json",
            R"({"c":{"device":"cpu","shape":[4],"dtype":"torch.float32","is_nested":false},)"
            R"("shape":[],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
  // A protocol-2 pickle of {'x': 1}: a plain data sidecar.
  static const uint8_t kPickle[] = {0x80, 0x02, '}', 'q', 0x00, 'X', 0x01, 0, 0, 0, 'x', 'K', 0x01, 's', '.'};
  WriteFile(root + "/other.pickle", kPickle, sizeof kPickle);
  WriteFile(root + "/pickle.pkl", kPickle, sizeof kPickle);
  return root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = MakeTree();
  WriteFile(root + "/meta.json", data, size);
  for (bool allow_pickle : {false, true}) {
    try {
      trove::ReadOptions opts;
      opts.allow_pickle = allow_pickle;
      opts.pickle_policy = allow_pickle ? trove::PicklePolicy::kPermissive : trove::PicklePolicy::kStrict;
      trove::Document doc = trove::Open(root, opts);
      uint64_t sum = 0;
      for (const auto& t : doc.tensors) {
        if (!t.view->has_data || !trove::Info(t.view->dtype).readable) continue;
        t.view->ForEachChunk([&](const uint8_t* p, size_t n) {
          for (size_t i = 0; i < n; ++i) sum += p[i];
        });
      }
      if (sum == 0xdeadbeefcafe) std::abort();
    } catch (const trove::Error&) {
    }
  }
  try {
    (void)trove::Scan(root);
  } catch (const trove::Error&) {
  }
  return 0;
}
