// GGUF as trove's format driver (formats/format_registry.h): the only place outside this folder
// that names it is its line in format_registry.cpp.
#include <algorithm>
#include <filesystem>

#include "formats/format_registry.h"
#include "trove/convert_options.h"
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
// The parse is the whole check: ops shows it on the progress line as one step over the file.
void VerifyGgufDetected(const Detection& d, CheckReport& report, const ProgressReporter::Callback&) {
  VerifyGguf(*d.file, report);
}

// What a loader runs: the Jinja of chat templates.
void ScanGgufDetected(const Detection& d, CheckReport& report) { ScanGguf(*d.file, report); }

// A GGUF source's metadata is kept (every key and type as it is); --metadata adds string keys.
void WriteGgufFromConvert(const Document& doc, const std::string& destination, const ConvertOptions& options) {
  GgufWriteOptions o = WriterPartOf<GgufWriteOptions>(options);
  if (doc.format == kGguf.name()) {
    o.source_gguf = doc.path;
    o.source_size = doc.file_size;
  }
  o.metadata = options.metadata;
  // A safetensors or .pt model's config.json beside it: the llama family's metadata, unless
  // --metadata names the architecture itself (then config.json is not read). --metadata's keys
  // win over config.json's.
  const bool architecture_given = std::any_of(options.metadata.begin(), options.metadata.end(),
                                              [](const auto& kv) { return kv.first == "general.architecture"; });
  if (doc.format != kGguf.name() && !architecture_given && !doc.path.empty()) {
    std::error_code ec;
    const std::filesystem::path config = std::filesystem::path(doc.path).parent_path() / "config.json";
    if (std::filesystem::is_regular_file(config, ec)) {
      for (GgufMetadataEdit& e : GgufMetadataFromConfig(config.string())) {
        const bool overridden = std::any_of(options.metadata.begin(), options.metadata.end(),
                                            [&](const auto& kv) { return kv.first == e.key; });
        if (!overridden) o.config_metadata.push_back(std::move(e));
      }
    }
  }
  o.max_part_bytes = options.max_shard_bytes.value_or(0);
  WriteGguf(doc, destination, o);
}

}  // namespace

bool LooksLikeGguf(std::string_view head) { return gguf::LooksLikeGguf(head); }

const FormatDriver& GgufFormat() {
  static const FormatDriver driver{
      .format = kGguf,
      .summary = "GGUF model (llama.cpp, ggml, ollama)",
      .extensions = {".gguf"},
      .detect = DetectGguf,
      .read = ReadGgufDetected,
      .write = WriteGgufFromConvert,
      .keeps_ggml_blocks = true,
      .writes_own_parts = true,
      .verify = VerifyGgufDetected,
      .scan = ScanGgufDetected,
  };
  return driver;
}

}  // namespace trove
