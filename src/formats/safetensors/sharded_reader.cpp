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
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/confined_directory.h"
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
// holds no mapping and no descriptor, and `cat` of one tensor maps one shard. The shard is opened
// again then by the same rule (core/confined_directory.h) and must be the same file, size and
// header.
class ShardMapping : public DeferredSource {
 public:
  ShardMapping(std::shared_ptr<const ConfinedDirectory> dir, std::string name, const ConfinedFile& file,
               std::string_view header)
      : dir_(std::move(dir)), name_(std::move(name)), path_(file.path), size_(file.size), identity_(file.identity),
        header_hash_(std::hash<std::string_view>()(header)), header_bytes_(header.size()) {}

  SharedBytes Produce() const override {
    return WithFile(path_, [&] {
      ConfinedFile again = dir_->RequireFile(name_);
      if (again.identity != identity_ || again.size != size_) {
        Fail(ErrorCode::kIo, "changed since the sharded checkpoint was opened (another file or size)");
      }
      auto file = MappedFile::FromDescriptor(again.fd.release(), path_, again.size);
      // The views were made from the header read at open: the file mapped now must still have it.
      if (file->size() < header_bytes_ ||
          std::hash<std::string_view>()(std::string_view(reinterpret_cast<const char*>(file->data()), header_bytes_)) != header_hash_) {
        Fail(ErrorCode::kIo, "changed since the sharded checkpoint was opened (its header differs)");
      }
      return file->bytes();
    });
  }

 private:
  std::shared_ptr<const ConfinedDirectory> dir_;
  std::string name_;
  std::string path_;
  uint64_t size_;
  FileIdentity identity_;
  size_t header_hash_;
  uint64_t header_bytes_;
};

// What a shard's first bytes say it is: a torch.save file (zip or legacy), a .safetensors file,
// or neither (an index, say: a shard is never an index, so indexes cannot name each other).
enum class ShardKind { kTorch, kSafetensors, kNeither };

ShardKind KindOfShard(const uint8_t* first, uint64_t got, uint64_t size, std::string_view name) {
  std::string_view head(reinterpret_cast<const char*>(first), static_cast<size_t>(std::min<uint64_t>(got, 64)));
  if (head.starts_with(std::string_view("PK\x03\x04", 4)) || IsLegacyPtStart(first, got)) return ShardKind::kTorch;
  // By name too when the content is no JSON index: a damaged header gets the reader's own error.
  if (LooksLikeSafetensors(head, size)) return ShardKind::kSafetensors;
  const size_t text = head.find_first_not_of(" \t\r\n");
  if (name.ends_with(".safetensors") && !(text != std::string_view::npos && head[text] == '{')) {
    return ShardKind::kSafetensors;
  }
  return ShardKind::kNeither;
}

// A shard is a .safetensors file or a torch.save file (zip or legacy), told apart by content as
// trove::Open would; the file's name prefixes any error, as it does there. A torch.save shard is
// mapped to be parsed (its zip directory is at its end); a .safetensors one is mapped lazily.
Document ReadShard(const std::shared_ptr<const ConfinedDirectory>& dir, const std::string& name, ConfinedFile file,
                   const ReadOptions& options) {
  const std::string path = file.path;
  return WithFile(path, [&] {
    const uint64_t size = file.size;
    uint8_t first[256] = {};  // enough for a legacy file's first pickle (the magic number)
    const uint64_t got = std::min<uint64_t>(size, sizeof first);
    PreadExactly(file.fd.get(), first, got, 0);
    switch (KindOfShard(first, got, size, name)) {
      case ShardKind::kTorch:
        return ReadPt(MappedFile::FromDescriptor(file.fd.release(), path, size), options);
      case ShardKind::kNeither:
        if (LooksLikeShardIndex(std::string_view(reinterpret_cast<const char*>(first), static_cast<size_t>(got)))) {
          Fail(ErrorCode::kUnsupported, "an index (JSON), not a .safetensors or torch.save shard: an index never names another");
        }
        Fail(ErrorCode::kUnsupported, "not a .safetensors or torch.save shard");
      case ShardKind::kSafetensors:
        break;
    }
    const uint64_t n = SafetensorsHeaderLength(first, size);
    std::vector<uint8_t> header(static_cast<size_t>(8 + n));
    PreadExactly(file.fd.get(), header.data(), header.size(), 0);
    auto source = std::make_shared<ShardMapping>(dir, name, file,
                                                 std::string_view(reinterpret_cast<const char*>(header.data()), header.size()));
    return ReadSafetensorsParts(path, size, header.data(), SharedBytes::LazyMapped(std::move(source), size), options);
  });
}

// The parts of an index trove uses, read by a SAX pass (a DOM of a million-entry weight map would
// take gigabytes): each entry is its tensor name and the number of its shard.
struct ShardIndex {
  std::vector<std::string> shards;  // shard file names, in order of first mention
  struct Entry {
    std::string tensor;
    uint32_t shard;
  };
  std::vector<Entry> entries;
  std::vector<std::pair<std::string, nlohmann::json>> metadata;
};

// Index documents are two levels deep ({"metadata": {...}, "weight_map": {...}}); a metadata value
// may be one level deeper. Anything deeper is refused while parsing.
constexpr int kMaxIndexDepth = 3;

class IndexParser : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit IndexParser(ShardIndex& out) : out_(out) {}

  bool null() override { return Scalar(nullptr); }
  bool boolean(bool v) override { return Scalar(v); }
  bool number_integer(number_integer_t v) override { return Scalar(v); }
  bool number_unsigned(number_unsigned_t v) override { return Scalar(v); }
  bool number_float(number_float_t v, const string_t&) override { return Scalar(v); }
  bool binary(binary_t&) override { return Scalar(nullptr); }
  bool string(string_t& v) override {
    if (depth_ == 2 && section_ == Section::kWeightMap) {
      auto [it, added] = shard_ids_.try_emplace(v, static_cast<uint32_t>(out_.shards.size()));
      if (added) out_.shards.push_back(v);
      out_.entries.push_back({std::move(key_), it->second});
      return true;
    }
    return Scalar(std::move(v));
  }
  bool start_object(std::size_t) override { return Open(false); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(true); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    if (depth_ == 1) {
      section_ = k == "weight_map" ? Section::kWeightMap : k == "metadata" ? Section::kMetadata : Section::kOther;
      if (section_ == Section::kWeightMap) saw_weight_map_ = true;
    } else if (depth_ == 2 && section_ == Section::kMetadata) {
      out_.metadata.emplace_back(k, nullptr);
    } else if (depth_ == 2 && section_ == Section::kWeightMap) {
      key_ = std::move(k);
    } else if (depth_ == 3 && section_ == Section::kMetadata) {
      key_ = std::move(k);
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    // Only where: the parser's own text quotes what it read, and a file that is no index (a link
    // to something else, a secret) must not have its bytes shown.
    error_ = "not valid JSON (at byte " + std::to_string(position) + ")";
    return false;
  }

  bool saw_weight_map() const { return saw_weight_map_; }
  const std::string& error() const { return error_; }

 private:
  enum class Section { kNone, kMetadata, kWeightMap, kOther };

  template <class T>
  bool Scalar(T&& v) {
    if (depth_ == 0) return Shape("not a JSON object: not a sharded checkpoint index");
    if (depth_ == 2 && section_ == Section::kWeightMap) return Shape("tensor '" + key_ + "': its shard is not a file name");
    if (depth_ == 1 && section_ == Section::kWeightMap) return Shape("\"weight_map\" is not an object");
    if (depth_ >= 2 && section_ == Section::kMetadata && !out_.metadata.empty()) {
      nlohmann::json& slot = out_.metadata.back().second;
      if (depth_ == 2) slot = nlohmann::json(std::forward<T>(v));
      else if (slot.is_array()) slot.push_back(nlohmann::json(std::forward<T>(v)));
      else if (slot.is_object()) slot[key_] = nlohmann::json(std::forward<T>(v));
    }
    return true;
  }
  bool Open(bool array) {
    if (depth_ == 0 && array) return Shape("not a JSON object: not a sharded checkpoint index");
    if (depth_ == 1 && section_ == Section::kWeightMap && array) return Shape("\"weight_map\" is not an object");
    if (depth_ == 2 && section_ == Section::kWeightMap) return Shape("tensor '" + key_ + "': its shard is not a file name");
    if (depth_ == 2 && section_ == Section::kMetadata && !out_.metadata.empty()) {
      out_.metadata.back().second = array ? nlohmann::json::array() : nlohmann::json::object();
    }
    if (++depth_ > kMaxIndexDepth) return Shape("nested deeper than an index is");
    return true;
  }
  bool Close() {
    --depth_;
    if (depth_ <= 1) section_ = depth_ == 1 ? section_ : Section::kNone;
    return true;
  }
  bool Shape(std::string why) {
    error_ = std::move(why);
    return false;
  }

  ShardIndex& out_;
  int depth_ = 0;
  Section section_ = Section::kNone;
  bool saw_weight_map_ = false;
  std::string key_;
  std::unordered_map<std::string, uint32_t> shard_ids_;
  std::string error_;
};

// Reads the index the user named (or found in the directory they named), never blocking and
// never following anything but what they named, and parses it.
ShardIndex ReadIndex(const ConfinedFile& file) {
  if (file.size > kMaxShardIndexBytes) {
    Fail(ErrorCode::kLimit, std::to_string(file.size) + " bytes exceed the " + std::to_string(kMaxShardIndexBytes) +
                                "-byte cap (kMaxShardIndexBytes)");
  }
  std::string text(static_cast<size_t>(file.size), '\0');
  PreadExactly(file.fd.get(), reinterpret_cast<uint8_t*>(text.data()), text.size(), 0);
  ShardIndex index;
  IndexParser parser(index);
  const bool ok = nlohmann::json::sax_parse(text, &parser, nlohmann::json::input_format_t::json, /*strict=*/true);
  if (!ok) Fail(ErrorCode::kCorrupt, parser.error().empty() ? std::string("not valid JSON") : parser.error());
  if (!parser.saw_weight_map()) Fail(ErrorCode::kCorrupt, "no \"weight_map\" object: not a sharded checkpoint index");
  return index;
}

// The index file and the directory its shards are named in.
struct OpenedIndex {
  std::shared_ptr<const ConfinedDirectory> dir;
  ConfinedFile file;
};

// An index the user named is opened as any file they name; one found in the directory they
// named is a file that directory names, opened by the rule (a link out of it is refused).
OpenedIndex OpenIndex(const std::string& index_path, IndexNamedBy named_by) {
  const fs::path p(index_path);
  OpenedIndex out;
  out.dir = ConfinedDirectory::Open(p.parent_path().empty() ? std::string(".") : p.parent_path().string());
  out.file = named_by == IndexNamedBy::kUser ? OpenUserFile(index_path) : out.dir->RequireFile(p.filename().string());
  return out;
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

bool LooksLikeShardIndex(std::string_view head) {
  const size_t at = head.find_first_not_of(" \t\r\n");
  return at != std::string_view::npos && head[at] == '{';
}

std::vector<std::string> ShardFiles(const std::string& index_path, IndexNamedBy named_by) {
  const OpenedIndex opened = WithFile(index_path, [&] { return OpenIndex(index_path, named_by); });
  const ShardIndex index = WithFile(index_path, [&] { return ReadIndex(opened.file); });
  std::vector<std::string> names;
  for (const std::string& shard : index.shards) {
    WithFile(index_path, [&] { ConfinedDirectory::CheckName(shard); });
    names.push_back(shard);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Document ReadShardedCheckpoint(const std::string& index_path, const ReadOptions& options, IndexNamedBy named_by) {
  const OpenedIndex opened = WithFile(index_path, [&] { return OpenIndex(index_path, named_by); });
  ShardIndex index = WithFile(index_path, [&] { return ReadIndex(opened.file); });
  // Shards in file-name order; a shard's listed tensors sorted by name, for lookups.
  std::vector<uint32_t> order(index.shards.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return index.shards[a] < index.shards[b]; });
  std::sort(index.entries.begin(), index.entries.end(), [](const ShardIndex::Entry& a, const ShardIndex::Entry& b) {
    return a.shard != b.shard ? a.shard < b.shard : a.tensor < b.tensor;
  });
  for (size_t i = 1; i < index.entries.size(); ++i) {
    if (index.entries[i].tensor == index.entries[i - 1].tensor && index.entries[i].shard == index.entries[i - 1].shard) {
      throw Error(ErrorCode::kCorrupt, "tensor '" + index.entries[i].tensor + "' is listed twice").SetFile(index_path);
    }
  }
  auto listed = [&](uint32_t shard) {
    auto lo = std::lower_bound(index.entries.begin(), index.entries.end(), shard,
                               [](const ShardIndex::Entry& e, uint32_t s) { return e.shard < s; });
    auto hi = std::upper_bound(lo, index.entries.end(), shard,
                               [](uint32_t s, const ShardIndex::Entry& e) { return s < e.shard; });
    return std::make_pair(lo, hi);
  };

  Document doc;
  doc.path = index_path;
  doc.file_size = opened.file.size;
  Value* root = doc.arena->Dict("dict");
  std::unordered_set<std::string_view> seen;
  int64_t storage_base = 0;
  uint64_t total = 0;
  std::string kind;
  for (size_t position = 1; position <= order.size(); ++position) {
    const uint32_t id = order[position - 1];
    const std::string& shard = index.shards[id];
    const auto [first, last] = listed(id);
    const std::string& example = first->tensor;
    // A shard the rule refuses or that is missing is the index's fault: the error names the index.
    ConfinedFile file = WithFile(index_path, [&] {
      return WithContext("shard of tensor '" + example + "'", [&] { return opened.dir->RequireFile(shard); });
    });
    // Which of the checkpoint's shards it is, as a download is counted ("shard 3 of 5").
    Document part = WithContext("shard " + std::to_string(position) + " of " + std::to_string(order.size()),
                                [&] { return ReadShard(opened.dir, shard, std::move(file), options); });
    if (kind.empty()) kind = part.format;
    if (part.format != kind) Fail(ErrorCode::kCorrupt, "shard '" + shard + "' is " + part.format + ", the others " + kind);
    if (!part.root || part.root->kind != ValueKind::kDict) Fail(ErrorCode::kCorrupt, "shard '" + shard + "' is not a dict of tensors");
    int64_t storages = 0;
    size_t found = 0;
    for (const auto& [key, value] : part.root->entries) {
      const std::string name = KeyComponentText(*key);
      if (value->kind != ValueKind::kTensor) {
        doc.warnings.push_back("shard '" + shard + "': '" + name + "' is not a tensor; left out");
        continue;
      }
      auto at = std::lower_bound(first, last, name, [](const ShardIndex::Entry& e, const std::string& n) { return e.tensor < n; });
      if (at == last || at->tensor != name) {
        Fail(ErrorCode::kCorrupt, "shard '" + shard + "' holds tensor '" + name + "', which the weight map does not list there");
      }
      if (!seen.insert(at->tensor).second) Fail(ErrorCode::kCorrupt, "tensor '" + name + "' appears twice in shard '" + shard + "'");
      ++found;
      TensorView view = *value->tensor;
      // The storage is named by its shard (`trove info`'s storage column is then the shard
      // column): a safetensors tensor is its own storage, a .pt shard's storages are its records.
      view.storage_key = kind == "safetensors" ? shard : shard + ":" + view.storage_key;
      if (view.storage_index >= 0) {
        storages = std::max(storages, view.storage_index + 1);
        view.storage_index += storage_base;  // storages are per shard
      }
      total += view.nbytes();
      root->entries.emplace_back(doc.arena->Str(name), doc.arena->Tensor(std::move(view)));
    }
    storage_base += storages;
    if (found != static_cast<size_t>(last - first)) {
      for (auto it = first; it != last; ++it)
        if (!seen.count(it->tensor)) Fail(ErrorCode::kCorrupt, "tensor '" + it->tensor + "' is listed in shard '" + shard + "' but not in it");
    }
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
  doc.properties.emplace_back("shards", PropertyValue::Integer(static_cast<int64_t>(index.shards.size())));
  doc.properties.emplace_back("tensors", PropertyValue::Integer(static_cast<int64_t>(seen.size())));
  for (const auto& [k, v] : index.metadata) {
    doc.properties.emplace_back("metadata." + k, v.is_string() ? v.get<std::string>() : v.dump());
    if (k == "total_size" && v.is_number_unsigned() && v.get<uint64_t>() != total) {
      doc.warnings.push_back("metadata.total_size says " + v.dump() + " bytes; the tensors hold " + std::to_string(total));
    }
  }
  return doc;
}

}  // namespace trove
