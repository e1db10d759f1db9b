#include "trove/open.h"

#include <filesystem>

#include "formats/pskd/pskd_reader.h"
#include "formats/safetensors/sharded_reader.h"
#include "formats/pt/pt_reader.h"
#include "formats/tensordict/tensordict_reader.h"
#include "trove/error.h"
#include "trove/safetensors.h"
#include "trove/shared_bytes.h"

namespace trove {

std::string_view FormatName(Format format) {
  switch (format) {
    case Format::kUnknown: return "unknown";
    case Format::kPt: return "pt";
    case Format::kPtLegacy: return "pt-legacy";
    case Format::kPtTar: return "pt-tar";
    case Format::kTorchScript: return "torchscript";
    case Format::kTensordictDir: return "tensordict";
    case Format::kTdz: return "tdz";
    case Format::kPskd: return "pskd";
    case Format::kSafetensors: return "safetensors";
    case Format::kShardedIndex: return "sharded";
  }
  return "unknown";
}

namespace {

Format DetectFileFormat(const std::shared_ptr<MappedFile>& file) {
  std::string_view head(reinterpret_cast<const char*>(file->data()), std::min<uint64_t>(file->size(), 512));
  if (head.substr(0, 4) == "PSKD") return Format::kPskd;
  if (head.substr(0, 4) == std::string_view("PK\x03\x04", 4) || head.substr(0, 4) == std::string_view("PK\x05\x06", 4)) {
    return DetectZipFormat(file);
  }
  if (IsLegacyPtMagic(head)) return Format::kPtLegacy;
  if (head.size() >= 262 && head.substr(257, 5) == "ustar") return Format::kPtTar;
  if (LooksLikeSafetensors(head, file->size())) return Format::kSafetensors;
  // By name: a damaged or hostile header then gets the safetensors reader's own error.
  const std::string& path = file->path();
  if (path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) return Format::kSafetensors;
  return Format::kUnknown;
}

}  // namespace

Format DetectFormat(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "meta.json", ec)) return Format::kTensordictDir;
    return FindShardIndex(path).empty() ? Format::kUnknown : Format::kShardedIndex;
  }
  if (IsShardIndexName(path)) return Format::kShardedIndex;
  return DetectFileFormat(MappedFile::Open(path));
}

namespace {

Document OpenByFormat(const std::string& path, const ReadOptions& options) {
  {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      if (std::string index = FindShardIndex(path); !index.empty()) {
        return WithContext(fs::path(index).filename().string(), [&] { return ReadShardedCheckpoint(index, options); });
      }
      if (!fs::exists(fs::path(path) / "meta.json", ec)) {
        Fail(ErrorCode::kUnsupported, "directory without meta.json or a shard index: not a tensordict or sharded checkpoint");
      }
      return ReadTensordictDir(path, options);
    }
    if (IsShardIndexName(path)) return ReadShardedCheckpoint(path, options);
    auto file = MappedFile::Open(path);
    switch (DetectFileFormat(file)) {
      case Format::kPt:
      case Format::kPtLegacy:
        return ReadPt(file, options);
      case Format::kTdz:
        return ReadTdz(file, options);
      case Format::kPskd:
        return ReadPskd(file, options);
      case Format::kSafetensors:
        return ReadSafetensors(file, options);
      case Format::kPtTar:
        Fail(ErrorCode::kUnsupported, "pre-0.4 tar checkpoint: unsupported (re-save it with a torch >= 0.4)");
      case Format::kTorchScript:
        Fail(ErrorCode::kRefused, "TorchScript/torch.package archive: refused (it holds code, not just data)");
      default:
        Fail(ErrorCode::kUnsupported, "not a format trove reads (no zip, pickle, tensordict, .psk.d or safetensors signature)");
    }
  }
}

}  // namespace

Document Open(const std::string& path, const ReadOptions& options) {
  try {
    return OpenByFormat(path, options);
  } catch (Error& e) {
    // Readers that name files inside a directory already start with the path.
    if (e.message().compare(0, path.size() + 1, path + ":") != 0 && e.message().compare(0, path.size() + 1, path + "/") != 0) {
      e.AddContext(path);
    }
    throw;
  }
}

}  // namespace trove
