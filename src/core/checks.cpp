#include "trove/checks.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "formats/pt/legacy_tar.h"
#include "formats/pt/pt_reader.h"
#include "formats/pt/torch_resolver.h"
#include "formats/safetensors/sharded_reader.h"
#include "formats/tensordict/level_reader.h"
#include "pickle/global_class.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/pskd.h"
#include "trove/unpickler.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

// Caps (reasons):
// Files and directories one scan walks in a tensordict tree: a tree holds one file per leaf and
// one meta.json per level (tensordict::kMaxLeaves + kMaxLevels, ~3M); past 2^22 the walk stops
// with a finding instead of letting a hostile tree make the scan run for hours.
constexpr uint64_t kMaxScanTreeEntries = uint64_t{1} << 22;
// Pickles nested as bytes inside pickles (pickle.loads(b"...")): each level is scanned by its own
// VM pass; real files have none, and three levels show the trick without letting a file
// multiply the scan's work.
constexpr int kMaxNestedPickleDepth = 3;
// A TorchScript/torch.package record not named like a pickle is checked for one (its first bytes)
// only up to this size when compressed: the check inflates it, and real pickled resources are
// small. Stored records of any size are checked (a view, nothing inflated).
constexpr uint64_t kMaxSniffedRecordBytes = uint64_t{64} << 20;

// A global's grade follows what its name resolves to (pickle/global_class.h): anything that runs
// code, reaches other names, loads another pickle, touches files or the network is critical,
// whatever attribute chain spells it; a name trove merely does not know is high.
Severity GlobalSeverity(const GlobalVerdict& v) {
  return v.klass == GlobalClass::kUnknown ? Severity::kHigh : Severity::kCritical;
}

// The finding for one global the unpickler listed that its resolver did not allow.
Finding GlobalFinding(const std::string& entry, const PickleGlobal& g, const std::string& dotted) {
  const std::string where = g.after_stop ? " (past where reading stopped; found by the lexical pass)" : "";
  if (g.via == PickleGlobalVia::kExtension) {
    return {Severity::kCritical, entry, g.offset,
            "copyreg extension code " + std::to_string(g.extension_code) +
                ": a global chosen at run time from the extension registry (can be any callable)" + where};
  }
  if (g.via == PickleGlobalVia::kComputed) {
    return {Severity::kHigh, entry, g.offset,
            "STACK_GLOBAL whose module and name are computed, not literal: the global it reaches is unknown" + where};
  }
  const GlobalVerdict v = ClassifyGlobal(dotted);
  std::string message = "global '" + dotted + "' is not in the allowlist";
  if (v.klass != GlobalClass::kUnknown) {
    message += "; it resolves to " + v.target + " (" + std::string(GlobalClassName(v.klass)) + ": " +
               std::string(GlobalClassEffect(v.klass)) + ")";
  }
  return {GlobalSeverity(v), entry, g.offset, message + where};
}

std::string GlobalText(const PickleGlobal& g) {
  if (g.via == PickleGlobalVia::kExtension) return "copyreg extension " + std::to_string(g.extension_code);
  if (g.via == PickleGlobalVia::kComputed) return "STACK_GLOBAL (computed name)";
  return g.module + "." + g.name;
}

bool IsZipFormat(Format f) { return f == Format::kPt || f == Format::kTdz || f == Format::kTorchScript; }

// A name tensordict unpickles when it loads a tree (NonTensorData fields, NonTensorStack data);
// any other *.pkl / *.pickle in a tree is unpickled by whoever reads it, so it counts too.
bool IsPickledSidecar(std::string_view name) {
  size_t slash = name.rfind('/');
  std::string_view base = slash == std::string_view::npos ? name : name.substr(slash + 1);
  return base == "other.pickle" || base == "pickle.pkl" || base.ends_with(".pkl") || base.ends_with(".pickle");
}

// True when the bytes start like a pickle a Python unpickler would run (PROTO 2..5).
bool LooksLikePickle(const uint8_t* data, uint64_t size) {
  return size >= 3 && data[0] == 0x80 && data[1] >= 2 && data[1] <= 5;
}

// Whether an entry's name says pickle to torch's loaders: torch.load opens <top>/data.pkl,
// torch.jit.load constants.pkl, bytecode.pkl and code/*.debug_pkl, torch.package its *.pkl
// resources, tensordict its *.pickle sidecars; torch looks names up ignoring ASCII case, so the
// name is compared lowercased.
bool NamedLikePickle(std::string_view name) {
  std::string folded = TorchRecordName(name);
  return folded.ends_with("pkl") || folded.ends_with(".pickle");
}

// Records of a TorchScript/torch.package archive that hold raw storage bytes, never a pickle.
bool IsStorageRecord(std::string_view name) {
  std::string folded = TorchRecordName(name);
  return folded.starts_with("data/") || folded.starts_with("constants/") ||
         (folded.starts_with(".data/") && folded.ends_with(".storage"));
}

// Passes every question to the resolver a reader would use, and notes what the unpickler asked
// that no data file needs: BUILD on a global itself (setattr on a class or function: the
// "BUILD on an allowed global" bypass rewires an allowed name before it is used) and calls of a
// value that is not a named global (gadget chains call what an earlier call returned).
class ScanResolver : public PickleResolver {
 public:
  explicit ScanResolver(PickleResolver& inner) : inner_(inner) {}
  Value* Global(const std::string& module, const std::string& name, bool& allowed, ValueArena& arena) override {
    return inner_.Global(module, name, allowed, arena);
  }
  Value* Call(Value* callable, Value* args, ValueArena& arena) override {
    if (callable != nullptr && callable->kind != ValueKind::kGlobal) {
      notes.push_back({Severity::kMedium, "REDUCE/NEWOBJ calls a " + std::string(KindName(callable->kind)) +
                                              " value, not a named global"});
    }
    return inner_.Call(callable, args, arena);
  }
  Value* Build(Value* object, Value* state, ValueArena& arena) override {
    if (object != nullptr && object->kind == ValueKind::kGlobal) {
      notes.push_back({Severity::kHigh, "BUILD on the global '" + object->type_name +
                                            "' itself: sets attributes of a class or function (rewires it in Python)"});
    }
    return inner_.Build(object, state, arena);
  }
  Value* PersistentLoad(Value* pid, ValueArena& arena) override { return inner_.PersistentLoad(pid, arena); }
  bool permissive() const override { return inner_.permissive(); }

  struct Note {
    Severity severity;
    std::string message;
  };
  std::vector<Note> notes;

 private:
  PickleResolver& inner_;
};

enum class PickleKind { kTorch, kData, kLegacyTar };

// The legacy tar format's persistent ids are plain storage keys, looked up in what the
// `storages` member made: inert values to a scanner.
class LegacyTarResolver : public TorchResolver {
 public:
  LegacyTarResolver() : TorchResolver(/*permissive=*/true) {}
  Value* PersistentLoad(Value* pid, ValueArena& arena) override { return pid != nullptr ? pid : arena.None(); }
};

void ScanPickle(CheckReport& report, const std::string& entry, const uint8_t* data, uint64_t size, uint64_t base,
                uint64_t* consumed = nullptr, bool legacy_ids = false, PickleKind kind = PickleKind::kTorch,
                int nesting = 0) {
  ValueArena arena;
  TorchResolver torch(/*permissive=*/true);
  torch.legacy_persistent_ids = legacy_ids;
  DataResolver plain(/*permissive=*/true);
  LegacyTarResolver tar;
  ScanResolver resolver(kind == PickleKind::kTorch     ? static_cast<PickleResolver&>(torch)
                        : kind == PickleKind::kLegacyTar ? static_cast<PickleResolver&>(tar)
                                                         : plain);
  Unpickler u(data, size, arena, resolver, base);
  Value* root = nullptr;
  try {
    root = u.Load();
  } catch (const Error& e) {
    report.findings.push_back({Severity::kMedium, entry, 0, "pickle not fully readable: " + e.message()});
  }
  if (consumed) *consumed = u.consumed();
  for (const auto& g : u.globals()) {
    std::string dotted = GlobalText(g);
    report.globals.push_back({entry, dotted, g.offset, g.allowed});
    if (!g.allowed) report.findings.push_back(GlobalFinding(entry, g, dotted));
  }
  if (!u.lexical_stop().empty()) {
    report.findings.push_back({Severity::kMedium, entry, 0,
                               "names past this point are not listed: the lexical pass over the rest of the pickle "
                               "stopped " + u.lexical_stop()});
  }
  for (const auto& n : resolver.notes) report.findings.push_back({n.severity, entry, 0, n.message});
  report.entries_checked++;
  report.bytes_checked += size;
  if (root == nullptr) return;
  // Bytes that are themselves a pickle: pickle.loads(b"...") in a __reduce__ runs them in Python.
  try {
    ForEachLeaf(root, [&](const std::string& key, const Value& leaf) {
      if (leaf.kind != ValueKind::kBytes) return;
      const auto* bytes = reinterpret_cast<const uint8_t*>(leaf.text.data());
      if (!LooksLikePickle(bytes, leaf.text.size())) return;
      const std::string inner = entry + " > nested pickle at '" + key + "'";
      if (nesting + 1 > kMaxNestedPickleDepth) {
        report.findings.push_back({Severity::kHigh, inner, 0, "pickles nested deeper than kMaxNestedPickleDepth (" +
                                                                  std::to_string(kMaxNestedPickleDepth) + "): not scanned"});
        return;
      }
      report.findings.push_back({Severity::kMedium, entry, 0, "bytes at '" + key + "' hold a nested pickle (protocol " +
                                                                 std::to_string(bytes[1]) + "); scanned as '" + inner + "'"});
      ScanPickle(report, inner, bytes, leaf.text.size(), 0, nullptr, false, PickleKind::kData, nesting + 1);
    });
  } catch (const Error& e) {
    report.findings.push_back({Severity::kMedium, entry, 0, "value tree not fully walked: " + e.message()});
  }
}

// A pickled sidecar of a tensordict: tensordict runs it through pickle.load when it loads the
// tree, so its presence alone is worth a finding; its globals are listed by the data-only VM.
void ScanSidecar(CheckReport& report, const std::string& entry, const SharedBytes& bytes) {
  report.findings.push_back({Severity::kMedium, entry, 0,
                             "pickled sidecar (" + std::to_string(bytes.size()) +
                                 " bytes): tensordict unpickles it on load; trove reads it only as data with allow_pickle"});
  ScanPickle(report, entry, bytes.data(), bytes.size(), 0, nullptr, false, PickleKind::kData);
}

// How many bytes precede a zip archive that ends the file: Python's zipfile (and so most
// scanners) finds the end record, sees where the central directory really is, and reads entry
// offsets relative to that, so a zip glued behind other bytes is still a zip to them. 0 when
// the end record says the archive starts at byte 0, or when there is no end record.
uint64_t ZipPrefixBytes(const uint8_t* data, uint64_t size) {
  constexpr uint64_t kEndRecordBytes = 22;
  constexpr uint64_t kMaxComment = 0xFFFF;
  if (size < kEndRecordBytes) return 0;
  const uint64_t lowest = size > kEndRecordBytes + kMaxComment ? size - kEndRecordBytes - kMaxComment : 0;
  for (uint64_t at = size - kEndRecordBytes + 1; at-- > lowest;) {
    if (std::memcmp(data + at, "PK\x05\x06", 4) != 0) continue;
    auto u32 = [&](uint64_t o) {
      return uint64_t{data[o]} | uint64_t{data[o + 1]} << 8 | uint64_t{data[o + 2]} << 16 | uint64_t{data[o + 3]} << 24;
    };
    const uint64_t cd_size = u32(at + 12), cd_offset = u32(at + 16);
    if (cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) return 0;  // zip64: offsets are taken as they are
    if (cd_size > at || cd_offset > at - cd_size) return 0;
    return at - cd_size - cd_offset;
  }
  return 0;
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
      ScanPickle(report, label, bytes.data(), bytes.size(), 0);
    } catch (const Error& err) {
      report.findings.push_back({Severity::kMedium, label, e.data_offset, err.message()});
    }
  }
  return true;
}

// Findings for a file whose first bytes are not a zip but whose end is one: zip readers (Python's
// zipfile, scanners) and start-of-file readers (torch's legacy loader, pickle.load) see two
// different files. Also scans a leading pickle, which torch.load would run before anything else.
void ScanPolyglot(CheckReport& report, const std::shared_ptr<MappedFile>& file, bool scan_leading_pickle) {
  if (scan_leading_pickle && LooksLikePickle(file->data(), file->size())) {
    report.findings.push_back({Severity::kHigh, "", 0,
                               "the file starts with a bare pickle: torch.load (weights_only=False) and pickle.load "
                               "run it before checking anything"});
    ScanPickle(report, "pickle 1", file->data(), file->size(), 0);
  }
  const uint64_t prefix = ZipPrefixBytes(file->data(), file->size());
  const size_t at = report.findings.size();
  uint64_t entries = 0, first = UINT64_MAX;
  // Not a zip at all (the usual case), or one no zip reader would accept either: nothing to say.
  if (!ScanZipfileView(report, file, prefix, &entries, &first)) return;
  report.findings.insert(report.findings.begin() + static_cast<std::ptrdiff_t>(at),
                         {Severity::kHigh, "", first == UINT64_MAX ? prefix : prefix + first,
                          "polyglot: the file is also a zip archive (" + std::to_string(entries) +
                              " entries) that zip readers see instead of what its first bytes say"});
}

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
    ScanPickle(report, entry, data + at, size - at, at, &consumed, false, PickleKind::kLegacyTar);
    uint64_t again = 0;
    Value* v = PickleValue(data + at, size - at, arena, &again);
    if (consumed == 0 || again != consumed) return nullptr;
    at += consumed;
    return v;
  };
  auto stop = [&](const std::string& why) {
    report.findings.push_back({Severity::kHigh, entry, at, why + ": the rest of the member (" + std::to_string(size - at) +
                                                              " bytes) is not scanned; torch.load may run pickles in it"});
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
      uint64_t numel = 0;
      for (int b = 7; b >= 0; --b) numel = numel << 8 | data[at + static_cast<uint64_t>(b)];
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
      uint64_t ndim = 0;
      for (int b = 3; b >= 0; --b) ndim = ndim << 8 | data[at + static_cast<uint64_t>(b)];
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
    report.findings.push_back({Severity::kMedium, entry, at, std::to_string(size - at) + " bytes after the last record torch.load reads"});
  }
}

// A pre-0.4 tar checkpoint. torch.load tries Python's tarfile on every file that is not a zip
// before anything else, extracts `storages` and `tensors` (pickles between binary records) and
// then unpickles `pickle`; old writers also stored `sys_info`. Every pickle in them is scanned.
void ScanLegacyTar(CheckReport& report, const std::shared_ptr<MappedFile>& file) {
  report.findings.push_back({Severity::kMedium, "", 0,
                             "pre-0.4 tar checkpoint: torch.load runs the pickles in its members; trove does not read it "
                             "(its pickles are scanned)"});
  std::vector<TarMember> members;
  try {
    members = ListTarMembers(file->data(), file->size());
  } catch (const Error& e) {
    report.findings.push_back({Severity::kHigh, "", 0, "tar checkpoint not fully listed: " + e.message()});
    return;
  }
  for (const char* name : {"sys_info", "storages", "tensors", "pickle"}) {
    std::vector<const TarMember*> found;
    for (const TarMember& m : members) {
      if (m.name == name) found.push_back(&m);
    }
    if (found.size() > 1) {
      report.findings.push_back({Severity::kCritical, name, found.back()->header_offset,
                                 "tar member appears " + std::to_string(found.size()) +
                                     " times: torch.load (Python's tarfile) uses the last, other tar readers the first; "
                                     "all are scanned"});
    }
    for (const TarMember* m : found) {
      if (!m->regular()) {
        report.findings.push_back({Severity::kCritical, name, m->header_offset,
                                   std::string("tar member is not a regular file (type '") + m->type +
                                       "'): torch.load extracts it and reads what it points to"});
        continue;
      }
      const uint8_t* data = file->data() + m->data_offset;
      const std::string entry = std::string(name) + (found.size() > 1 ? " @ " + std::to_string(m->header_offset) : "");
      if (std::string_view(name) == "storages" || std::string_view(name) == "tensors") {
        ScanLegacyTarStream(report, entry, data, m->size, std::string_view(name) == "storages");
      } else {
        ScanPickle(report, entry, data, m->size, 0, nullptr, false, PickleKind::kLegacyTar);
      }
    }
  }
}

// Structure: what a reader would refuse. Read errors (missing file) propagate.
void CheckStructure(CheckReport& report, const std::string& path) {
  try {
    Open(path);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo || e.code() == ErrorCode::kNotFound) {
      report.findings.push_back({Severity::kMedium, "", 0, "not readable: " + e.message()});
      return;
    }
    report.findings.push_back({e.code() == ErrorCode::kRefused ? Severity::kHigh : Severity::kMedium, "", 0, e.message()});
  }
}

// A tensordict directory: every file and directory under it, without following symlinks.
void ScanTensordictDir(CheckReport& report, const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  if (ec) Fail(ErrorCode::kIo, root + ": cannot list: " + ec.message());
  const fs::path base = fs::path(root).lexically_normal();
  uint64_t visited = 0;
  for (; it != end; it.increment(ec)) {
    if (ec) {
      report.findings.push_back({Severity::kMedium, "", 0, "walk stopped: " + ec.message()});
      break;
    }
    if (++visited > kMaxScanTreeEntries) {
      report.findings.push_back({Severity::kMedium, "", 0, "more than kMaxScanTreeEntries (" +
                                                               std::to_string(kMaxScanTreeEntries) +
                                                               ") files: the rest is not scanned"});
      break;
    }
    const fs::path& p = it->path();
    const std::string rel = p.lexically_relative(base).generic_string();
    fs::file_status st = it->symlink_status(ec);
    if (ec) {
      report.findings.push_back({Severity::kMedium, rel, 0, "cannot stat: " + ec.message()});
      ec.clear();
      continue;
    }
    if (fs::is_symlink(st)) {
      fs::path target = fs::read_symlink(p, ec);
      std::string shown = ec ? std::string("?") : target.string();
      fs::path resolved = (p.parent_path() / target).lexically_normal();
      fs::path inside = resolved.lexically_relative(base);
      bool leaves = ec || target.is_absolute() || inside.empty() || *inside.begin() == "..";
      report.findings.push_back({leaves ? Severity::kCritical : Severity::kHigh, rel, 0,
                                 "symlink to '" + shown + "'" +
                                     (leaves ? ": it leaves the tree (tensordict would follow it)"
                                             : ": trove refuses symlinks; tensordict would follow it")});
      ec.clear();
      continue;
    }
    if (fs::is_directory(st)) continue;
    if (!fs::is_regular_file(st)) {
      report.findings.push_back({Severity::kMedium, rel, 0, "not a regular file (FIFO, socket or device)"});
      continue;
    }
    report.entries_checked++;
    if (!IsPickledSidecar(rel)) continue;
    try {
      auto file = MappedFile::Open(p.string());
      if (file->size() > tensordict::kMaxSidecarBytes) {
        report.findings.push_back({Severity::kMedium, rel, 0, "pickled sidecar larger than kMaxSidecarBytes: not scanned"});
        continue;
      }
      ScanSidecar(report, rel, file->bytes());
    } catch (const Error& e) {
      report.findings.push_back({Severity::kMedium, rel, 0, e.message()});
    }
  }
}

// A sharded checkpoint: each shard checked as a file of its own (a .bin shard's CRCs and
// pickle), its findings under the shard's name, then the index against the shards.
CheckReport CheckShards(const std::string& path, CheckReport (*check)(const std::string&)) {
  CheckReport report;
  report.path = path;
  report.format = std::string(FormatName(Format::kShardedIndex));
  std::error_code ec;
  const std::string index = std::filesystem::is_directory(path, ec) ? FindShardIndex(path) : path;
  std::vector<std::string> shards;
  try {
    shards = ShardFiles(index);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo || e.code() == ErrorCode::kNotFound) throw;
    report.findings.push_back({e.code() == ErrorCode::kRefused ? Severity::kHigh : Severity::kMedium, "", 0, e.message()});
    return report;
  }
  for (const std::string& shard : shards) {
    const std::string name = std::filesystem::path(shard).filename().string();
    std::error_code exists;
    if (!std::filesystem::is_regular_file(shard, exists)) continue;  // reported by CheckStructure below
    CheckReport part = check(shard);
    report.entries_checked += part.entries_checked;
    report.bytes_checked += part.bytes_checked;
    for (auto& f : part.findings) report.findings.push_back({f.severity, f.entry.empty() ? name : name + "/" + f.entry, f.offset, f.message});
    for (auto& g : part.globals) report.globals.push_back({name + "/" + g.entry, g.name, g.offset, g.allowed});
  }
  CheckStructure(report, path);
  return report;
}

}  // namespace

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kInfo: return "info";
    case Severity::kMedium: return "medium";
    case Severity::kHigh: return "high";
    case Severity::kCritical: return "critical";
  }
  return "?";
}

// A .psk.d: exactly the checks presk data makes (pskd::PskdFile: the header, sizes and count,
// then every index below its bound), so that verify and presk give one verdict on every file.
void VerifyPskd(CheckReport& report, const std::string& path) {
  auto mapped = MappedFile::Open(path);  // unreadable: an error (exit 2), as for every format
  report.bytes_checked += mapped->size();
  try {
    pskd::PskdFile file = pskd::PskdFile::FromMapped(mapped);
    file.CheckData();
    report.entries_checked += file.count();
  } catch (const Error& e) {
    report.findings.push_back({Severity::kMedium, "", 0, e.message()});
  }
}

CheckReport Verify(const std::string& path) {
  CheckReport report;
  report.path = path;
  Format format = DetectFormat(path);
  report.format = std::string(FormatName(format));
  if (format == Format::kShardedIndex) return CheckShards(path, Verify);
  if (format == Format::kUnknown) Fail(ErrorCode::kUnsupported, path + ": not a format trove reads");
  if (format == Format::kPskd) {
    VerifyPskd(report, path);
    return report;
  }
  if (IsZipFormat(format)) {
    // An unreadable container throws (exit 2); one that zip readers read differently is a problem.
    auto zip = WithContext(path, [&] {
      return std::make_unique<ZipReader>(MappedFile::Open(path), ZipDisagreement::kReport);
    });
    for (const auto& d : zip->disagreements()) {
      report.findings.push_back({Severity::kHigh, d.entry, d.offset, "zip readers disagree: " + d.message});
    }
    for (const auto& r : zip->refused_entries()) report.findings.push_back({Severity::kHigh, r.entry, r.offset, r.message});
    for (const auto& e : zip->entries()) {
      report.entries_checked++;
      report.bytes_checked += e.compressed_size;
      try {
        if (!zip->CheckCrc(e)) {
          if (e.crc32 == 0) {
            report.findings.push_back({Severity::kInfo, e.name, e.data_offset, "no CRC-32 recorded (0); bytes unchecked"});
          } else {
            report.findings.push_back({Severity::kMedium, e.name, e.data_offset, "CRC-32 mismatch: the bytes differ from what was written"});
          }
        }
      } catch (const Error& err) {
        report.findings.push_back({Severity::kMedium, e.name, e.data_offset, err.message()});
      }
    }
  }
  try {
    Document doc = Open(path);
    for (const auto& w : doc.warnings) report.findings.push_back({Severity::kInfo, "", 0, w});
    if (!IsZipFormat(format)) {
      report.entries_checked += doc.records.size();
      report.bytes_checked += doc.file_size;
    }
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo || e.code() == ErrorCode::kNotFound) throw;
    report.findings.push_back({Severity::kMedium, "", 0, e.message()});
  }
  return report;
}

CheckReport Scan(const std::string& path) {
  CheckReport report;
  report.path = path;
  Format format = DetectFormat(path);
  report.format = std::string(FormatName(format));
  if (format == Format::kShardedIndex) return CheckShards(path, Scan);
  if (format == Format::kTensordictDir) {
    ScanTensordictDir(report, path);
    CheckStructure(report, path);
    return report;
  }
  {
    // A directory DetectFormat did not recognise: nothing trove reads.
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) Fail(ErrorCode::kUnsupported, path + ": directory without meta.json: not a tensordict");
  }
  auto file = MappedFile::Open(path);
  if (IsZipFormat(format)) {
    // Python's zipfile shifts every offset when the end records leave room for data before the
    // archive; torch's reader does not. Both views are scanned.
    if (const uint64_t shift = ZipPrefixBytes(file->data(), file->size()); shift > 0) {
      const size_t at = report.findings.size();
      uint64_t entries = 0, first = 0;
      if (ScanZipfileView(report, file, shift, &entries, &first)) {
        report.findings.insert(report.findings.begin() + static_cast<std::ptrdiff_t>(at),
                               {Severity::kCritical, "", shift,
                                "zip readers disagree: Python's zipfile reads every entry " + std::to_string(shift) +
                                    " bytes further on than torch's reader (it takes them for data before the "
                                    "archive) and sees " + std::to_string(entries) + " entries there; scanned as "
                                    "'zipfile view'"});
      }
    }
    std::unique_ptr<ZipReader> zip;
    try {
      // Read as torch reads it, with every point where zip readers part ways listed.
      zip = std::make_unique<ZipReader>(file, ZipDisagreement::kReport);
    } catch (const Error& e) {
      // Path tricks (".." and absolute names), encrypted entries, overlaps and headers that
      // disagree with the central directory all stop the zip reader: each is reported here.
      report.findings.push_back({Severity::kHigh, "", 0, "zip container refused: " + e.message()});
      return report;
    }
    for (const auto& a : zip->anomalies()) {
      // Data descriptors that agree with the central directory are how torch.save writes every
      // record: worth listing, not alarming.
      bool usual = a.message.find("use a data descriptor") != std::string::npos;
      report.findings.push_back({usual ? Severity::kInfo : Severity::kMedium, a.entry, a.offset, a.message});
    }
    // Readers that see different archives or bytes: whatever trove scans, torch or another tool
    // may run something else.
    // Path tricks (".." and absolute names), encryption and unknown methods: the entry is not
    // read; the rest of the archive, which torch's reader would still open, is scanned.
    for (const auto& r : zip->refused_entries()) {
      report.findings.push_back({Severity::kHigh, r.entry, r.offset, "zip entry refused: " + r.message});
    }
    for (const auto& d : zip->disagreements()) {
      report.findings.push_back({Severity::kCritical, d.entry, d.offset, "zip readers disagree: " + d.message});
    }
    if (format != Format::kTdz) {
      for (const auto& c : zip->case_collisions()) {
        report.findings.push_back({Severity::kCritical, c.entry, c.offset, "zip readers disagree: " + c.message});
      }
    }
    for (const auto& e : zip->entries()) {
      const std::string rest = TorchRecordName(e.name);
      if (rest == "constants.pkl" || rest == "bytecode.pkl" || rest.starts_with("code/") || rest == ".data/version") {
        report.findings.push_back({Severity::kHigh, e.name, e.data_offset, "TorchScript/torch.package record: the archive carries code"});
      }
      // Every entry whose name torch's loaders (ignoring case) or tensordict would unpickle, and
      // in TorchScript/torch.package archives every other record that starts like a pickle
      // (torch.package loads pickled resources by any name).
      const bool named = NamedLikePickle(e.name);
      const bool sniff = !named && format == Format::kTorchScript && !IsStorageRecord(e.name);
      if (!named && !sniff) continue;
      if (sniff && e.method != static_cast<uint16_t>(ZipMethod::kStored) && e.uncompressed_size > kMaxSniffedRecordBytes) {
        report.findings.push_back({Severity::kMedium, e.name, e.data_offset,
                                   "compressed record larger than kMaxSniffedRecordBytes: not checked for a pickle"});
        continue;
      }
      SharedBytes bytes;
      try {
        bytes = zip->Read(e);
      } catch (const Error& err) {
        report.findings.push_back({Severity::kMedium, e.name, e.data_offset, err.message()});
        continue;
      }
      if (sniff && !LooksLikePickle(bytes.data(), bytes.size())) continue;
      if (format == Format::kTdz && IsPickledSidecar(e.name)) {
        ScanSidecar(report, e.name, bytes);
      } else {
        ScanPickle(report, e.name, bytes.data(), bytes.size(), 0);
      }
    }
    for (const auto& e : zip->zipfile_extra_entries()) {
      if (!NamedLikePickle(e.name)) continue;
      const std::string label = "zipfile view: " + e.name;
      try {
        SharedBytes bytes = zip->Read(e);
        ScanPickle(report, label, bytes.data(), bytes.size(), 0);
      } catch (const Error& err) {
        report.findings.push_back({Severity::kMedium, label, e.data_offset, err.message()});
      }
    }
    if (format == Format::kTdz) CheckStructure(report, path);
    return report;
  }
  // torch.load hands every file that does not start as a zip to Python's tarfile first, whatever
  // its magic: a file tarfile accepts is read as a legacy tar checkpoint.
  const bool tar = LooksLikeTar(file->data(), file->size());
  if (tar) ScanLegacyTar(report, file);
  if (format == Format::kPtTar) {
    if (!tar) {
      // A ustar header tarfile rejects: torch.load goes on to unpickle the file from its start.
      CheckStructure(report, path);
      ScanPolyglot(report, file, /*scan_leading_pickle=*/true);
    }
    report.entries_checked++;
    report.bytes_checked += file->size();
    return report;
  }
  if (format == Format::kPtLegacy) {
    uint64_t offset = 0;
    for (int i = 0; i < 5 && offset < file->size(); ++i) {
      uint64_t consumed = 0;
      size_t before = report.findings.size();
      ScanPickle(report, "pickle " + std::to_string(i + 1), file->data() + offset, file->size() - offset, offset, &consumed,
                 /*legacy_ids=*/i == 3);
      bool unreadable = report.findings.size() > before && report.findings.back().message.starts_with("pickle not fully");
      if (consumed == 0 || unreadable) break;
      offset += consumed;
    }
    ScanPolyglot(report, file, /*scan_leading_pickle=*/false);
    return report;
  }
  if (format == Format::kUnknown) {
    // Not a format trove reads, but maybe one that others run: a bare pickle, or a zip hidden
    // behind other bytes (a "magic bypass" polyglot). Anything else is an error, not a report.
    ScanPolyglot(report, file, /*scan_leading_pickle=*/true);
    if (report.findings.empty()) Fail(ErrorCode::kUnsupported, path + ": not a format trove reads");
    return report;
  }
  // .psk.d (and refused formats): no pickle in the container; reading them checks their
  // structure, and a zip hidden inside is a polyglot.
  CheckStructure(report, path);
  ScanPolyglot(report, file, /*scan_leading_pickle=*/false);
  report.entries_checked++;
  report.bytes_checked += file->size();
  return report;
}

}  // namespace trove
