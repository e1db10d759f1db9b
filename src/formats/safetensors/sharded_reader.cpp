// Sharded checkpoints: an index (model.safetensors.index.json, pytorch_model.bin.index.json)
// naming the shard file of each tensor. Every shard's header is read and its tensors gathered
// into one document; a .safetensors shard is mapped only when a tensor's bytes are first read.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/file_descriptor.h"
#include "formats/safetensors/sharded_reader.h"
#include "formats/safetensors/safetensors_reader.h"
#include "trove/error.h"
#include "formats/pt/pt_reader.h"
#include "trove/safetensors.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace fs = std::filesystem;

namespace {

// A .safetensors shard's bytes, mapped when a tensor's bytes are first read: opening a sharded
// checkpoint reads each shard's header (pread) and maps nothing, so `info` of a hundred shards
// holds no mapping and no descriptor, and `cat` of one tensor maps one shard.
class ShardMapping : public DeferredSource {
 public:
  ShardMapping(std::string path, uint64_t size, std::string_view header)
      : path_(std::move(path)), size_(size), header_hash_(std::hash<std::string_view>()(header)), header_bytes_(header.size()) {}

  SharedBytes Produce() const override {
    return WithFile(path_, [&] {
      auto file = MappedFile::Open(path_);
      // The views were made from the header read at open: the file mapped now must still have it.
      if (file->size() != size_ || file->size() < header_bytes_ ||
          std::hash<std::string_view>()(std::string_view(reinterpret_cast<const char*>(file->data()), header_bytes_)) != header_hash_) {
        Fail(ErrorCode::kIo, "changed since the sharded checkpoint was opened (its size or header differs)");
      }
      return file->bytes();
    });
  }

  // Lazy mappings are read through Produce's mapping; this reader only serves a caller that
  // asks for one anyway.
  std::unique_ptr<DeferredReader> Open(uint64_t offset) const override {
    class Copier : public DeferredReader {
     public:
      Copier(SharedBytes bytes, uint64_t at) : bytes_(std::move(bytes)), at_(at) {}
      void Read(uint8_t* out, size_t n) override {
        std::memcpy(out, bytes_.data() + at_, n);
        at_ += n;
      }
      void Skip(uint64_t n) override { at_ += n; }

     private:
      SharedBytes bytes_;
      uint64_t at_;
    };
    return std::make_unique<Copier>(Produce(), offset);
  }

 private:
  std::string path_;
  uint64_t size_;
  size_t header_hash_;
  uint64_t header_bytes_;
};

// A shard is a .safetensors file or a torch.save file (zip or legacy), told apart by content as
// trove::Open would; the file's name prefixes any error, as it does there. A torch.save shard is
// mapped to be parsed (its zip directory is at its end); a .safetensors one is mapped lazily.
Document ReadShard(const std::string& path, const ReadOptions& options) {
  return WithFile(path, [&] {
    const Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (file.get() < 0) Fail(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, std::strerror(errno));
    const int fd = file.get();
    struct stat st {};
    if (::fstat(fd, &st) != 0) Fail(ErrorCode::kIo, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) Fail(ErrorCode::kIo, "not a regular file");
    const auto size = static_cast<uint64_t>(st.st_size);
    uint8_t first[256] = {};  // enough for a legacy file's first pickle (the magic number)
    const uint64_t got = std::min<uint64_t>(size, sizeof first);
    PreadExactly(fd, first, got, 0);
    std::string_view head(reinterpret_cast<const char*>(first), static_cast<size_t>(std::min<uint64_t>(got, 64)));
    if (head.starts_with(std::string_view("PK\x03\x04", 4)) || IsLegacyPtStart(first, got)) {
      return ReadPt(MappedFile::Open(path), options);
    }
    if (!LooksLikeSafetensors(head, size) && !path.ends_with(".safetensors")) {
      Fail(ErrorCode::kUnsupported, "not a .safetensors or torch.save shard");
    }
    const uint64_t n = SafetensorsHeaderLength(first, size);
    std::vector<uint8_t> header(static_cast<size_t>(8 + n));
    PreadExactly(fd, header.data(), header.size(), 0);
    auto source = std::make_shared<ShardMapping>(path, size, std::string_view(reinterpret_cast<const char*>(header.data()), header.size()));
    return ReadSafetensorsParts(path, size, header.data(), SharedBytes::LazyMapped(std::move(source), size), options);
  });
}

}  // namespace

std::string FindShardIndex(const std::string& directory) {
  std::error_code ec;
  if (fs::exists(fs::path(directory) / "meta.json", ec)) return "";
  for (const char* name : {"model.safetensors.index.json", "pytorch_model.bin.index.json"}) {
    fs::path p = fs::path(directory) / name;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

bool IsShardIndexName(const std::string& path) {
  return path.size() > 11 && path.compare(path.size() - 11, 11, ".index.json") == 0;
}

namespace {

std::string ReadIndexText(const std::string& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) Fail(ErrorCode::kIo, "cannot read: " + ec.message());
  if (size > kMaxShardIndexBytes) {
    Fail(ErrorCode::kLimit, std::to_string(size) + " bytes exceed the " + std::to_string(kMaxShardIndexBytes) + "-byte cap (kMaxShardIndexBytes)");
  }
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) Fail(ErrorCode::kIo, "cannot read");
  return text;
}

// A shard must be a plain file name inside the index's directory, and stay there through links.
fs::path ShardPath(const fs::path& dir, const std::string& name, const std::string& tensor) {
  if (name.empty() || name == "." || name == ".." || name.find_first_of(std::string("/\\\0", 3)) != std::string::npos) {
    Fail(ErrorCode::kRefused, "tensor '" + tensor + "': shard '" + name + "' is not a plain file name in the index's directory");
  }
  fs::path p = dir / name;
  std::error_code ec;
  if (fs::is_symlink(p, ec)) {
    const fs::path target = fs::weakly_canonical(p, ec);
    const fs::path base = fs::weakly_canonical(dir, ec);
    if (ec || target.parent_path() != base) {
      Fail(ErrorCode::kRefused, "shard '" + name + "' is a link leading out of the index's directory");
    }
  }
  return p;
}

nlohmann::json ParseIndex(const std::string& text) {
  // The index is two levels deep; anything deeper is refused while parsing.
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > 3) Fail(ErrorCode::kCorrupt, "nested deeper than an index is");
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorCode::kCorrupt, std::string("not valid JSON: ") + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    Fail(ErrorCode::kCorrupt, "no \"weight_map\" object: not a sharded checkpoint index");
  }
  return index;
}

fs::path IndexDirectory(const std::string& index_path) {
  return fs::path(index_path).parent_path().empty() ? fs::path(".") : fs::path(index_path).parent_path();
}

}  // namespace

std::vector<std::string> ShardFiles(const std::string& index_path) {
  const nlohmann::json index = ParseIndex(ReadIndexText(index_path));
  std::set<std::string> paths;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) Fail(ErrorCode::kCorrupt, "tensor '" + tensor + "': its shard is not a file name");
    paths.insert(ShardPath(IndexDirectory(index_path), shard.get<std::string>(), tensor).string());
  }
  return {paths.begin(), paths.end()};
}

Document ReadShardedCheckpoint(const std::string& index_path, const ReadOptions& options) {
  const std::string text = ReadIndexText(index_path);
  nlohmann::json index = ParseIndex(text);
  const fs::path dir = IndexDirectory(index_path);
  std::map<std::string, std::set<std::string>> listed;  // shard -> tensor names
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) Fail(ErrorCode::kCorrupt, "tensor '" + tensor + "': its shard is not a file name");
    listed[shard.get<std::string>()].insert(tensor);
  }

  Document doc;
  doc.path = index_path;
  doc.file_size = text.size();
  Value* root = doc.arena->Dict("dict");
  std::set<std::string> seen;
  int64_t storage_base = 0;
  uint64_t total = 0;
  std::string kind;
  for (const auto& [shard, names] : listed) {
    const fs::path path = ShardPath(dir, shard, *names.begin());
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) Fail(ErrorCode::kNotFound, "shard '" + shard + "' (of tensor '" + *names.begin() + "') is not a file");
    Document part = ReadShard(path.string(), options);
    if (kind.empty()) kind = part.format;
    if (part.format != kind) Fail(ErrorCode::kCorrupt, "shard '" + shard + "' is " + part.format + ", the others " + kind);
    if (!part.root || part.root->kind != ValueKind::kDict) Fail(ErrorCode::kCorrupt, "shard '" + shard + "' is not a dict of tensors");
    int64_t storages = 0;
    for (const auto& [key, value] : part.root->entries) {
      const std::string name = KeyComponentText(*key);
      if (value->kind != ValueKind::kTensor) {
        doc.warnings.push_back("shard '" + shard + "': '" + name + "' is not a tensor; left out");
        continue;
      }
      if (!names.count(name)) Fail(ErrorCode::kCorrupt, "shard '" + shard + "' holds tensor '" + name + "', which the weight map does not list there");
      if (!seen.insert(name).second) Fail(ErrorCode::kCorrupt, "tensor '" + name + "' appears twice in shard '" + shard + "'");
      TensorView view = *value->tensor;
      if (view.storage_index >= 0) {
        storages = std::max(storages, view.storage_index + 1);
        view.storage_index += storage_base;  // storages are per shard
      }
      total += view.nbytes();
      root->entries.emplace_back(doc.arena->Str(name), doc.arena->Tensor(std::move(view)));
    }
    storage_base += storages;
    for (const std::string& name : names)
      if (!seen.count(name)) Fail(ErrorCode::kCorrupt, "tensor '" + name + "' is listed in shard '" + shard + "' but not in it");
    for (auto& w : part.warnings) doc.warnings.push_back("shard '" + shard + "': " + w);
    ContainerRecord rec;
    rec.name = shard;
    rec.size = rec.stored_size = part.file_size;
    rec.method = "file";
    doc.records.push_back(rec);
  }
  doc.format = "sharded " + (kind.empty() ? std::string("checkpoint") : kind);
  doc.root = root;
  doc.tensors = CollectTensors(root);
  doc.properties.emplace_back("shards", PropertyValue::Integer(static_cast<int64_t>(listed.size())));
  doc.properties.emplace_back("tensors", PropertyValue::Integer(static_cast<int64_t>(seen.size())));
  if (index.contains("metadata") && index["metadata"].is_object()) {
    for (const auto& [k, v] : index["metadata"].items()) {
      doc.properties.emplace_back("metadata." + k, v.is_string() ? v.get<std::string>() : v.dump());
      if (k == "total_size" && v.is_number_unsigned() && v.get<uint64_t>() != total) {
        doc.warnings.push_back("metadata.total_size says " + v.dump() + " bytes; the tensors hold " + std::to_string(total));
      }
    }
  }
  return doc;
}

}  // namespace trove
