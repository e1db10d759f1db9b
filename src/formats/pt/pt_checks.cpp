#include "formats/pt/pt_checks.h"

#include <algorithm>
#include <optional>

#include "core/little_endian.h"
#include "core/progress.h"
#include "formats/pt/legacy_tar.h"
#include "formats/pt/pt_reader.h"
#include "formats/pt/torch_resolver.h"
#include "pickle/pickle_scan.h"
#include "trove/error.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

// The legacy tar format's persistent ids are plain storage keys, looked up in what the
// `storages` member made: inert values to a scanner.
class LegacyTarResolver : public TorchResolver {
 public:
  LegacyTarResolver() : TorchResolver(PicklePolicy::kPermissive) {}
  Value* PersistentLoad(Value* pid, ValueArena& arena) override { return pid != nullptr ? pid : arena.None(); }
};

// The value a pickle makes, read with the scanning resolver (nothing is run); nullptr when it
// cannot be read. `consumed` gets the pickle's length.
Value* PickleValue(const uint8_t* data, uint64_t size, ValueArena& arena, uint64_t* consumed) {
  LegacyTarResolver resolver;
  Unpickler u(data, size, arena, resolver, 0);
  try {
    Value* v = u.Load();
    *consumed = u.consumed();
    return v;
  } catch (const Error&) {
    *consumed = 0;
    return nullptr;
  }
}

// Follows a legacy tar member that interleaves pickles and binary records (`storages`,
// `tensors`) the way torch.load reads it, scanning every pickle it would run. Where the next
// pickle cannot be located (an unreadable count or storage type), the rest is reported unscanned.
void ScanLegacyTarStream(CheckReport& report, const std::string& entry, const uint8_t* data, uint64_t size,
                         bool storages) {
  uint64_t at = 0;
  auto scan_next = [&](ValueArena& arena) -> Value* {
    uint64_t consumed = 0;
    LegacyTarResolver tar;
    consumed = ScanPickle(report, entry, data + at, size - at, tar, at).consumed;
    uint64_t again = 0;
    Value* v = PickleValue(data + at, size - at, arena, &again);
    if (consumed == 0 || again != consumed) return nullptr;
    at += consumed;
    return v;
  };
  auto stop = [&](const std::string& why) {
    report.Add(Severity::kHigh, entry, at, why + ": the rest of the member (" + std::to_string(size - at) +
                                                              " bytes) is not scanned; torch.load may run pickles in it");
  };
  auto skip = [&](uint64_t n) {
    if (n > size - at) return false;
    at += n;
    return true;
  };
  ValueArena arena;
  Value* count = scan_next(arena);
  if (count == nullptr || count->kind != ValueKind::kInt || count->is_big_int() || count->integer < 0) {
    if (at < size) stop("the record count is not a readable int");
    return;
  }
  // Each record takes at least one byte, so the member's size bounds the loop.
  for (int64_t i = 0; i < count->integer && at < size; ++i) {
    ValueArena record_arena;
    Value* args = scan_next(record_arena);
    if (args == nullptr || args->kind != ValueKind::kTuple || args->items.size() != 3) {
      stop("record #" + std::to_string(i) + " is not a readable (key, ..., type) tuple");
      return;
    }
    if (storages) {
      // The storage's bytes: an int64 element count, then count * element size bytes.
      const Value* type = args->items[2];
      std::optional<DType> dtype;
      if (type->kind == ValueKind::kGlobal) {
        std::string_view n = type->type_name;
        dtype = DTypeFromStorageClass(n.substr(n.rfind('.') + 1));
      }
      if (!dtype || size - at < 8) {
        stop("storage #" + std::to_string(i) + " has no known storage type");
        return;
      }
      const uint64_t numel = LoadLe64(data + at);
      at += 8;
      const uint64_t esize = ElementSize(*dtype);
      if (numel > (size - at) / std::max<uint64_t>(esize, 1) || !skip(numel * esize)) {
        stop("storage #" + std::to_string(i) + " runs past the end of the member");
        return;
      }
    } else {
      // A tensor's shape: int32 ndim, 4 bytes, ndim sizes and strides (int64), int64 offset.
      if (size - at < 8) {
        stop("tensor #" + std::to_string(i) + " is cut short");
        return;
      }
      const uint64_t ndim = LoadLe32(data + at);
      at += 8;
      if (ndim > (size - at) / 16 || !skip(ndim * 16 + 8)) {
        stop("tensor #" + std::to_string(i) + " runs past the end of the member");
        return;
      }
    }
  }
  // storages ends with the list of storage views, another pickle.
  if (storages && at < size) scan_next(arena);
  if (at < size) {
    report.Add(Severity::kMedium, entry, at, std::to_string(size - at) + " bytes after the last record torch.load reads");
  }
}

}  // namespace

// torch looks names up ignoring ASCII case, so the name is compared lowercased.
bool NamedLikePickle(std::string_view name) {
  std::string folded = TorchRecordName(name);
  return folded.ends_with("pkl") || folded.ends_with(".pickle");
}

bool IsStorageRecord(std::string_view name) {
  std::string folded = TorchRecordName(name);
  return folded.starts_with("data/") || folded.starts_with("constants/") ||
         (folded.starts_with(".data/") && folded.ends_with(".storage"));
}

PickleScan ScanTorchPickle(CheckReport& report, const std::string& entry, const uint8_t* data, uint64_t size,
                           uint64_t base, bool legacy_ids, const PtEnumMembers& enum_members,
                           const std::function<bool(const std::string&)>& data_classes) {
  TorchResolver torch(PicklePolicy::kPermissive);
  torch.legacy_persistent_ids = legacy_ids;
  torch.enum_members = enum_members;
  torch.data_classes = data_classes;
  return ScanPickle(report, entry, data, size, torch, base);
}

// The archive Python's zipfile reads when an end record puts the central directory `prefix` bytes
// further on than its offset says (it takes them for data glued before the archive and reads
// every entry that much further on): its pickles are scanned, labelled "zipfile view". Returns
// false when zipfile would not read an archive there either.
bool ScanZipfileView(CheckReport& report, const std::shared_ptr<MappedFile>& file, uint64_t prefix, uint64_t* entries,
                     uint64_t* first_local) {
  std::unique_ptr<ZipReader> zip;
  try {
    zip = std::make_unique<ZipReader>(file->bytes().Slice(prefix, file->size() - prefix), ZipDisagreement::kReport);
  } catch (const Error&) {
    return false;
  }
  *entries = zip->entries().size();
  *first_local = UINT64_MAX;
  for (const auto& e : zip->entries()) *first_local = std::min(*first_local, e.local_header_offset);
  for (const auto& e : zip->entries()) {
    if (!NamedLikePickle(e.name)) continue;
    const std::string label = prefix > 0 ? "zipfile view (+" + std::to_string(prefix) + "): " + e.name : e.name;
    try {
      SharedBytes bytes = zip->Read(e);
      ScanTorchPickle(report, label, bytes.data(), bytes.size());
    } catch (const Error& err) {
      report.Add(Severity::kMedium, label, e.data_offset, err.message());
    }
  }
  return true;
}

void ScanTorchArchivesIn(CheckReport& report, const ConfinedDirectory& root, const std::vector<std::string>& names,
                         const PtEnumMembers& enum_members,
                         const std::function<bool(const std::string&)>& data_classes) {
  for (const std::string& name : names) {
    try {
      ConfinedFile file = root.RequireFile(name);
      auto mapped = MappedFile::FromDescriptor(file.fd.release(), file.path, file.size, false);
      ZipReader zip(mapped, ZipDisagreement::kReport);
      for (const ZipEntry& e : zip.entries()) {
        if (!NamedLikePickle(e.name)) continue;
        const SharedBytes pickle = zip.Read(e);
        ScanTorchPickle(report, name + "/" + e.name, pickle.data(), pickle.size(), 0, false, enum_members,
                        data_classes);
        report.entries_checked++;
        report.bytes_checked += e.compressed_size;
      }
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kIo) throw;
      report.AddError(Severity::kMedium, name, e);
    }
  }
}

void CheckTorchArchiveCrcsIn(CheckReport& report, const ConfinedDirectory& root, const std::vector<std::string>& names,
                             const ProgressReporter::Callback& progress) {
  uint64_t total = 0;  // the files' sizes, for the progress line (each file is opened again below)
  if (progress) {
    for (const std::string& name : names) total += root.RequireFile(name).size;
  }
  ProgressReporter step(progress, total);
  step.Begin();
  std::function<void(uint64_t)> checked;
  if (step.active()) checked = [&](uint64_t bytes) { step.Add(bytes); };
  for (const std::string& name : names) {
    ConfinedFile file = root.RequireFile(name);
    auto mapped = MappedFile::FromDescriptor(file.fd.release(), file.path, file.size, false);
    ZipReader zip(mapped, ZipDisagreement::kReport);
    const std::vector<ZipReader::CrcCheck> crcs = zip.CheckCrcs(zip.entries(), checked);
    for (size_t i = 0; i < crcs.size(); ++i) {
      const ZipEntry& e = zip.entries()[i];
      report.entries_checked++;
      report.bytes_checked += e.compressed_size;
      if (crcs[i].error) std::rethrow_exception(crcs[i].error);
      if (!crcs[i].matches) report.Add(Severity::kMedium, name, e.data_offset, "'" + e.name + "': CRC-32 mismatch");
    }
  }
  step.Finish();
}

// Findings for a file whose first bytes are not a zip but whose end is one: zip readers (Python's
// zipfile, scanners) and start-of-file readers (torch's legacy loader, pickle.load) see two
// different files. Also scans a leading pickle, which torch.load would run before anything else.
void ScanPolyglot(CheckReport& report, const std::shared_ptr<MappedFile>& file, bool scan_leading_pickle) {
  if (scan_leading_pickle && LooksLikeAnyPickle(file->data(), file->size())) {
    report.Add(Severity::kHigh, "", 0,
                               "the file starts with a bare pickle: torch.load (weights_only=False) and pickle.load "
                               "run it before checking anything");
    ScanTorchPickle(report, "pickle 1", file->data(), file->size());
  }
  const uint64_t prefix = ZipfilePrefixBytes(file->data(), file->size());
  const size_t at = report.findings.size();
  uint64_t entries = 0, first = UINT64_MAX;
  // Not a zip at all (the usual case), or one no zip reader would accept either: nothing to say.
  if (!ScanZipfileView(report, file, prefix, &entries, &first)) return;
  report.findings.insert(report.findings.begin() + static_cast<std::ptrdiff_t>(at),
                         {Severity::kHigh, "", first == UINT64_MAX ? prefix : prefix + first,
                          "polyglot: the file is also a zip archive (" + std::to_string(entries) +
                              " entries) that zip readers see instead of what its first bytes say",
                          {}, {}});
}

// A pre-0.4 tar checkpoint. torch.load tries Python's tarfile on every file that is not a zip
// before anything else, extracts `storages` and `tensors` (pickles between binary records) and
// then unpickles `pickle`; old writers also stored `sys_info`. Every pickle in them is scanned.
void ScanLegacyTar(CheckReport& report, const std::shared_ptr<MappedFile>& file) {
  report.Add(Severity::kMedium, "", 0,
                             "pre-0.4 tar checkpoint: torch.load runs the pickles in its members; trove does not read it "
                             "(its pickles are scanned)");
  std::vector<TarMember> members;
  try {
    members = ListTarMembers(file->data(), file->size());
  } catch (const Error& e) {
    report.AddError(Severity::kHigh, "", e, "tar checkpoint not fully listed: ");
    return;
  }
  for (const char* name : {"sys_info", "storages", "tensors", "pickle"}) {
    std::vector<const TarMember*> found;
    for (const TarMember& m : members) {
      if (m.name == name) found.push_back(&m);
    }
    if (found.size() > 1) {
      report.Add(Severity::kCritical, name, found.back()->header_offset,
                                 "tar member appears " + std::to_string(found.size()) +
                                     " times: torch.load (Python's tarfile) uses the last, other tar readers the first; "
                                     "all are scanned");
    }
    for (const TarMember* m : found) {
      if (!m->regular()) {
        std::string message = "tar member is not a regular file (type '?'): torch.load extracts it and reads what "
                              "it points to";
        message[message.find('?')] = m->type;
        report.Add(Severity::kCritical, name, m->header_offset, std::move(message));
        continue;
      }
      const uint8_t* data = file->data() + m->data_offset;
      const std::string entry = std::string(name) + (found.size() > 1 ? " @ " + std::to_string(m->header_offset) : "");
      if (std::string_view(name) == "storages" || std::string_view(name) == "tensors") {
        ScanLegacyTarStream(report, entry, data, m->size, std::string_view(name) == "storages");
      } else {
        LegacyTarResolver tar;
        ScanPickle(report, entry, data, m->size, tar);
      }
    }
  }
}


void ScanLegacyPt(CheckReport& report, const std::shared_ptr<MappedFile>& file) {
  // The magic number, the protocol, sys_info, the object (whose persistent ids are storage keys)
  // and the storage key list; storage bytes follow. A sixth pickle would be data, not read.
  uint64_t offset = 0;
  for (int i = 0; i < 5 && offset < file->size(); ++i) {
    const PickleScan scan = ScanTorchPickle(report, "pickle " + std::to_string(i + 1), file->data() + offset,
                                            file->size() - offset, offset, /*legacy_ids=*/i == 3);
    if (scan.consumed == 0 || !scan.readable) break;
    offset += scan.consumed;
  }
  ScanPolyglot(report, file, /*scan_leading_pickle=*/false);
}

}  // namespace trove
