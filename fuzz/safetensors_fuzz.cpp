// libFuzzer target: the .safetensors reader on arbitrary bytes, then the writer on what it read.
// The input is written to a file (the reader takes a mapped file) and read as safetensors
// whatever it looks like, so every input reaches the header parser and its validation. A file
// that reads is walked (a view past its storage is caught by ASan), written back with
// WriteSafetensors, and read again: the copy must hold the same tensors with the same bytes.
// The same bytes are also read as a shard index naming that file, through ReadShardedCheckpoint.
// Any trove::Error is an expected outcome; a crash, sanitizer report, leak, hang or a copy that
// differs is a bug.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/safetensors/sharded_reader.h"
#include "trove/error.h"
#include "trove/safetensors.h"
#include "scratch_path.h"

namespace {

std::vector<uint8_t> BytesOf(const trove::TensorView& v) {
  std::vector<uint8_t> out;
  v.ForEachChunk([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
  return out;
}

void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string d = trove_fuzz::ScratchPath("safetensors-fuzz");
    ::mkdir(d.c_str(), 0700);
    return d;
  }();
  const std::string path = dir + "/model.safetensors";
  const std::string copy = dir + "/copy.safetensors";
  WriteFile(path, data, size);
  try {
    trove::Document doc = trove::ReadSafetensors(trove::MappedFile::Open(path), {});
    std::vector<std::vector<uint8_t>> bytes;
    for (const auto& t : doc.tensors) bytes.push_back(BytesOf(*t.view));
    trove::WriteSafetensors(doc, copy);
    trove::Document again = trove::ReadSafetensors(trove::MappedFile::Open(copy), {});
    if (again.tensors.size() != doc.tensors.size()) std::abort();
    for (size_t i = 0; i < again.tensors.size(); ++i) {
      const trove::NamedTensor* t = doc.FindTensor(again.tensors[i].key);
      if (t == nullptr || t->view->dtype != again.tensors[i].view->dtype ||
          t->view->shape != again.tensors[i].view->shape || BytesOf(*t->view) != BytesOf(*again.tensors[i].view))
        std::abort();
    }
  } catch (const trove::Error&) {
  }
  // The input as an index JSON beside a shard: the index parser and its name checks.
  const std::string index = dir + "/model.safetensors.index.json";
  WriteFile(index, data, size);
  try {
    (void)trove::ReadShardedCheckpoint(index, {});
  } catch (const trove::Error&) {
  }
  return 0;
}
