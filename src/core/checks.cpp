#include "trove/checks.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "formats/pt/pt_reader.h"
#include "formats/pt/torch_resolver.h"
#include "formats/safetensors/sharded_reader.h"
#include "formats/tensordict/level_reader.h"
#include "pickle/global_class.h"
#include "trove/error.h"
#include "trove/open.h"
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

enum class PickleKind { kTorch, kData };

void ScanPickle(CheckReport& report, const std::string& entry, const uint8_t* data, uint64_t size, uint64_t base,
                uint64_t* consumed = nullptr, bool legacy_ids = false, PickleKind kind = PickleKind::kTorch,
                int nesting = 0) {
  ValueArena arena;
  TorchResolver torch(/*permissive=*/true);
  torch.legacy_persistent_ids = legacy_ids;
  DataResolver plain(/*permissive=*/true);
  ScanResolver resolver(kind == PickleKind::kTorch ? static_cast<PickleResolver&>(torch) : plain);
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
  try {
    const uint64_t prefix = ZipPrefixBytes(file->data(), file->size());
    ZipReader zip(file->bytes().Slice(prefix, file->size() - prefix));
    uint64_t first = UINT64_MAX;
    for (const auto& e : zip.entries()) first = std::min(first, e.local_header_offset);
    report.findings.push_back({Severity::kHigh, "", first == UINT64_MAX ? prefix : prefix + first,
                               "polyglot: the file is also a zip archive (" + std::to_string(zip.entries().size()) +
                                   " entries) that zip readers see instead of what its first bytes say"});
    for (const auto& e : zip.entries()) {
      if (!e.name.ends_with(".pkl") && !e.name.ends_with(".pickle")) continue;
      try {
        SharedBytes bytes = zip.Read(e);
        ScanPickle(report, e.name, bytes.data(), bytes.size(), 0);
      } catch (const Error& err) {
        report.findings.push_back({Severity::kMedium, e.name, e.data_offset, err.message()});
      }
    }
  } catch (const Error&) {
    // Not a zip at all (the usual case), or one no zip reader would accept either.
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

CheckReport Verify(const std::string& path) {
  CheckReport report;
  report.path = path;
  Format format = DetectFormat(path);
  report.format = std::string(FormatName(format));
  if (format == Format::kShardedIndex) return CheckShards(path, Verify);
  if (format == Format::kUnknown) Fail(ErrorCode::kUnsupported, path + ": not a format trove reads");
  if (IsZipFormat(format)) {
    ZipReader zip(MappedFile::Open(path));  // an unreadable container throws: exit 2
    for (const auto& e : zip.entries()) {
      report.entries_checked++;
      report.bytes_checked += e.compressed_size;
      try {
        if (!zip.CheckCrc(e)) {
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
    std::unique_ptr<ZipReader> zip;
    try {
      zip = std::make_unique<ZipReader>(file);
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
    for (const auto& e : zip->entries()) {
      std::string_view n = e.name;
      size_t slash = n.find('/');
      std::string_view rest = slash == std::string_view::npos ? n : n.substr(slash + 1);
      if (rest == "constants.pkl" || rest == "bytecode.pkl" || rest.starts_with("code/") || rest == ".data/version") {
        report.findings.push_back({Severity::kHigh, e.name, e.data_offset, "TorchScript/torch.package record: the archive carries code"});
      }
      if (n.ends_with(".pkl") || n.ends_with(".pickle")) {
        SharedBytes bytes;
        try {
          bytes = zip->Read(e);
        } catch (const Error& err) {
          report.findings.push_back({Severity::kMedium, e.name, e.data_offset, err.message()});
          continue;
        }
        if (format == Format::kTdz && IsPickledSidecar(e.name)) {
          ScanSidecar(report, e.name, bytes);
        } else {
          ScanPickle(report, e.name, bytes.data(), bytes.size(), 0);
        }
      }
    }
    if (format == Format::kTdz) CheckStructure(report, path);
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
