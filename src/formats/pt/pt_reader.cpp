// Reading torch.save checkpoints.
//
// Zip format (torch >= 1.6), one top-level folder <archive>/ holding:
//   data.pkl                 pickle (protocol 2) of the saved object; storages by persistent id
//   .format_version          "1" (newest torch)             .storage_alignment  "64"
//   byteorder                "little" | "big" (torch >= 2.1; absent means little)
//   data/<key>               raw bytes of storage <key>, 64-byte aligned, stored
//   version                  "3\n" (or .data/version for TorchScript writers)
//   .data/serialization_id   40 digits
// Legacy "1001" format: five pickles back to back (magic number, protocol 1001, sys_info, the
// object, the sorted list of storage keys), then per key an int64 element count and the bytes.
// The pickles are of whatever protocol torch.save was given (0 to 5; 2 by default).
#include "formats/pt/pt_reader.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "core/byte_reader.h"
#include "formats/pt/torch_resolver.h"
#include "trove/error.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

// The legacy format's magic number 0x1950a86a20f9469cfc6c, as its LONG1 little-endian bytes.
constexpr uint8_t kLegacyMagic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr int64_t kLegacyProtocolVersion = 1001;
// torch 1.13 reads zip file versions 1..10 (kMaxSupportedFileFormatVersion); torch.save writes 3.
constexpr uint64_t kMaxPtFileVersion = 10;
// The bytes the magic-number pickle may take: 23 as protocol 0/1 text ("L1195470371460388013L\n."),
// 24 with protocol 4/5's FRAME; more room only lets a different first pickle be read in full.
constexpr uint64_t kLegacyMagicWindow = 64;

std::string ArchivePrefix(const ZipReader& zip) {
  if (zip.entries().empty()) Fail(ErrorCode::kCorrupt, "empty zip archive");
  const std::string& first = zip.entries().front().name;
  size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0) {
    Fail(ErrorCode::kCorrupt, "entry '" + first + "' is not in a subdirectory (a torch archive has one top folder)");
  }
  return first.substr(0, slash);
}

std::string TrimRecord(std::string_view v) {
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r' || v.back() == ' ')) v.remove_suffix(1);
  return std::string(v);
}

// Every resolver of the document's pickles (data.pkl's; a TorchScript archive's constants.pkl's, or
// null) gives its views their bytes once the tensors are named.
void CollectNamedTensors(Document& doc, std::initializer_list<TorchResolver*> resolvers) {
  for (TorchResolver* r : resolvers)
    if (r != nullptr) r->StoragesAsTensors(*doc.arena);
  doc.tensors = CollectTensors(doc.root);
  std::unordered_map<const TensorView*, std::string> names;
  for (const auto& t : doc.tensors) names.emplace(t.view, t.key);
  for (TorchResolver* r : resolvers) {
    if (r == nullptr) continue;
    r->Finish([&](const TensorView* v) {
      auto it = names.find(v);
      if (it != names.end()) return it->second;
      return v->storage_key.empty() ? std::string("(unnamed)") : "(unnamed view of " + v->storage_key + ")";
    });
  }
}

// Gives every storage a pickle referenced its record's bytes (`folder` + key: data/ for data.pkl,
// constants/ for a TorchScript archive's constants.pkl), checked against the declared size.
void ResolveStorages(const ZipReader& zip, const std::string& folder, TorchResolver& resolver) {
  for (auto& s : resolver.storages()) {
    const std::string name = folder + s.key;
    const ZipEntry* e = zip.FindIgnoringCase(name);
    if (!e) Fail(ErrorCode::kCorrupt, "record '" + name + "' missing (referenced by the pickle)");
    if (e->uncompressed_size != s.declared_bytes) {
      Fail(ErrorCode::kCorrupt, "record '" + name + "' has " + std::to_string(e->uncompressed_size) +
                                    " bytes but the pickle declares " + std::to_string(s.declared_bytes));
    }
    // A compressed record is inflated only when its bytes are wanted: info, scan and verify's
    // structure never inflate it; streaming commands inflate it window by window.
    s.bytes = WithEntry(name, [&] { return zip.ReadDeferred(*e); });
    s.resolved = true;
  }
}

// TorchScript archives (torch.jit.save, torch >= 1.3) hold the module's state in data.pkl, as
// torch.save's, with its constant tensors in constants.pkl (storages under constants/), and its
// code under code/. kTorchScriptData reads the two pickles as data (the module's classes,
// __torch__.*, become inert objects; nothing of code/ is read) and says the code was left.
enum class ZipPtKind { kTorchSave, kTorchScriptData };

// constants.pkl: the tuple of constants the code uses (tensors a trace captured, ...), their
// storages under constants/. Read by a resolver of its own (its keys are apart from data/'s) and
// placed in the root module's state under kTorchScriptConstantsKey, so that its tensors have key
// paths (`(constants)/0`) and convert carries them. Returns that resolver (null: none to read).
std::unique_ptr<TorchResolver> ReadTorchScriptConstants(const ZipReader& zip, const std::string& prefix, Document& doc,
                                                        const ReadOptions& options, int64_t storage_index_base) {
  const ZipEntry* e = zip.FindIgnoringCase(prefix + "/constants.pkl");
  if (e == nullptr) return nullptr;
  SharedBytes pickle = WithEntry(e->name, [&] { return zip.Read(*e); });
  auto resolver = std::make_unique<TorchResolver>(options.pickle_policy);
  resolver->storage_folder = "constants/";
  resolver->storage_index_base = storage_index_base;
  Unpickler unpickler(pickle.data(), pickle.size(), *doc.arena, *resolver);
  Value* constants = WithEntry(e->name, [&] { return unpickler.Load(); });
  ResolveStorages(zip, prefix + "/constants/", *resolver);
  const bool none = constants->kind == ValueKind::kTuple && constants->items.empty();
  if (none) return resolver;
  Value* root = doc.root;
  if (root == nullptr || root->kind != ValueKind::kObject || root->state == nullptr || root->state->kind != ValueKind::kDict ||
      root->state->Find(kTorchScriptConstantsKey) != nullptr) {
    doc.warnings.push_back(e->name + ": the constants have no place beside a module's state here; not read");
    return nullptr;
  }
  root->state->entries.emplace_back(doc.arena->Str(std::string(kTorchScriptConstantsKey)), constants);
  return resolver;
}

Document ReadZipPt(const ZipReader& zip, const ReadOptions& options, ZipPtKind kind = ZipPtKind::kTorchSave,
                   std::shared_ptr<ValueArena> arena = nullptr, const PtKnownNames& names = {}) {
  // Where zip readers disagree, --permissive reads the archive as torch does and says so.
  if (options.pickle_policy != PicklePolicy::kPermissive) zip.RefuseDisagreements();
  // An archive inside another file (a DCP chunk) is bytes of that file's mapping, not a file.
  const MappedFile* file = zip.shared_file().get();
  // Entries the reader refuses on their own stay refusals, --permissive or not.
  if (!zip.refused_entries().empty()) Fail(ErrorCode::kRefused, zip.refused_entries().front().message);
  Document doc;
  if (arena) doc.arena = std::move(arena);
  for (const ZipProblem& p : zip.disagreements()) doc.warnings.push_back("zip readers disagree: " + p.message);
  for (const ZipProblem& p : zip.case_collisions()) {
    if (options.pickle_policy != PicklePolicy::kPermissive) Fail(ErrorCode::kRefused, p.message);
    doc.warnings.push_back("zip readers disagree: " + p.message);
  }
  doc.format = "pt";
  doc.path = file != nullptr ? file->path() : std::string();
  doc.file_size = file != nullptr ? file->size() : zip.bytes().size();
  const std::string prefix = ArchivePrefix(zip);
  for (const auto& e : zip.entries()) {
    if (e.name.compare(0, prefix.size() + 1, prefix + "/") != 0) {
      Fail(ErrorCode::kCorrupt, "entry '" + e.name + "' is outside the archive folder '" + prefix + "/'");
    }
    doc.records.push_back({e.name, e.data_offset, e.uncompressed_size, e.compressed_size,
                           std::string(ZipMethodName(e.method)), e.crc32});
  }
  // torch opens records by name, ignoring ASCII case (miniz's default lookup).
  auto record = [&](std::string_view name) { return zip.FindIgnoringCase(prefix + "/" + std::string(name)); };
  for (std::string_view code_record : kTorchScriptRecords) {
    if (kind == ZipPtKind::kTorchScriptData) break;
    if (record(code_record)) {
      Fail(ErrorCode::kRefused, "'" + prefix + "/" + std::string(code_record) + "' present: " + TorchCodeArchiveKind(zip) +
                                    " holds code, refused");
    }
  }
  auto text_record = [&](const std::string& name) -> std::optional<std::string> {
    const ZipEntry* e = record(name);
    if (!e) return std::nullopt;
    if (e->uncompressed_size > 4096) Fail(ErrorCode::kCorrupt, "record '" + e->name + "' is too long for its kind");
    return TrimRecord(zip.Read(*e).view());
  };
  doc.properties.emplace_back("archive", prefix);
  const ZipEntry* pkl = record("data.pkl");
  if (!pkl) Fail(ErrorCode::kCorrupt, "record '" + prefix + "/data.pkl' missing");
  auto version = text_record("version");
  if (!version && kind == ZipPtKind::kTorchScriptData) version = text_record(".data/version");
  if (!version) Fail(ErrorCode::kCorrupt, "record '" + prefix + "/version' missing");
  {
    uint64_t v = 0;
    size_t i = 0;
    for (; i < version->size() && i < 19 && (*version)[i] >= '0' && (*version)[i] <= '9'; ++i) v = v * 10 + ((*version)[i] - '0');
    // TorchScript's version is its bytecode's (up to 10 and beyond); its data.pkl is read as any.
    const bool too_new = v > kMaxPtFileVersion && kind == ZipPtKind::kTorchSave;
    if (i == 0 || i != version->size() || v < 1 || too_new) {
      Fail(ErrorCode::kUnsupported, "record '" + prefix + "/version' is '" + *version + "', readable versions are 1 to " +
                                        std::to_string(kMaxPtFileVersion));
    }
  }
  ByteOrder order = ByteOrder::kLittle;
  // torch.save writes no byteorder record before torch 1.10; torch then reads little-endian.
  const auto bo = text_record("byteorder");
  if (bo) {
    if (*bo == "little") order = ByteOrder::kLittle;
    else if (*bo == "big") order = ByteOrder::kBig;
    else Fail(ErrorCode::kCorrupt, "record '" + prefix + "/byteorder' is '" + *bo + "', expected 'little' or 'big'");
  }
  doc.properties.emplace_back("byteorder", order == ByteOrder::kBig ? "big" : "little");
  doc.properties.emplace_back("byteorder_assumed", PropertyValue::Boolean(!bo));
  if (auto fv = text_record(".format_version")) doc.properties.emplace_back("format_version", PropertyValue::IntegerOrText(*fv));
  if (auto sa = text_record(".storage_alignment")) doc.properties.emplace_back("storage_alignment", PropertyValue::IntegerOrText(*sa));
  doc.properties.emplace_back("version", PropertyValue::IntegerOrText(*version));
  if (auto id = text_record(".data/serialization_id")) doc.properties.emplace_back("serialization_id", *id);

  TorchResolver resolver(options.pickle_policy);
  resolver.byte_order = order;
  resolver.enum_members = names.enum_members;
  resolver.data_classes = names.data_classes;
  SharedBytes pickle = WithEntry(pkl->name, [&] { return zip.Read(*pkl); });
  Unpickler unpickler(pickle.data(), pickle.size(), *doc.arena, resolver);
  doc.root = WithEntry(pkl->name, [&] { return unpickler.Load(); });
  doc.properties.emplace_back("pickle_protocol", PropertyValue::Integer(unpickler.protocol()));
  if (unpickler.consumed() != pickle.size()) {
    doc.warnings.push_back(pkl->name + ": " + std::to_string(pickle.size() - unpickler.consumed()) +
                           " bytes after the pickle's STOP are ignored");
  }
  std::unique_ptr<TorchResolver> constants;
  if (kind == ZipPtKind::kTorchScriptData) {
    doc.format = "torchscript";
    // The module tree's classes (__torch__.*) are what a TorchScript archive is made of: known
    // as modules, not objects of classes trove does not know (scan still grades each name).
    doc.arena->ForEachValue([](Value& v) {
      if (v.kind == ValueKind::kObject && v.type_name.starts_with("__torch__.")) v.unknown_class = false;
    });
    constants = ReadTorchScriptConstants(zip, prefix, doc, options, static_cast<int64_t>(resolver.storages().size()));
    size_t code = 0;
    for (const auto& e : zip.entries()) code += IsTorchScriptCodeRecord(TorchRecordName(e.name)) && !e.name.ends_with(".pkl");
    doc.warnings.push_back("a TorchScript archive: its module's parameters, buffers and constants are read; its code (" +
                           std::to_string(code) + " records under code/) is not read, run or converted");
  }
  ResolveStorages(zip, prefix + "/data/", resolver);
  CollectNamedTensors(doc, {&resolver, constants.get()});
  return doc;
}

Value* LoadPickleAt(const MappedFile& file, uint64_t& offset, ValueArena& arena, PickleResolver& resolver, int* protocol = nullptr) {
  Unpickler u(file.data() + offset, file.size() - offset, arena, resolver, offset);
  Value* v = u.Load();
  offset += u.consumed();
  if (protocol) *protocol = u.protocol();
  return v;
}

Document ReadLegacyPt(std::shared_ptr<MappedFile> file, const ReadOptions& options) {
  Document doc;
  doc.format = "pt-legacy";
  doc.path = file->path();
  doc.file_size = file->size();
  uint64_t offset = 0;
  DataResolver plain(PicklePolicy::kStrict);
  Value* magic = LoadPickleAt(*file, offset, *doc.arena, plain);
  if (magic->kind != ValueKind::kInt || magic->big_int.size() != 10 ||
      std::memcmp(magic->big_int.data(), kLegacyMagic, 10) != 0) {
    Fail(ErrorCode::kCorrupt, "invalid magic number (not a torch legacy checkpoint)");
  }
  Value* proto = LoadPickleAt(*file, offset, *doc.arena, plain);
  if (proto->kind != ValueKind::kInt || proto->integer != kLegacyProtocolVersion) {
    Fail(ErrorCode::kUnsupported, "legacy protocol version is not 1001");
  }
  uint64_t sys_info_offset = offset;
  Value* sys_info = LoadPickleAt(*file, offset, *doc.arena, plain);
  const Value* le = sys_info->Find("little_endian");
  const bool recorded_little = le && le->kind == ValueKind::kBool && le->boolean;
  if (le && le->kind == ValueKind::kBool && !le->boolean) {
    doc.warnings.push_back("sys_info says the writer was big-endian; torch reads these files as little-endian too");
  }
  doc.records.push_back({"pickle: magic, protocol, sys_info", 0, sys_info_offset, sys_info_offset, "pickle", 0});
  TorchResolver resolver(options.pickle_policy);
  resolver.legacy_persistent_ids = true;
  uint64_t object_offset = offset;
  int protocol = 0;
  doc.root = LoadPickleAt(*file, offset, *doc.arena, resolver, &protocol);
  doc.records.push_back({"pickle: object", object_offset, offset - object_offset, offset - object_offset, "pickle", 0});
  uint64_t keys_offset = offset;
  Value* keys = LoadPickleAt(*file, offset, *doc.arena, plain);
  doc.records.push_back({"pickle: storage keys", keys_offset, offset - keys_offset, offset - keys_offset, "pickle", 0});
  if (keys->kind != ValueKind::kList) Fail(ErrorCode::kCorrupt, "storage key list is not a list");
  doc.properties.emplace_back("byteorder", "little");
  doc.properties.emplace_back("byteorder_assumed", PropertyValue::Boolean(!recorded_little));
  doc.properties.emplace_back("version", PropertyValue::Integer(kLegacyProtocolVersion));
  doc.properties.emplace_back("pickle_protocol", PropertyValue::Integer(protocol));
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < resolver.storages().size(); ++i) index.emplace(resolver.storages()[i].key, i);
  ByteReader reader(file->data(), file->size());
  reader.Seek(offset);
  for (const Value* k : keys->items) {
    if (k->kind != ValueKind::kStr) Fail(ErrorCode::kCorrupt, "storage key list holds a non-string");
    uint64_t at = reader.offset();
    int64_t numel = 0;
    try {
      numel = reader.I64();
    } catch (Error& e) {
      throw e.SetOffset(at);
    }
    auto it = index.find(k->text);
    if (it == index.end()) throw Error(ErrorCode::kCorrupt, "storage '" + k->text + "' is not referenced by the object").SetOffset(at);
    TorchStorage& s = resolver.storages()[it->second];
    if (s.resolved) Fail(ErrorCode::kCorrupt, "storage '" + k->text + "' appears twice in the key list");
    uint64_t esize = s.dtype ? ElementSize(*s.dtype) : 1;
    if (numel < 0 || static_cast<uint64_t>(numel) != s.declared_bytes / esize) {
      throw Error(ErrorCode::kCorrupt, "storage '" + k->text + "' has " + std::to_string(numel) +
                                           " elements but the pickle declares " +
                                           std::to_string(s.declared_bytes / std::max<uint64_t>(esize, 1)))
          .SetOffset(at);
    }
    uint64_t data_at = reader.offset();
    WithContext("storage '" + k->text + "'", [&] { reader.Skip(s.declared_bytes); });
    s.bytes = file->Slice(data_at, s.declared_bytes);
    s.resolved = true;
    doc.records.push_back({"storage " + k->text, data_at, s.declared_bytes, s.declared_bytes, "stored", 0});
  }
  if (!reader.at_end()) doc.warnings.push_back(std::to_string(reader.remaining()) + " bytes after the last storage are ignored");
  CollectNamedTensors(doc, {&resolver});
  return doc;
}

}  // namespace

std::string TorchRecordName(std::string_view entry) {
  size_t slash = entry.find('/');
  std::string rest(slash == std::string_view::npos ? entry : entry.substr(slash + 1));
  for (char& c : rest) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return rest;
}

bool IsLegacyPtStart(const uint8_t* data, uint64_t size) {
  // Every protocol's spelling of the number starts with one of these opcodes: PROTO (2-5),
  // LONG text (0, 1).
  if (size < 3 || (data[0] != 0x80 && data[0] != 'L')) return false;
  ValueArena arena;
  DataResolver plain(PicklePolicy::kStrict);
  Unpickler u(data, std::min(size, kLegacyMagicWindow), arena, plain);
  try {
    const Value* magic = u.Load();
    return magic->kind == ValueKind::kInt && magic->big_int.size() == sizeof kLegacyMagic &&
           std::memcmp(magic->big_int.data(), kLegacyMagic, sizeof kLegacyMagic) == 0;
  } catch (const Error&) {
    return false;
  }
}

bool IsTorchScriptRecord(std::string_view record) {
  for (std::string_view r : kTorchScriptRecords)
    if (record == r) return true;
  return false;
}

bool IsTorchScriptCodeRecord(std::string_view record) {
  return IsTorchScriptRecord(record) || record.starts_with("code/") || record.starts_with("libs/") ||
         record.starts_with("tensors/");
}

std::string TorchCodeArchiveKind(const ZipReader& zip) {
  bool has[std::size(kTorchScriptRecords)] = {};
  std::vector<std::string_view> names;
  for (const auto& e : zip.entries()) names.push_back(e.name);
  for (const auto& r : zip.refused_entries()) names.push_back(r.entry);
  for (std::string_view name : names) {
    const std::string rest = TorchRecordName(name);
    for (size_t i = 0; i < std::size(kTorchScriptRecords); ++i) has[i] |= rest == kTorchScriptRecords[i];
  }
  auto present = [&](std::string_view record) {
    for (size_t i = 0; i < std::size(kTorchScriptRecords); ++i)
      if (kTorchScriptRecords[i] == record) return has[i];
    return false;
  };
  if (present(".data/extern_modules")) return "a torch.package archive (.data/extern_modules, pickled code)";
  if (present("bytecode.pkl")) return "a TorchScript mobile archive (bytecode.pkl, for the lite interpreter)";
  if (present("model.json") || present("attributes.pkl")) {
    return "a TorchScript archive of torch 1.0-1.2 (model.json, attributes.pkl, tensors/)";
  }
  if (present("constants.pkl")) return std::string(kJitSaveArchiveKind);
  if (present(".data/version")) return "a TorchScript archive (.data/version)";
  return "a TorchScript/torch.package archive";
}

std::string TorchCodeFileKind(std::string_view head) {
  if (head.size() >= 8 && head.substr(4, 4) == "PTMF") return "a TorchScript mobile archive (flatbuffer, 'PTMF')";
  if (head.starts_with("PYTORCH1")) return "a TorchScript archive of the 1.0 preview ('PYTORCH1')";
  return {};
}

Format TorchZipFormat(const ZipReader& zip) {
  bool has_pkl = false;
  std::vector<std::string_view> names;
  for (const auto& e : zip.entries()) names.push_back(e.name);
  for (const auto& r : zip.refused_entries()) names.push_back(r.entry);  // refused by the reader, a record all the same
  for (std::string_view name : names) {
    std::string rest = TorchRecordName(name);
    if (IsTorchScriptRecord(rest)) return Format::kTorchScript;
    if (rest == "data.pkl") has_pkl = true;
  }
  return has_pkl ? Format::kPt : Format::kUnknown;
}

Document ReadPt(std::shared_ptr<MappedFile> file, const ReadOptions& options) {
  if (IsLegacyPtStart(file->data(), file->size())) return ReadLegacyPt(std::move(file), options);
  ZipReader zip(std::move(file), options.pickle_policy == PicklePolicy::kPermissive ? ZipDisagreement::kReport : ZipDisagreement::kRefuse);
  return ReadZipPt(zip, options);
}

Document ReadPt(const ZipReader& zip, const ReadOptions& options) { return ReadZipPt(zip, options); }

Document ReadPtInto(const ZipReader& zip, const ReadOptions& options, std::shared_ptr<ValueArena> arena) {
  return ReadZipPt(zip, options, ZipPtKind::kTorchSave, std::move(arena));
}

Document ReadPtWithEnums(const ZipReader& zip, const ReadOptions& options, const PtEnumMembers& enum_members) {
  return ReadZipPt(zip, options, ZipPtKind::kTorchSave, nullptr, PtKnownNames{.enum_members = enum_members, .data_classes = {}});
}

Document ReadPtWithNames(const ZipReader& zip, const ReadOptions& options, const PtKnownNames& names,
                         std::shared_ptr<ValueArena> arena) {
  return ReadZipPt(zip, options, ZipPtKind::kTorchSave, std::move(arena), names);
}

Document ReadTorchScriptData(const ZipReader& zip, const ReadOptions& options) {
  return ReadZipPt(zip, options, ZipPtKind::kTorchScriptData);
}

}  // namespace trove
