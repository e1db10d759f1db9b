// The torch formats as trove's format drivers (formats/format_registry.h): torch.save zips and
// legacy pickle streams, read; TorchScript/torch.package archives and tar checkpoints of torch
// < 0.4, recognised and refused with what they are.
#include <algorithm>
#include <functional>

#include "formats/format_registry.h"
#include "formats/pt/legacy_tar.h"
#include "formats/pt/pt_checks.h"
#include "formats/pt/pt_reader.h"
#include "trove/error.h"
#include "trove/pt_writer.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

const MappedFile* FileOf(const Detection& d) { return d.directory ? nullptr : d.file.get(); }

// A zip is torch's when it holds a data.pkl; a zip no reader accepts (its parse failed) is handed
// to the torch reader too, whose error says what is wrong with it.
DetectConfidence DetectPt(const Detection& d) {
  if (d.zip) return TorchZipFormat(*d.zip) == Format::kPt ? kCertain : kNotThisFormat;
  return d.zip_magic ? kFallback : kNotThisFormat;
}

Document ReadPtDetected(const Detection& d, const ReadOptions& options) {
  return d.zip ? ReadPt(*d.zip, options) : ReadPt(d.file, options);
}

void WritePtFromConvert(const Document& doc, const std::string& destination, const ConvertOptions& options) {
  auto pt = WriterPartOf<PtWriteOptions>(options);
  pt.keep_unknown = options.keep_unknown;
  WritePt(doc, destination, pt);
}

DetectConfidence DetectPtLegacy(const Detection& d) {
  const MappedFile* f = FileOf(d);
  return f != nullptr && !d.zip_magic && IsLegacyPtStart(f->data(), f->size()) ? kCertain : kNotThisFormat;
}

Document ReadPtLegacy(const Detection& d, const ReadOptions& options) { return ReadPt(d.file, options); }

// torch.load's legacy loader scans the pickle stream it reads; the container has no checksum.
void ScanPtLegacy(const Detection& d, CheckReport& report) { ScanLegacyPt(report, d.file); }

DetectConfidence DetectTorchScript(const Detection& d) {
  if (d.zip) return TorchZipFormat(*d.zip) == Format::kTorchScript ? kCertain : kNotThisFormat;
  if (FileOf(d) == nullptr || d.zip_magic) return kNotThisFormat;
  return TorchCodeFileKind(d.head()).empty() ? kNotThisFormat : kCertain;
}

[[noreturn]] void RefuseTorchScript(const Detection& d);

// torch.jit.save's archives (constants.pkl, code/) are read as data; the other code archives
// (mobile bytecode, torch 1.0-1.2's, torch.package, the non-zip forms) are refused by what they are.
Document ReadTorchScriptDetected(const Detection& d, const ReadOptions& options) {
  if (d.zip && TorchCodeArchiveKind(*d.zip) == kJitSaveArchiveKind) {
    return ReadTorchScriptData(*d.zip, options);
  }
  RefuseTorchScript(d);
}

[[noreturn]] void RefuseTorchScript(const Detection& d) {
  const std::string kind = d.zip ? TorchCodeArchiveKind(*d.zip) : TorchCodeFileKind(d.head());
  Fail(ErrorCode::kRefused, (kind.empty() ? std::string("a TorchScript/torch.package archive") : kind) +
                                ": refused (it holds code, not just data)");
}

// A tar archive Python's tarfile accepts (torch.load tries it on every file that is not a zip)
// whose members include torch's `pickle`: a checkpoint of torch < 0.4. A tar that cannot be
// listed to its end is taken as one too (torch would try it), so is a header that only says
// "ustar" (what tar checkpoints were known by).
DetectConfidence DetectPtTar(const Detection& d) {
  const MappedFile* f = FileOf(d);
  if (f == nullptr || d.zip_magic) return kNotThisFormat;
  const std::string_view head = d.head();
  if (!LooksLikeTar(f->data(), f->size())) {
    return head.size() >= 262 && head.substr(257, 5) == "ustar" ? kLikely : kNotThisFormat;
  }
  try {
    for (const TarMember& m : ListTarMembers(f->data(), f->size())) {
      if (m.name == "pickle") return kLikely;
    }
    return kNotThisFormat;
  } catch (const Error&) {
    return kLikely;
  }
}

void RefusePtTar(const Detection&) {
  Fail(ErrorCode::kUnsupported, "a checkpoint of torch < 0.4 (a tar archive of sys_info, pickle, storages and tensors): "
                                "not read (torch.load runs the pickles of its members; re-save it with torch >= 0.4)");
}

// What the tar members hold is scanned for every file (ops: torch.load tries tarfile first); a
// ustar header tarfile rejects makes torch.load go on to unpickle the file from its start.
void ScanPtTar(const Detection& d, CheckReport& report) {
  if (!LooksLikeTar(d.file->data(), d.file->size())) {
    try {
      RefusePtTar(d);
    } catch (const Error& e) {
      report.AddError(Severity::kMedium, "", e);
    }
    ScanPolyglot(report, d.file, /*scan_leading_pickle=*/true);
  }
  report.entries_checked++;
  report.bytes_checked += d.file->size();
}

bool IsScriptModule(const Value* v) {
  return v->kind == ValueKind::kObject && v->type_name.starts_with("__torch__.") &&
         v->state != nullptr && v->state->kind == ValueKind::kDict;
}

// A module of a TorchScript archive (an object of a __torch__.* class) becomes the dict of what it
// holds that is data to carry: its tensors, its submodules holding some and containers holding
// some (an LSTM's _flat_weights), under their attribute names. Its other attributes (training
// flags, hooks) and its class go with the code, which is not carried. Returns whether `v` holds a
// tensor.
bool CarryTensors(Value* v, size_t& modules) {
  if (v->kind == ValueKind::kTensor) return true;
  if (IsScriptModule(v)) {
    ++modules;
    std::vector<std::pair<Value*, Value*>> kept;
    for (auto& [key, value] : v->state->entries) {
      if (CarryTensors(value, modules)) kept.emplace_back(key, value);
    }
    Value plain;
    plain.kind = ValueKind::kDict;
    plain.type_name = "dict";
    plain.entries = std::move(kept);
    *v = std::move(plain);
    return !v->entries.empty();
  }
  bool holds = false;
  if (v->kind == ValueKind::kList || v->kind == ValueKind::kTuple) {
    for (Value* item : v->items) holds |= CarryTensors(item, modules);
  } else if (v->kind == ValueKind::kDict) {
    for (auto& [key, value] : v->entries) holds |= CarryTensors(value, modules);
  }
  return holds;
}

}  // namespace

void TorchScriptModulesAsDicts(Document& doc, const std::function<void(const std::string&)>& note) {
  if (doc.format != FormatName(Format::kTorchScript) || doc.root == nullptr) return;
  size_t modules = 0;
  CarryTensors(doc.root, modules);
  // The tensors are the same views; only the values around them changed.
  std::vector<NamedTensor> tensors;
  ForEachLeaf(doc.root, [&](const std::string& key, const Value& leaf) {
    if (leaf.kind == ValueKind::kTensor) tensors.push_back({key, leaf.tensor});
  });
  doc.tensors = std::move(tensors);
  if (note) {
    note("a TorchScript archive: its " + std::to_string(doc.tensors.size()) + " tensors are written under their module "
         "paths; its code and the " + std::to_string(modules) + " modules' classes and other attributes are not");
  }
}

const FormatDriver& PtFormat() {
  static const FormatDriver driver{
      .format = Format::kPt,
      .summary = "torch.save zip checkpoint (torch >= 1.6)",
      .extensions = {".pt", ".pth", ".bin", ".ckpt"},
      .detect = DetectPt,
      .read = ReadPtDetected,
      .write = WritePtFromConvert,
      .zip_container = true,
  };
  return driver;
}

const FormatDriver& PtLegacyFormat() {
  static const FormatDriver driver{
      .format = Format::kPtLegacy,
      .summary = "torch.save legacy pickle stream (torch < 1.6, or _use_new_zipfile_serialization=False)",
      .detect = DetectPtLegacy,
      .read = ReadPtLegacy,
      .scan = ScanPtLegacy,
  };
  return driver;
}

const FormatDriver& TorchScriptFormat() {
  static const FormatDriver driver{
      .format = Format::kTorchScript,
      .summary = "TorchScript or torch.package archive (code and data)",
      .detect = DetectTorchScript,
      .read = ReadTorchScriptDetected,
      .refuse = RefuseTorchScript,
      .zip_container = true,
  };
  return driver;
}

const FormatDriver& PtTarFormat() {
  static const FormatDriver driver{
      .format = Format::kPtTar,
      .summary = "tar checkpoint of torch < 0.4 (recognised, not read)",
      .detect = DetectPtTar,
      .refuse = RefusePtTar,
      .scan = ScanPtTar,
  };
  return driver;
}

}  // namespace trove
