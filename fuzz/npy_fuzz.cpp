// libFuzzer target: the .npy reader, then the .npy writer on what it read, then the same bytes as
// an .npz archive (reader, scan, writer). The input is written to a file (the readers take a
// mapped file) and read as .npy whatever it looks like, so every input reaches the preamble and
// the header's literal parser. A file that reads is walked (a view past its storage is caught by
// ASan), written back and read again: the copy must hold the same values. Object arrays are read
// permissively (their pickle inert) and scanned. Any trove::Error is an expected outcome; a
// crash, sanitizer report, leak, hang or a copy that differs is a bug.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/npy/npy_format.h"
#include "trove/error.h"
#include "trove/zip_reader.h"
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

void ExpectSameTensors(const trove::Document& a, const trove::Document& b) {
  if (a.tensors.size() != b.tensors.size()) std::abort();
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const trove::NamedTensor* t = a.FindTensor(b.tensors[i].key);
    if (t == nullptr || t->view->dtype != b.tensors[i].view->dtype || t->view->shape != b.tensors[i].view->shape ||
        BytesOf(*t->view) != BytesOf(*b.tensors[i].view))
      std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string d = trove_fuzz::ScratchPath("npy-fuzz");
    ::mkdir(d.c_str(), 0700);
    return d;
  }();
  const std::string path = dir + "/input";
  WriteFile(path, data, size);
  trove::ReadOptions permissive;
  permissive.pickle_policy = trove::PicklePolicy::kPermissive;
  std::shared_ptr<trove::MappedFile> file;
  try {
    file = trove::MappedFile::Open(path);
  } catch (const trove::Error&) {
    return 0;
  }
  try {
    trove::CheckReport report;
    trove::ScanNpy(*file, report);
    const trove::Document doc = trove::ReadNpy(file, permissive);
    for (const auto& t : doc.tensors) (void)BytesOf(*t.view);
    if (doc.tensors.size() == 1) {
      trove::WriteNpy(doc, dir + "/copy.npy");
      ExpectSameTensors(doc, trove::ReadNpy(trove::MappedFile::Open(dir + "/copy.npy"), {}));
    }
  } catch (const trove::Error&) {
  }
  try {
    auto zip = std::make_shared<const trove::ZipReader>(file, trove::ZipDisagreement::kReport);
    trove::CheckReport report;
    trove::ScanNpz(*zip, report);
    (void)trove::IsNpzArchive(*zip);
    const trove::Document doc = trove::ReadNpz(zip, permissive);
    for (const auto& t : doc.tensors) (void)BytesOf(*t.view);
    trove::WriteNpz(doc, dir + "/copy.npz");
    ExpectSameTensors(doc, trove::ReadNpz(std::make_shared<const trove::ZipReader>(trove::MappedFile::Open(dir + "/copy.npz")), {}));
  } catch (const trove::Error&) {
  }
  return 0;
}
