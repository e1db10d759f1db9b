#include "trove/open.h"

#include <filesystem>

#include "formats/pskd/pskd_reader.h"
#include "formats/pt/pt_reader.h"
#include "formats/safetensors/sharded_reader.h"
#include "formats/tensordict/tensordict_reader.h"
#include "ops/detect.h"
#include "trove/error.h"
#include "trove/safetensors.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace ops {
namespace {

bool StartsWith(std::string_view head, std::string_view magic) { return head.substr(0, magic.size()) == magic; }

// A zip's format from its entries: a tensordict archive has a top-level meta.json, a torch zip a
// data.pkl (and TorchScript code records). A zip no reader accepts is handed to the torch reader,
// whose error says what is wrong with it.
void DetectZip(Detection& d) {
  try {
    d.zip = std::make_shared<const ZipReader>(d.file, ZipDisagreement::kReport);
  } catch (const Error&) {
    d.format = Format::kPt;
    return;
  }
  d.format = IsTdzArchive(*d.zip) ? Format::kTdz : TorchZipFormat(*d.zip);
}

}  // namespace

Detection Detect(const std::string& path) {
  namespace fs = std::filesystem;
  Detection d;
  d.path = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    d.directory = true;
    if (fs::exists(fs::path(path) / "meta.json", ec)) {
      d.format = Format::kTensordictDir;
    } else if (d.shard_index = FindShardIndex(path); !d.shard_index.empty()) {
      d.format = Format::kShardedIndex;
    }
    return d;
  }
  if (IsShardIndexName(path)) {
    d.format = Format::kShardedIndex;
    d.shard_index = path;
    return d;
  }
  d.file = MappedFile::Open(path);
  std::string_view head(reinterpret_cast<const char*>(d.file->data()), std::min<uint64_t>(d.file->size(), 512));
  if (StartsWith(head, "PSKD")) {
    d.format = Format::kPskd;
  } else if (StartsWith(head, std::string_view("PK\x03\x04", 4)) || StartsWith(head, std::string_view("PK\x05\x06", 4))) {
    DetectZip(d);
  } else if (IsLegacyPtMagic(head)) {
    d.format = Format::kPtLegacy;
  } else if (head.size() >= 262 && head.substr(257, 5) == "ustar") {
    d.format = Format::kPtTar;
  } else if (LooksLikeSafetensors(head, d.file->size()) || path.ends_with(".safetensors")) {
    // By name too: a damaged or hostile header then gets the safetensors reader's own error.
    d.format = Format::kSafetensors;
  }
  return d;
}

Document ReadDetected(const Detection& d, const ReadOptions& options) {
  switch (d.format) {
    case Format::kTensordictDir:
      return ReadTensordictDir(d.path, options);
    case Format::kShardedIndex:
      if (d.directory) {
        return WithContext(std::filesystem::path(d.shard_index).filename().string(),
                           [&] { return ReadShardedCheckpoint(d.shard_index, options); });
      }
      return ReadShardedCheckpoint(d.shard_index, options);
    case Format::kPt:
      return d.zip ? ReadPt(*d.zip, options) : ReadPt(d.file, options);
    case Format::kPtLegacy:
      return ReadPt(d.file, options);
    case Format::kTdz:
      return ReadTdz(d.zip, options);
    case Format::kPskd:
      return ReadPskd(d.file, options);
    case Format::kSafetensors:
      return ReadSafetensors(d.file, options);
    case Format::kPtTar:
      Fail(ErrorCode::kUnsupported, "pre-0.4 tar checkpoint: unsupported (re-save it with a torch >= 0.4)");
    case Format::kTorchScript:
      Fail(ErrorCode::kRefused, "TorchScript/torch.package archive: refused (it holds code, not just data)");
    case Format::kUnknown:
      break;
  }
  if (d.directory) {
    Fail(ErrorCode::kUnsupported, "directory without meta.json or a shard index: not a tensordict or sharded checkpoint");
  }
  Fail(ErrorCode::kUnsupported, "not a format trove reads (no zip, pickle, tensordict, .psk.d or safetensors signature)");
}

// Readers that name a file inside a directory have set the error's file already; WithFile keeps it.
Document OpenDetected(const Detection& d, const ReadOptions& options) {
  return WithFile(d.path, [&] { return ReadDetected(d, options); });
}

}  // namespace ops

Format DetectFormat(const std::string& path) { return ops::Detect(path).format; }

Document Open(const std::string& path, const ReadOptions& options) {
  return WithFile(path, [&] { return ops::ReadDetected(ops::Detect(path), options); });
}

}  // namespace trove
