// libFuzzer target: the index walker and the one rule for paths a file names
// (core/confined_directory.h), through what users run: trove::Open, Verify and Scan of a folder.
// The input is cut at each "\n--\n" into up to five parts: the first is the folder's
// model.safetensors.index.json, the next ones become the files a.safetensors, b.index.json,
// c.bin and sub/d.safetensors. Beside them the folder always holds what an index must never
// reach: links out of it (relative and absolute), a link inside it, a FIFO, and a file outside the
// folder whose bytes no error may ever quote. So every input is an index that may name itself,
// another index, a FIFO, a link out or in, a shard of any bytes, or names no file at all.
// Any trove::Error is an expected outcome; a crash, hang (a FIFO opened for reading blocks), a
// sanitizer report, or the outside file's marker in an error's text is a bug.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "trove/checks.h"
#include "trove/error.h"
#include "trove/open.h"
#include "scratch_path.h"

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSecret = "OUTSIDE-MARKER-7f3a";

void WriteFile(const fs::path& path, std::string_view data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
}

void MustNotQuote(const std::string& text) {
  if (text.find(kSecret) != std::string::npos) std::abort();  // a byte of the outside file shown
}

void CheckReportText(const trove::CheckReport& report) {
  for (const auto& f : report.findings) MustNotQuote(f.message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path root = [] {
    const fs::path r = trove_fuzz::ScratchPath("shard-index-fuzz");
    fs::create_directories(r / "m" / "sub");
    WriteFile(r / "outside.safetensors", kSecret);
    std::error_code ec;
    fs::create_symlink("../outside.safetensors", r / "m" / "out.safetensors", ec);
    fs::create_symlink(r / "outside.safetensors", r / "m" / "abs.safetensors", ec);
    fs::create_symlink("a.safetensors", r / "m" / "in.safetensors", ec);
    ::mkfifo((r / "m" / "fifo.safetensors").c_str(), 0600);
    return r;
  }();
  const fs::path dir = root / "m";
  static const char* const kNames[] = {"model.safetensors.index.json", "a.safetensors", "b.index.json", "c.bin",
                                       "sub/d.safetensors"};
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // An input spelling the marker itself would have its own words quoted back, which is allowed:
  // the check is about bytes of the outside file only.
  if (input.find(kSecret) != std::string_view::npos) return 0;
  size_t start = 0;
  for (size_t part = 0; part < 5; ++part) {
    std::string_view text;
    if (start <= input.size()) {
      const size_t cut = input.find("\n--\n", start);
      text = input.substr(start, cut == std::string_view::npos ? std::string_view::npos : cut - start);
      start = cut == std::string_view::npos ? input.size() + 1 : cut + 4;
    }
    std::error_code ec;
    if (text.empty() && part > 0) {
      fs::remove(dir / kNames[part], ec);
    } else {
      WriteFile(dir / kNames[part], text);
    }
  }
  try {
    trove::Document doc = trove::Open(dir.string());
    for (const auto& t : doc.tensors) {
      t.view->ForEachChunk([](const uint8_t*, size_t) {});
    }
  } catch (const trove::Error& e) {
    MustNotQuote(e.message());
  }
  using Check = trove::CheckReport (*)(const std::string&);
  for (Check check : {static_cast<Check>(&trove::Verify), static_cast<Check>(&trove::Scan)}) {
    try {
      CheckReportText(check(dir.string()));
    } catch (const trove::Error& e) {
      MustNotQuote(e.message());
    }
  }
  // The second index named directly, as a user may name one.
  try {
    (void)trove::Open((dir / "b.index.json").string());
  } catch (const trove::Error& e) {
    MustNotQuote(e.message());
  }
  return 0;
}
