// Hugging Face's formats as trove's format drivers (formats/format_registry.h): .safetensors
// files and sharded checkpoints (an index naming .safetensors or torch .bin shards).
#include <algorithm>

#include "formats/format_registry.h"
#include "formats/safetensors/sharded_reader.h"
#include "pickle/pickle_scan.h"
#include "trove/safetensors.h"

namespace trove {
namespace {

// By content; by name too, so that a damaged or hostile header gets the safetensors reader's own
// error (unless the bytes say it is something else: a pickle, an index).
DetectConfidence DetectSafetensors(const Detection& d) {
  if (d.directory || !d.file || d.zip_magic) return kNotThisFormat;
  if (LooksLikeSafetensors(d.head(), d.file->size())) return kLikely;
  if (d.path.ends_with(".safetensors") && !LooksLikePickle(d.file->data(), d.file->size()) &&
      !LooksLikeShardIndex(d.head())) {
    return kByName;
  }
  return kNotThisFormat;
}

Document ReadSafetensorsDetected(const Detection& d, const ReadOptions& options) {
  return ReadSafetensors(d.file, options);
}

void WriteSafetensorsFromConvert(const Document& doc, const std::string& destination, const ConvertOptions& options) {
  WriteSafetensors(doc, destination, SafetensorsPartOf(doc, options));
}

// An index is told by its name and its first bytes (a JSON object); a directory by the index it
// holds.
DetectConfidence DetectSharded(const Detection& d) {
  if (d.directory) return FindShardIndex(d.path).empty() ? kNotThisFormat : kCertain;
  if (!d.file || d.zip_magic) return kNotThisFormat;
  return IsShardIndexName(d.path) && LooksLikeShardIndex(d.head()) ? kLikely : kNotThisFormat;
}

Document ReadShardedDetected(const Detection& d, const ReadOptions& options) {
  return ReadShardedCheckpoint(ShardIndexOf(d), options, d.directory ? IndexNamedBy::kDirectory : IndexNamedBy::kUser);
}

}  // namespace

SafetensorsWriteOptions SafetensorsPartOf(const Document& doc, const ConvertOptions& options) {
  auto o = WriterPartOf<SafetensorsWriteOptions>(options);
  // A .safetensors source's __metadata__ goes with its tensors (nothing lost: transformers checks
  // {"format": "pt"} when it loads), then --metadata: a key given again takes the new value.
  if (doc.format == FormatName(Format::kSafetensors)) {
    constexpr std::string_view kPrefix = "metadata.";
    for (const auto& [name, value] : doc.properties) {
      if (name.starts_with(kPrefix)) o.metadata.emplace_back(name.substr(kPrefix.size()), value.text);
    }
  }
  // convert --dedupe-tied's list of the tensors it dropped, for a loader to tie them again.
  for (const auto& [name, value] : doc.properties) {
    if (name == kDroppedTiedProperty) o.metadata.emplace_back(name, value.text);
  }
  for (const auto& given : options.metadata) {
    auto same = std::find_if(o.metadata.begin(), o.metadata.end(), [&](const auto& kv) { return kv.first == given.first; });
    if (same != o.metadata.end()) same->second = given.second;
    else o.metadata.push_back(given);
  }
  return o;
}

std::string ShardIndexOf(const Detection& d) { return d.directory ? FindShardIndex(d.path) : d.path; }

const FormatDriver& SafetensorsFormat() {
  static const FormatDriver driver{
      .format = Format::kSafetensors,
      .summary = "Hugging Face .safetensors",
      .extensions = {".safetensors"},
      .detect = DetectSafetensors,
      .read = ReadSafetensorsDetected,
      .write = WriteSafetensorsFromConvert,
  };
  return driver;
}

const FormatDriver& ShardedFormat() {
  static const FormatDriver driver{
      .format = Format::kShardedIndex,
      .summary = "sharded checkpoint: an .index.json and its .safetensors or .bin shards",
      .detect = DetectSharded,
      .read = ReadShardedDetected,
      .directory_sign = "model.safetensors.index.json, pytorch_model.bin.index.json, model.safetensors or "
                        "pytorch_model.bin (Hugging Face model folder)",
  };
  return driver;
}

}  // namespace trove
