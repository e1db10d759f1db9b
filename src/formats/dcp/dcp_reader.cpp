// DCP checkpoints read as one document: the metadata, the chunks' places in their files, the
// global tensors (zero-copy or assembled on demand) and the object items.
#include "formats/dcp/dcp_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/confined_directory.h"
#include "core/progress.h"
#include "formats/bounded_json.h"
#include "formats/dcp/dcp_layout.h"
#include "formats/dcp/dcp_metadata.h"
#include "formats/pt/pt_checks.h"
#include "formats/pt/pt_reader.h"
#include "pickle/pickle_scan.h"
#include "trove/error.h"
#include "trove/zip_reader.h"

namespace trove {
namespace fs = std::filesystem;

namespace {

// The checkpoint's data files, each opened by the rule and mapped once, when first named.
class DcpFiles {
 public:
  explicit DcpFiles(std::shared_ptr<const ConfinedDirectory> dir) : dir_(std::move(dir)) {}

  std::shared_ptr<MappedFile> Map(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = files_.find(name);
    if (it != files_.end()) return it->second;
    ConfinedFile file = dir_->RequireFile(name);
    auto mapped = MappedFile::FromDescriptor(file.fd.release(), file.path, file.size);
    files_.emplace(name, mapped);
    return mapped;
  }
  const std::string& path() const { return dir_->path(); }
  std::map<std::string, uint64_t> Sizes() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::map<std::string, uint64_t> out;
    for (const auto& [name, file] : files_) out.emplace(name, file->size());
    return out;
  }

 private:
  std::shared_ptr<const ConfinedDirectory> dir_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<MappedFile>> files_;
};

std::string ChunkName(const DcpItem& item, const DcpChunk& chunk) {
  return "tensor '" + item.fqn + "', chunk at " + DcpTupleText(chunk.box.offsets);
}

// Where a chunk's archive is, for errors from inside it (whose offsets are the archive's own).
std::string ArchivePlace(const DcpChunk& chunk) {
  return "its archive at byte " + std::to_string(chunk.storage.offset);
}

// A storage's bytes: the range must lie inside its file.
SharedBytes StorageBytes(DcpFiles& files, const DcpStorage& s) {
  std::shared_ptr<MappedFile> file = files.Map(s.file);
  if (s.offset > file->size() || s.length > file->size() - s.offset) {
    throw Error(ErrorCode::kCorrupt, "bytes [" + std::to_string(s.offset) + ", " + std::to_string(s.offset + s.length) +
                                         ") lie past the end of '" + s.file + "' (" + std::to_string(file->size()) +
                                         " bytes)");
  }
  return file->Slice(s.offset, s.length);
}

// The tensor a chunk's archive holds, checked against the metadata: the item's dtype and the
// chunk's sizes. Its values are made in `arena`. Tensor chunks are torch.save'd tensors, read
// under the strict policy (what torch.load(weights_only=True) reads them with).
TensorView ReadChunk(DcpFiles& files, const DcpItem& item, const DcpChunk& chunk, std::shared_ptr<ValueArena> arena,
                     CheckReport* report = nullptr) {
  return WithContext(ChunkName(item, chunk) + ", " + ArchivePlace(chunk), [&] {
    const std::string path = (fs::path(files.path()) / chunk.storage.file).string();
    return WithFile(path, [&] {
      SharedBytes bytes = StorageBytes(files, chunk.storage);
      {
        ZipReader zip(bytes);
        if (report != nullptr) {
          for (const ZipEntry& e : zip.entries()) {
            report->entries_checked++;
            report->bytes_checked += e.compressed_size;
            if (!zip.CheckCrc(e)) {
              report->Add(Severity::kMedium, chunk.storage.file, chunk.storage.offset + e.data_offset,
                          ChunkName(item, chunk) + ": '" + e.name + "': CRC-32 mismatch");
            }
          }
        }
        ReadOptions strict;
        strict.pickle_policy = PicklePolicy::kStrict;
        Document part = ReadPtInto(zip, strict, std::move(arena));
        if (part.root == nullptr || part.root->kind != ValueKind::kTensor) {
          Fail(ErrorCode::kCorrupt, "the archive holds a " +
                                        std::string(KindName(part.root ? part.root->kind : ValueKind::kNone)) +
                                        ", not a tensor");
        }
        const TensorView& view = *part.root->tensor;
        if (view.dtype != item.dtype) {
          Fail(ErrorCode::kCorrupt, "the archive's tensor is " + std::string(Name(view.dtype)) +
                                        ", the metadata says " + std::string(Name(item.dtype)));
        }
        if (view.shape != chunk.box.sizes) {
          Fail(ErrorCode::kCorrupt, "the archive's tensor has shape " + DcpTupleText(view.shape) +
                                        ", the metadata's chunk " + DcpTupleText(chunk.box.sizes));
        }
        if (!view.has_data) Fail(ErrorCode::kCorrupt, "the archive's tensor has no data (a meta tensor)");
        return view;
      }
    });
  });
}

// A tensor of several chunks. Chunks cut along dim 0 only are each a contiguous run of the
// tensor's bytes (DcpBoxRun): the tensor's bytes are then those runs in order (Pieces), each the
// bytes its archive stores, so a writer copies them from their files by the kernel and a slice
// reads only the chunks it overlaps. Otherwise, and whenever its bytes are asked for whole, it
// is assembled in one buffer; each such pass assembles its own copy and drops it when done, so
// converting a checkpoint holds one tensor at a time.
class DcpAssembly : public DeferredSource {
 public:
  DcpAssembly(std::shared_ptr<DcpFiles> files, DcpItem item) : files_(std::move(files)), item_(std::move(item)) {
    const uint64_t esize = ElementSize(item_.dtype);
    for (size_t i = 0; i < item_.chunks.size(); ++i) {
      const std::optional<uint64_t> start = DcpBoxRun(item_.shape, item_.chunks[i].box);
      if (!start) {
        runs_.clear();
        return;
      }
      uint64_t numel = 1;
      for (int64_t s : item_.chunks[i].box.sizes) numel *= static_cast<uint64_t>(s);  // inside the shape (tiling)
      if (numel > 0) runs_.push_back({*start * esize, numel * esize, i});
    }
    std::sort(runs_.begin(), runs_.end(), [](const Run& a, const Run& b) { return a.begin < b.begin; });
  }

  std::optional<std::vector<SharedBytes>> Pieces(uint64_t offset, uint64_t length) const override {
    if (runs_.empty()) return std::nullopt;  // a chunk cut along a later dimension: assembled
    std::vector<SharedBytes> out;
    for (const Run& run : runs_) {
      const uint64_t from = std::max(run.begin, offset), to = std::min(run.begin + run.length, offset + length);
      if (from >= to) continue;
      // Only the chunks the range overlaps are read; the tiling check made them cover it.
      const TensorView view = ReadChunk(*files_, item_, item_.chunks[run.chunk], std::make_shared<ValueArena>());
      out.push_back(StreamedBytes(view).Slice(from - run.begin, to - from));
    }
    return out;
  }

  SharedBytes Produce() const override {
    const size_t esize = ElementSize(item_.dtype);
    uint64_t numel = 1;
    for (int64_t s : item_.shape) numel *= static_cast<uint64_t>(s);
    std::vector<uint8_t> global(static_cast<size_t>(numel * esize));
    for (const DcpChunk& chunk : item_.chunks) {
      TensorView view = ReadChunk(*files_, item_, chunk, std::make_shared<ValueArena>());
      const SharedBytes bytes = view.ContiguousLittleEndian();
      CopyDcpBox(global.data(), item_.shape, esize, chunk.box, bytes.data());
      // Copied: the chunk's pages leave the resident set (they stay in the page cache), so a
      // pass over every tensor holds one assembled tensor, not the files it was read from.
      bytes.Release(0, bytes.size());
    }
    return SharedBytes::FromVector(std::move(global));
  }

 private:
  struct Run {
    uint64_t begin = 0;   // in the tensor's bytes
    uint64_t length = 0;  // bytes
    size_t chunk = 0;     // in item_.chunks
  };
  std::shared_ptr<DcpFiles> files_;
  DcpItem item_;
  std::vector<Run> runs_;  // every chunk's run in order, or none when a chunk is not one run
};

// The product of sizes, or UINT64_MAX when it does not fit in 62 bits.
uint64_t SaturatingNumel(const std::vector<int64_t>& sizes) {
  uint64_t n = 1;
  for (int64_t s : sizes) {
    if (s == 0) return 0;
  }
  for (int64_t s : sizes) {
    if (n > (uint64_t{1} << 62) / static_cast<uint64_t>(s)) return UINT64_MAX / 16;
    n *= static_cast<uint64_t>(s);
  }
  return n;
}

struct OpenedDcp {
  std::shared_ptr<const ConfinedDirectory> dir;
  std::string metadata_path;
  uint64_t metadata_size = 0;
  DcpMetadata meta;
};

// Reads and checks the metadata (its items, the tiling of every tensor, the file names' form).
OpenedDcp OpenDcp(const std::string& path, bool path_is_directory) {
  OpenedDcp out;
  const fs::path p(path);
  const std::string directory =
      path_is_directory ? path : (p.parent_path().empty() ? std::string(".") : p.parent_path().string());
  out.dir = ConfinedDirectory::Open(directory);
  out.metadata_path = path_is_directory ? (fs::path(directory) / kDcpMetadataName).string() : path;
  WithFile(out.metadata_path, [&] {
    ConfinedFile file = path_is_directory ? out.dir->RequireFile(kDcpMetadataName) : OpenUserFile(path);
    if (file.size > kMaxDcpMetadataBytes) {
      Fail(ErrorCode::kLimit, std::to_string(file.size) + " bytes exceed the " + std::to_string(kMaxDcpMetadataBytes) +
                                  "-byte cap (kMaxDcpMetadataBytes)");
    }
    out.metadata_size = file.size;
    auto mapped = MappedFile::FromDescriptor(file.fd.release(), file.path, file.size, /*keep_descriptor=*/false);
    out.meta = ParseDcpMetadata(mapped->data(), mapped->size());
    for (const DcpItem& item : out.meta.items) {
      if (item.tensor) {
        std::vector<DcpBox> boxes;
        boxes.reserve(item.chunks.size());
        for (const DcpChunk& c : item.chunks) boxes.push_back(c.box);
        CheckDcpTiling(item.fqn, item.shape, boxes);
      }
      for (const DcpChunk& c : item.chunks) {
        WithContext(ChunkName(item, c), [&] {
          ConfinedDirectory::CheckName(c.storage.file);
          // torch.save stores a tensor's bytes as they are: an archive shorter than its chunk's
          // bytes cannot hold them. Checked before anything is assembled, so an assembled
          // tensor's buffer is never larger than the file ranges it comes from.
          const uint64_t bytes = SaturatingNumel(c.box.sizes) * ElementSize(item.dtype);
          if (bytes > c.storage.length) {
            Fail(ErrorCode::kCorrupt, "its archive of " + std::to_string(c.storage.length) + " bytes in '" +
                                          c.storage.file + "' cannot hold its " + std::to_string(bytes) + " bytes");
          }
        });
      }
      if (!item.tensor) WithContext("item '" + item.fqn + "'", [&] { ConfinedDirectory::CheckName(item.object.file); });
    }
  });
  return out;
}

uint64_t Numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t s : shape) {
    if (s != 0 && n > (uint64_t{1} << 62) / static_cast<uint64_t>(s)) Fail(ErrorCode::kLimit, "tensor has too many elements");
    n *= static_cast<uint64_t>(s);
  }
  return n;
}

}  // namespace

bool IsDcpDirectory(const std::string& directory) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(directory) / kDcpMetadataName, ec)) return false;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().ends_with(kDcpDataSuffix)) return true;
  }
  return false;
}

// The tensors a separately read archive holds (an object item, Megatron's common.pt) number
// their storages after the document's others, their keys prefixed by where the archive lies.
void NumberStorages(Value* value, const std::string& key_prefix, int64_t& storage_index) {
  std::unordered_set<const TensorView*> seen;
  int64_t storages = 0;
  for (const NamedTensor& t : CollectTensors(value)) {
    TensorView* v = const_cast<TensorView*>(t.view);  // made in this document's arena just now
    if (v->storage_index < 0 || !seen.insert(v).second) continue;
    storages = std::max(storages, v->storage_index + 1);
    v->storage_index += storage_index;
    v->storage_key = key_prefix + v->storage_key;
  }
  storage_index += storages;
}

// Megatron-Core's torch_dist checkpoints put two files beside the DCP ones: metadata.json (which
// sharded backend wrote the directory and its version) and common.pt (a torch.save of the items
// every rank shares: iteration, arguments, ...). metadata.json's keys become properties
// ("megatron.<key>"), common.pt's dict entries items (counted as "megatron.common_items") of the checkpoint beside the DCP ones, read
// as data by the pt reader under the caller's policy. A DCP directory without them is unchanged.
void AddMegatronFiles(const ConfinedDirectory& dir, DcpFiles& files, Document& doc, Value* root,
                      const ReadOptions& options, int64_t& storage_index) {
  if (std::optional<ConfinedFile> json = dir.OpenFile(kMegatronMetadataName)) {
    const std::string json_path = json->path;
    WithFile(json_path, [&] {
      if (json->size > kMaxMegatronMetadataBytes) {
        throw Error(ErrorCode::kLimit, "larger than kMaxMegatronMetadataBytes (" +
                                           std::to_string(kMaxMegatronMetadataBytes) + " bytes)");
      }
      auto mapped = MappedFile::FromDescriptor(json->fd.release(), json_path, json->size, /*keep_descriptor=*/false);
      const std::string_view text(reinterpret_cast<const char*>(mapped->data()), mapped->size());
      const nlohmann::json parsed = ParseBoundedJson(text, kMaxMegatronMetadataDepth);
      if (!parsed.is_object()) throw Error(ErrorCode::kCorrupt, "not a JSON object");
      for (const auto& [key, value] : parsed.items()) {
        doc.properties.emplace_back("megatron." + key,
                                    value.is_string() ? value.get<std::string>() : value.dump());
      }
    });
  }
  if (!dir.OpenFile(kMegatronCommonName)) return;
  const std::string common_path = (fs::path(dir.path()) / kMegatronCommonName).string();
  WithFile(common_path, [&] {
    std::shared_ptr<MappedFile> file = files.Map(std::string(kMegatronCommonName));
    ZipReader zip(file->Slice(0, file->size()));
    Document part = ReadPtInto(zip, options, doc.arena);
    for (auto& w : part.warnings) doc.warnings.push_back(std::string(kMegatronCommonName) + ": " + w);
    if (part.root == nullptr || part.root->kind != ValueKind::kDict) {
      throw Error(ErrorCode::kCorrupt, "holds a " + std::string(KindName(part.root ? part.root->kind : ValueKind::kNone)) +
                                           ", not the dict of common items");
    }
    NumberStorages(part.root, std::string(kMegatronCommonName) + ":", storage_index);
    std::unordered_set<std::string> names;
    for (const auto& [key, value] : root->entries) names.insert(key->text);
    for (const auto& [key, value] : part.root->entries) {
      if (key->kind == ValueKind::kStr && !names.insert(key->text).second) {
        throw Error(ErrorCode::kCorrupt, "item '" + key->text + "' is also an item of the DCP metadata");
      }
      root->entries.emplace_back(key, value);
    }
    doc.properties.emplace_back("megatron.common_items",
                                PropertyValue::Integer(static_cast<int64_t>(part.root->entries.size())));
  });
}

Document ReadDcpCheckpoint(const std::string& path, bool path_is_directory, const ReadOptions& options) {
  OpenedDcp opened = OpenDcp(path, path_is_directory);
  auto files = std::make_shared<DcpFiles>(opened.dir);
  Document doc;
  doc.format = "dcp";
  doc.path = path;
  doc.file_size = opened.metadata_size;
  Value* root = doc.arena->Dict("dict");
  int64_t storage_index = 0;
  uint64_t assembled = 0;
  for (const DcpItem& item : opened.meta.items) {
    Value* value = nullptr;
    if (!item.tensor) {
      value = WithContext("item '" + item.fqn + "'", [&] {
        const std::string file = (fs::path(opened.dir->path()) / item.object.file).string();
        return WithFile(file, [&] {
          SharedBytes bytes = StorageBytes(*files, item.object);
          try {
            ZipReader zip(bytes);
            Document part = ReadPtInto(zip, options, doc.arena);
            for (auto& w : part.warnings) doc.warnings.push_back("item '" + item.fqn + "': " + w);
            return part.root;
          } catch (Error& e) {
            e.SetOffset(item.object.offset);
            throw;
          }
        });
      });
      NumberStorages(value, item.object.file + ":" + std::to_string(item.object.offset) + ":", storage_index);
    } else {
      const uint64_t numel = Numel(item.shape);
      const bool whole = item.chunks.size() == 1 && item.chunks[0].box.sizes == item.shape;
      TensorView view;
      if (whole) {
        // One chunk covering the tensor: its archive's view, into the mapping.
        view = ReadChunk(*files, item, item.chunks[0], doc.arena);
        view.storage_key = item.chunks[0].storage.file + ":" + std::to_string(item.chunks[0].storage.offset);
      } else {
        view.dtype = item.dtype;
        view.shape = item.shape;
        view.strides = ContiguousStrides(item.shape);
        const uint64_t nbytes = numel * ElementSize(item.dtype);
        view.storage = item.chunks.empty() || nbytes == 0
                           ? SharedBytes::FromVector(std::vector<uint8_t>(static_cast<size_t>(nbytes)))
                           : SharedBytes::Deferred(std::make_shared<DcpAssembly>(files, item), nbytes);
        view.storage_key = "(" + std::to_string(item.chunks.size()) + " chunks)";
        ++assembled;
      }
      view.storage_index = storage_index++;
      view.requires_grad = item.requires_grad;
      view.Validate();
      value = doc.arena->Tensor(std::move(view));
    }
    root->entries.emplace_back(doc.arena->Str(item.fqn), value);
  }
  AddMegatronFiles(*opened.dir, *files, doc, root, options, storage_index);
  doc.root = root;
  doc.tensors = CollectTensors(root);
  size_t tensors = 0;
  for (const DcpItem& item : opened.meta.items) tensors += item.tensor;
  doc.properties.emplace_back("module", opened.meta.module);
  if (!opened.meta.version.empty()) doc.properties.emplace_back("version", opened.meta.version);
  doc.properties.emplace_back("items", PropertyValue::Integer(static_cast<int64_t>(opened.meta.items.size())));
  doc.properties.emplace_back("tensors", PropertyValue::Integer(static_cast<int64_t>(tensors)));
  doc.properties.emplace_back("chunks", PropertyValue::Integer(static_cast<int64_t>(opened.meta.chunks)));
  doc.properties.emplace_back("assembled_tensors", PropertyValue::Integer(static_cast<int64_t>(assembled)));
  // Every file the metadata names, checked to exist and hold its ranges.
  for (const DcpItem& item : opened.meta.items) {
    for (const DcpChunk& c : item.chunks) {
      WithContext(ChunkName(item, c), [&] {
        WithFile((fs::path(opened.dir->path()) / c.storage.file).string(), [&] { StorageBytes(*files, c.storage); });
      });
    }
  }
  for (const auto& [name, size] : files->Sizes()) {
    ContainerRecord rec;
    rec.name = name;
    rec.size = rec.stored_size = size;
    rec.method = "file";
    doc.records.push_back(rec);
  }
  doc.properties.emplace_back("files", PropertyValue::Integer(static_cast<int64_t>(doc.records.size())));
  return doc;
}

void VerifyDcpCheckpoint(const std::string& path, bool path_is_directory, CheckReport& report,
                         const ProgressReporter::Callback& progress) {
  try {
    Document doc = ReadDcpCheckpoint(path, path_is_directory, {});
    for (const auto& w : doc.warnings) report.Add(Severity::kInfo, "", 0, w);
    OpenedDcp opened = OpenDcp(path, path_is_directory);
    auto files = std::make_shared<DcpFiles>(opened.dir);
    // One progress step over the chunks' archives (their byte ranges, which ReadDcpCheckpoint
    // found inside their files).
    uint64_t chunk_bytes = 0;
    for (const DcpItem& item : opened.meta.items) {
      for (const DcpChunk& c : item.chunks) chunk_bytes += std::min(c.storage.length, UINT64_MAX - chunk_bytes);
    }
    ProgressReporter step(progress, chunk_bytes);
    step.Begin();
    for (const DcpItem& item : opened.meta.items) {
      for (const DcpChunk& c : item.chunks) {
        try {
          ReadChunk(*files, item, c, std::make_shared<ValueArena>(), &report);
        } catch (const Error& e) {
          if (e.code() == ErrorCode::kIo) throw;  // the machine's problem, not the checkpoint's
          report.AddError(Severity::kMedium, "", e);  // the error names the file and chunk
        }
        step.Add(c.storage.length);
      }
    }
    step.Finish();
    report.entries_checked += 1;  // .metadata
    report.bytes_checked += opened.metadata_size;
    report.bytes_without_checksum += opened.metadata_size;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo) throw;
    report.AddError(Severity::kMedium, "", e);
  }
}

void ScanDcpItems(const std::string& path, bool path_is_directory, CheckReport& report) {
  OpenedDcp opened;
  try {
    opened = OpenDcp(path, path_is_directory);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo) throw;
    return;  // the metadata's own scan and the read after this hook report it
  }
  DcpFiles files(opened.dir);
  auto scan = [&](const DcpStorage& s) {
    const std::string place = s.file + "@" + std::to_string(s.offset);
    try {
      ZipReader zip(StorageBytes(files, s), ZipDisagreement::kReport);
      for (const ZipEntry& e : zip.entries()) {
        if (!NamedLikePickle(e.name)) continue;
        const SharedBytes pickle = zip.Read(e);
        ScanTorchPickle(report, place + "/" + e.name, pickle.data(), pickle.size());
        report.entries_checked++;
        report.bytes_checked += e.compressed_size;
      }
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kIo) throw;
      report.AddError(Severity::kMedium, place, e);
    }
  };
  for (const DcpItem& item : opened.meta.items) {
    if (!item.tensor) scan(item.object);
    for (const DcpChunk& c : item.chunks) scan(c.storage);
  }
  // Megatron's common.pt, which Megatron torch.loads with weights_only=False.
  if (std::optional<ConfinedFile> common = opened.dir->OpenFile(kMegatronCommonName)) {
    scan(DcpStorage{.file = std::string(kMegatronCommonName), .offset = 0, .length = common->size});
  }
}

}  // namespace trove
