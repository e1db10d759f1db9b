#include "trove/open.h"

#include <filesystem>
#include <optional>

#include "core/confined_directory.h"
#include "formats/pt/legacy_tar.h"
#include "ops/detect.h"
#include "pickle/pickle_scan.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace ops {
namespace {

bool StartsWith(std::string_view head, std::string_view magic) { return head.substr(0, magic.size()) == magic; }

// The most confident driver's format; kUnknown when none recognises the path.
Format MostConfident(const Detection& d) {
  Format best;
  int best_confidence = kNotThisFormat;
  for (const FormatDriver* driver : FormatDrivers()) {
    if (driver->detect == nullptr) continue;
    const int confidence = driver->detect(d);
    if (confidence > best_confidence) {
      best_confidence = confidence;
      best = driver->format;
    }
  }
  return best;
}

// Why a file is none of the formats trove reads, as specifically as its content allows.
[[noreturn]] void FailNotACheckpoint(const Detection& d) {
  if (d.directory) {
    Fail(ErrorCode::kUnsupported, NotADirectoryFormatText());
  }
  const MappedFile& f = *d.file;
  if (f.size() == 0) Fail(ErrorCode::kUnsupported, "an empty file, not a checkpoint");
  if (d.zip_magic) {
    Fail(ErrorCode::kUnsupported, "a zip archive, but not a checkpoint: no data.pkl (torch.save), meta.json (tensordict) "
                                  "or TorchScript/torch.package records");
  }
  if (LooksLikeTar(f.data(), f.size())) {
    Fail(ErrorCode::kUnsupported, "a tar archive, but not a torch checkpoint (no 'pickle' member)");
  }
  if (LooksLikeAnyPickle(f.data(), f.size())) {
    Fail(ErrorCode::kUnsupported, "a pickle, but not a torch checkpoint: torch.save writes a zip or, in its legacy "
                                  "format, a pickle of its magic number first (trove scan shows what this one holds)");
  }
  std::string known;
  for (const FormatDriver* driver : FormatDrivers()) known += (known.empty() ? "" : ", ") + std::string(driver->format.name());
  Fail(ErrorCode::kUnsupported, "not a checkpoint: none of the formats trove knows (" + known + ") recognises it");
}

}  // namespace

Detection Detect(const std::string& path) {
  namespace fs = std::filesystem;
  // The system would take the name up to the NUL: another file than the one named.
  if (path.find('\0') != std::string::npos) Fail(ErrorCode::kUsage, "the path holds a NUL character, which no file name can");
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    Detection d;
    d.path = path;
    d.directory = true;
    d.format = MostConfident(d);
    if (!d.format.known()) {
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
  const std::string_view head = d.head();
  d.zip_magic = StartsWith(head, std::string_view("PK\x03\x04", 4)) || StartsWith(head, std::string_view("PK\x05\x06", 4));
  if (d.zip_magic) {
    try {
      d.zip = std::make_shared<const ZipReader>(d.file, ZipDisagreement::kReport);
    } catch (const Error&) {
      // Left null: the format's reader parses again, for its own error.
    }
  }
  // By content first: a name decides only between formats the bytes leave open (kByName).
  d.format = MostConfident(d);
  return d;
}

Document ReadDetected(const Detection& d, const ReadOptions& options) {
  if (const FormatDriver* driver = FindFormatDriver(d.format)) {
    if (driver->read != nullptr) return driver->read(d, options);
    if (driver->refuse != nullptr) driver->refuse(d);
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
