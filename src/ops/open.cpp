#include "trove/open.h"

#include <filesystem>
#include <optional>

#include "core/confined_directory.h"
#include "formats/pskd/pskd_reader.h"
#include "formats/pt/legacy_tar.h"
#include "formats/pt/pt_reader.h"
#include "formats/safetensors/sharded_reader.h"
#include "formats/tensordict/tensordict_reader.h"
#include "ops/detect.h"
#include "pickle/pickle_scan.h"
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

// A tar archive Python's tarfile accepts (torch.load tries it on every file that is not a zip)
// whose members include torch's `pickle`: a checkpoint of torch < 0.4. A tar that cannot be
// listed to its end is taken as one too (torch would try it), so is a header that only says
// "ustar" (what tar checkpoints were known by).
bool IsTorchTar(const MappedFile& file, std::string_view head) {
  if (!LooksLikeTar(file.data(), file.size())) return head.size() >= 262 && head.substr(257, 5) == "ustar";
  try {
    for (const TarMember& m : ListTarMembers(file.data(), file.size())) {
      if (m.name == "pickle") return true;
    }
    return false;
  } catch (const Error&) {
    return true;
  }
}

// Why a file is none of the formats trove reads, as specifically as its content allows.
[[noreturn]] void FailNotACheckpoint(const Detection& d) {
  if (d.directory) {
    Fail(ErrorCode::kUnsupported, "directory without meta.json, a shard index, model.safetensors or pytorch_model.bin: "
                                  "not a tensordict or a model folder");
  }
  const MappedFile& f = *d.file;
  if (f.size() == 0) Fail(ErrorCode::kUnsupported, "an empty file, not a checkpoint");
  if (d.zip) {
    Fail(ErrorCode::kUnsupported, "a zip archive, but not a checkpoint: no data.pkl (torch.save), meta.json (tensordict) "
                                  "or TorchScript/torch.package records");
  }
  if (LooksLikeTar(f.data(), f.size())) {
    Fail(ErrorCode::kUnsupported, "a tar archive, but not a torch checkpoint (no 'pickle' member)");
  }
  if (LooksLikePickle(f.data(), f.size())) {
    Fail(ErrorCode::kUnsupported, "a pickle, but not a torch checkpoint: torch.save writes a zip or, in its legacy "
                                  "format, a pickle of its magic number first (trove scan shows what this one holds)");
  }
  Fail(ErrorCode::kUnsupported, "not a checkpoint: no zip, legacy torch pickle, tar, tensordict, .psk.d or safetensors "
                                "structure");
}

}  // namespace

Detection Detect(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    Detection d;
    d.path = path;
    d.directory = true;
    if (fs::exists(fs::path(path) / "meta.json", ec)) {
      d.format = Format::kTensordictDir;
    } else if (d.shard_index = FindShardIndex(path); !d.shard_index.empty()) {
      d.format = Format::kShardedIndex;
    } else {
      // A model folder holding its weights in one file, as save_pretrained writes a model under its
      // shard size: that file, opened by the rule for files a folder holds.
      auto dir = ConfinedDirectory::Open(path);
      for (const char* name : {"model.safetensors", "pytorch_model.bin"}) {
        if (std::optional<ConfinedFile> file = WithFile(path, [&] { return dir->OpenFile(name); })) {
          return DetectFile(std::move(*file));
        }
      }
    }
    return d;
  }
  ConfinedFile file = OpenUserFile(path);
  return DetectFile(std::move(file));
}

Detection DetectFile(ConfinedFile opened) {
  Detection d;
  d.path = opened.path;
  const std::string& path = d.path;
  d.file = MappedFile::FromDescriptor(opened.fd.release(), path, opened.size);
  std::string_view head(reinterpret_cast<const char*>(d.file->data()), std::min<uint64_t>(d.file->size(), 512));
  // By content first: a name decides only between formats the bytes leave open.
  if (StartsWith(head, "PSKD")) {
    d.format = Format::kPskd;
  } else if (StartsWith(head, std::string_view("PK\x03\x04", 4)) || StartsWith(head, std::string_view("PK\x05\x06", 4))) {
    DetectZip(d);
  } else if (IsLegacyPtStart(d.file->data(), d.file->size())) {
    d.format = Format::kPtLegacy;
  } else if (!TorchCodeFileKind(head).empty()) {
    d.format = Format::kTorchScript;
  } else if (IsTorchTar(*d.file, head)) {
    d.format = Format::kPtTar;
  } else if (LooksLikeSafetensors(head, d.file->size())) {
    d.format = Format::kSafetensors;
  } else if (IsShardIndexName(path) && LooksLikeShardIndex(head)) {
    d.format = Format::kShardedIndex;
    d.shard_index = path;
  } else if (path.ends_with(".safetensors") && !LooksLikePickle(d.file->data(), d.file->size()) &&
             !LooksLikeShardIndex(head)) {
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
      return ReadShardedCheckpoint(d.shard_index, options, d.directory ? IndexNamedBy::kDirectory : IndexNamedBy::kUser);
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
      Fail(ErrorCode::kUnsupported, "a checkpoint of torch < 0.4 (a tar archive of sys_info, pickle, storages and tensors): "
                                    "not read (torch.load runs the pickles of its members; re-save it with torch >= 0.4)");
    case Format::kTorchScript: {
      std::string kind;
      if (d.zip) {
        kind = TorchCodeArchiveKind(*d.zip);
      } else {
        kind = TorchCodeFileKind(std::string_view(reinterpret_cast<const char*>(d.file->data()),
                                                  std::min<uint64_t>(d.file->size(), 16)));
      }
      Fail(ErrorCode::kRefused, (kind.empty() ? std::string("a TorchScript/torch.package archive") : kind) +
                                    ": refused (it holds code, not just data)");
    }
    case Format::kUnknown:
      break;
  }
  FailNotACheckpoint(d);
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
