// libFuzzer target: the GGUF header, metadata and tensor infos (formats/gguf/gguf_layout.h), then
// the document, the whole metadata (ReadGgufMetadata), verify and scan on what they accept. The input is written to a file (the reader
// takes a mapped file). A file that reads has every tensor's bytes walked (a view past its
// storage is caught by ASan) and its records checked against the file's size. Any trove::Error
// is an expected outcome; a crash, sanitizer report, leak, hang or a tensor outside the file is a
// bug. Seeds (fuzz/corpus/gguf_fuzz) are written by tests/python/test_gguf.py's own writer.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "formats/gguf/gguf_format.h"
#include "trove/error.h"
#include "trove/tensor.h"
#include "scratch_path.h"

namespace {

void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string d = trove_fuzz::ScratchPath("gguf-fuzz");
    ::mkdir(d.c_str(), 0700);
    return d;
  }();
  const std::string path = dir + "/input";
  WriteFile(path, data, size);
  std::shared_ptr<trove::MappedFile> file;
  try {
    file = trove::MappedFile::Open(path);
  } catch (const trove::Error&) {
    return 0;
  }
  try {  // every array item kept (File.gguf_metadata): the same checks, more memory held
    (void)trove::ReadGgufMetadata(path);
  } catch (const trove::Error&) {
  }
  trove::CheckReport report;
  trove::ScanGguf(*file, report);
  trove::VerifyGguf(*file, report);
  try {
    const trove::Document doc = trove::ReadGguf(file, {});
    uint64_t sum = 0;
    for (const auto& t : doc.tensors) {
      t.view->ForEachChunk([&](const uint8_t* p, size_t n) {
        for (size_t i = 0; i < n; ++i) sum += p[i];
      });
    }
    for (const auto& r : doc.records) {
      if (r.offset > size || r.size > size - r.offset) std::abort();
    }
    if (sum == 0x5eed) std::fprintf(stderr, "%llu\n", static_cast<unsigned long long>(sum));  // keeps the walk
  } catch (const trove::Error&) {
  }
  return 0;
}
