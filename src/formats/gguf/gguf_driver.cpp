// GGUF as trove's format driver (formats/format_registry.h): the only place outside this folder
// that names it is its line in format_registry.cpp. trove reads GGUF; it does not write it yet.
#include "formats/format_registry.h"
#include "formats/gguf/gguf_format.h"
#include "formats/gguf/gguf_layout.h"

namespace trove {
namespace {

constexpr Format kGguf{"gguf"};

// By the magic; by the name too, so that a damaged header (or a Git LFS pointer saved as the
// model, ollama#5245) gets the GGUF reader's own error.
DetectConfidence DetectGguf(const Detection& d) {
  if (d.directory || !d.file || d.zip_magic) return kNotThisFormat;
  if (gguf::LooksLikeGguf(d.head())) return kCertain;
  return d.path.ends_with(".gguf") ? kByName : kNotThisFormat;
}

Document ReadGgufDetected(const Detection& d, const ReadOptions& options) { return ReadGguf(d.file, options); }

// Reading (ops) checks the header, metadata and tensor infos; this adds what reading accepts.
void VerifyGgufDetected(const Detection& d, CheckReport& report) { VerifyGguf(*d.file, report); }

// What a loader runs: the Jinja of chat templates.
void ScanGgufDetected(const Detection& d, CheckReport& report) { ScanGguf(*d.file, report); }

}  // namespace

bool LooksLikeGguf(std::string_view head) { return gguf::LooksLikeGguf(head); }

const FormatDriver& GgufFormat() {
  static const FormatDriver driver{
      .format = kGguf,
      .summary = "GGUF model (llama.cpp, ggml, ollama)",
      .extensions = {},
      .detect = DetectGguf,
      .read = ReadGgufDetected,
      .verify = VerifyGgufDetected,
      .scan = ScanGgufDetected,
  };
  return driver;
}

}  // namespace trove
