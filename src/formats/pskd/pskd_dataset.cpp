// Datasets of many .psk.d shards: expanding sources (files, manifests, patterns), checking the
// shards agree on one layout, and mapping each shard when it is first read.
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/confined_directory.h"
#include "trove/pskd_dataset.h"
#include "trove/shared_bytes.h"

namespace trove::pskd {
namespace fs = std::filesystem;

namespace {

bool IsPattern(const std::string& source) { return source.find_first_of("*?[") != std::string::npos; }

// A manifest is told from a shard by its first bytes: a shard starts with the magic, JSON with '{'.
bool LooksLikeManifest(const ConfinedFile& file) {
  char head[64] = {};
  const uint64_t n = std::min<uint64_t>(file.size, sizeof head);
  PreadExactly(file.fd.get(), reinterpret_cast<uint8_t*>(head), n, 0);
  const std::string_view text(head, static_cast<size_t>(n));
  const size_t start = text.find_first_not_of(" \t\r\n");
  return start != std::string_view::npos && text[start] == '{';
}

std::string ReadManifestText(const ConfinedFile& file) {
  if (file.size > kMaxManifestBytes) {
    throw Error(ErrorCode::kLimit, "a manifest of " + std::to_string(file.size) + " bytes (the cap is " +
                                       std::to_string(kMaxManifestBytes) + ", kMaxManifestBytes)")
        .SetFile(file.path);
  }
  std::string text(static_cast<size_t>(file.size), '\0');
  WithFile(file.path, [&] { PreadExactly(file.fd.get(), reinterpret_cast<uint8_t*>(text.data()), text.size(), 0); });
  return text;
}

std::vector<std::string> Glob(const std::string& pattern) {
  glob_t g{};
  // Sorted below by bytes: glob's own order follows the locale's collation, which differs by machine.
  const int r = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> out;
  if (r == 0) out.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  if (r == GLOB_NOMATCH) throw Error(ErrorCode::kNotFound, "no file matches '" + pattern + "'").SetSpecCode(9002);
  if (r != 0) FailPskd(PskdCode::kNotPskd, "cannot read the files matching '" + pattern + "'");
  std::sort(out.begin(), out.end());
  return out;
}

void RefuseFolder(const std::string& path, const std::string& how) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    FailPskd(PskdCode::kNotPskd, path + ": a folder, not a .psk.d file (" + how + ")");
  }
}

// Same leaves (kinds, bounds, shapes, encodings) in the same tuple structure; axis names and the
// spelling bool/idx[2] are documentation and may differ.
bool SameLayout(const SampleType& a, const SampleType& b) {
  if (a.leaves.size() != b.leaves.size() || a.nodes.size() != b.nodes.size()) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const TypeNode &x = a.nodes[i], &y = b.nodes[i];
    if (x.is_tuple != y.is_tuple || x.leaf != y.leaf || x.children != y.children) return false;
  }
  for (size_t i = 0; i < a.leaves.size(); ++i) {
    const Leaf &x = a.leaves[i], &y = b.leaves[i];
    if (x.kind != y.kind || x.bound != y.bound || x.encoding != y.encoding || x.shape() != y.shape()) return false;
  }
  return true;
}

std::string TypeWithEncodings(const SampleType& type) {
  std::string text = type.text;
  if (type.has_narrow_leaf()) {
    text += " (encodings ";
    for (size_t k = 0; k < type.leaves.size(); ++k) text += (k ? ", " : "") + std::string(EncodingName(type.leaves[k].encoding));
    text += ")";
  }
  return text;
}

// Where a shard comes from: a path the user gave (a file or a pattern's match), or a name a
// manifest gave, opened only by the rule for files a file names (core/confined_directory.h)
// inside the manifest's folder.
struct ShardSource {
  static ShardSource Named(std::string path) {
    ShardSource s;
    s.path = std::move(path);
    return s;
  }
  std::string path;
  std::shared_ptr<const ConfinedDirectory> manifest_dir;  // set for a manifest's entry
  std::string name;                                       // the manifest's name for it
  std::string manifest;                                   // the manifest's path
};

// The shard opened (by the rule when a manifest named it), nullopt when it does not exist.
std::optional<ConfinedFile> OpenShardSource(const ShardSource& source) {
  if (source.manifest_dir) {
    return WithFile(source.manifest, [&] { return source.manifest_dir->OpenFile(source.name); });
  }
  try {
    return OpenUserFile(source.path);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotFound) return std::nullopt;
    throw;
  }
}

// Mapped without keeping a descriptor: a dataset of thousands of shards reads only through the
// mappings.
std::shared_ptr<MappedFile> MapShard(const ShardSource& source) {
  std::optional<ConfinedFile> file;
  try {
    file = OpenShardSource(source);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kRefused) throw;
    FailPskd(PskdCode::kNotPskd, "cannot read " + e.message());
  }
  if (!file) FailPskd(PskdCode::kNotPskd, "cannot read " + source.path + ": " + std::strerror(ENOENT));
  return MappedFile::FromDescriptor(file->fd.release(), source.path, file->size, /*keep_descriptor=*/false);
}

std::vector<ShardSource> ExpandSources(const std::vector<std::string>& sources);

}  // namespace

std::vector<std::string> ParseShardManifest(std::string_view text) {
  nlohmann::json manifest;
  try {
    // An object holding an array of strings: anything deeper is refused while parsing.
    manifest = nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > 2) Fail(ErrorCode::kCorrupt, "nested deeper than a manifest is");
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorCode::kCorrupt, std::string("not a shard manifest (not valid JSON: ") + e.what() + ")");
  }
  if (!manifest.is_object() || !manifest.contains("shards") || !manifest["shards"].is_array()) {
    Fail(ErrorCode::kCorrupt, "not a shard manifest (no \"shards\" array)");
  }
  const nlohmann::json& shards = manifest["shards"];
  if (shards.empty()) Fail(ErrorCode::kCorrupt, "the manifest lists no shard");
  if (shards.size() > kMaxShards) {
    Fail(ErrorCode::kLimit, "the manifest lists " + std::to_string(shards.size()) + " shards (the cap is " +
                                std::to_string(kMaxShards) + ", kMaxShards)");
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string where = "shards[" + std::to_string(i) + "]";
    if (!shards[i].is_string()) Fail(ErrorCode::kCorrupt, where + " is not a path");
    const std::string name = shards[i].get<std::string>();
    bool plain = !name.empty() && name.front() != '/' && name.find('\\') == std::string::npos &&
                 name.find('\0') == std::string::npos;
    for (size_t start = 0; plain && start <= name.size();) {
      const size_t slash = std::min(name.find('/', start), name.size());
      const std::string_view part(name.data() + start, slash - start);
      plain = !part.empty() && part != "." && part != "..";
      start = slash + 1;
    }
    if (!plain) {
      throw Error(ErrorCode::kCorrupt, "'" + name + "' is not a path of plain names inside the manifest's folder")
          .SetEntry(where);
    }
    out.push_back(name);
  }
  return out;
}

namespace {

std::vector<ShardSource> ExpandSources(const std::vector<std::string>& sources) {
  if (sources.empty()) Fail(ErrorCode::kUsage, "a dataset needs at least one .psk.d file");
  std::vector<ShardSource> out;
  for (const std::string& source : sources) {
    struct stat st {};
    if (::stat(source.c_str(), &st) != 0) {
      if (!IsPattern(source)) {
        out.push_back(ShardSource::Named(source));  // reading it says why it cannot be read
        continue;
      }
      for (std::string& match : Glob(source)) {
        RefuseFolder(match, "matched by '" + source + "'");
        out.push_back(ShardSource::Named(std::move(match)));
      }
    } else if (S_ISDIR(st.st_mode)) {
      RefuseFolder(source, "name its shards with a pattern such as '" + source + "/*.psk.d', or a manifest");
    } else if (S_ISREG(st.st_mode)) {
      ConfinedFile file = OpenUserFile(source);
      if (!LooksLikeManifest(file)) {
        out.push_back(ShardSource::Named(source));
        continue;
      }
      const std::vector<std::string> names = WithFile(source, [&] { return ParseShardManifest(ReadManifestText(file)); });
      const fs::path folder = fs::path(source).parent_path();
      auto dir = ConfinedDirectory::Open(folder.empty() ? std::string(".") : folder.string());
      for (const std::string& name : names) out.push_back({(folder / name).string(), dir, name, source});
    } else {
      out.push_back(ShardSource::Named(source));  // reading it says what it is
    }
    if (out.size() > kMaxShards) {
      Fail(ErrorCode::kLimit, "more than " + std::to_string(kMaxShards) + " shards (kMaxShards)");
    }
  }
  // A shard named twice would be read twice an epoch: almost surely a pattern overlapping a list.
  // Opening a pipe or a device to read its header could wait forever for a writer: the rule and
  // OpenUserFile refuse anything but a regular file before reading.
  std::map<FileIdentity, const std::string*> seen;
  for (const ShardSource& s : out) {
    std::optional<ConfinedFile> file;
    try {
      file = OpenShardSource(s);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kRefused) throw;
      if (e.code() == ErrorCode::kUnsupported) FailPskd(PskdCode::kNotPskd, s.path + ": not a regular file");
      continue;  // reading it says why it cannot be read
    }
    if (!file) continue;
    auto [it, fresh] = seen.emplace(file->identity, &s.path);
    if (!fresh) {
      Fail(ErrorCode::kRefused, "'" + *it->second + "' and '" + s.path + "' are the same file: a dataset lists each shard once");
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> ExpandShardSources(const std::vector<std::string>& sources) {
  std::vector<std::string> paths;
  for (ShardSource& s : ExpandSources(sources)) paths.push_back(std::move(s.path));
  return paths;
}

// --- Dataset --------------------------------------------------------------------------------

struct Dataset::State {
  struct Shard {
    uint64_t file_size = 0;
    Header header;
    mutable std::once_flag mapped;
    mutable std::unique_ptr<PskdFile> file;           // set once, under `mapped`
    mutable std::atomic<const uint8_t*> data{nullptr};  // its sample 0, once mapped
  };
  SampleType type;
  uint64_t count = 0;
  std::vector<ShardInfo> infos;
  std::vector<ShardSource> sources;  // how to open shard k again (empty for Dataset::Of)
  std::vector<std::unique_ptr<Shard>> shards;

  void Add(std::string path, Header header, uint64_t file_size) {
    auto shard = std::make_unique<Shard>();
    shard->file_size = file_size;
    shard->header = std::move(header);
    ShardInfo info;
    info.path = std::move(path);
    info.count = shard->header.count;
    info.first = count;
    if (info.count > UINT64_MAX - count) Fail(ErrorCode::kLimit, "more than 2^64 samples");
    count += info.count;
    infos.push_back(std::move(info));
    shards.push_back(std::move(shard));
  }
};

Dataset Dataset::Open(const std::vector<std::string>& sources) {
  std::vector<ShardSource> expanded = ExpandSources(sources);
  auto state = std::make_shared<State>();
  for (const ShardSource& source : expanded) {
    const std::string& path = source.path;
    // Mapped for the header, unmapped again: an open dataset holds neither mappings nor descriptors.
    std::shared_ptr<MappedFile> mapped = MapShard(source);
    const uint64_t size = mapped->size();
    PskdFile file = PskdFile::FromMapped(std::move(mapped));
    file.RequireLayout();
    if (state->shards.empty()) {
      state->type = file.type();
    } else if (!SameLayout(state->type, file.type())) {
      FailPskd(PskdCode::kLayout, path + " holds samples of type " + TypeWithEncodings(file.type()) + ", " +
                                      state->infos.front().path + " of type " + TypeWithEncodings(state->type) +
                                      ": the shards of a dataset have one sample type");
    }
    state->Add(path, file.header(), size);
  }
  state->sources = std::move(expanded);
  Dataset d;
  d.state_ = std::move(state);
  return d;
}

Dataset Dataset::Of(PskdFile file) {
  file.RequireLayout();
  auto state = std::make_shared<State>();
  state->type = file.type();
  state->Add(file.name(), file.header(), file.bytes().size());
  State::Shard& shard = *state->shards.back();
  shard.file = std::make_unique<PskdFile>(std::move(file));
  std::call_once(shard.mapped, [] {});
  shard.data.store(shard.file->bytes().data() + shard.header.data_offset, std::memory_order_release);
  Dataset d;
  d.state_ = std::move(state);
  return d;
}

const SampleType& Dataset::type() const { return state_->type; }
uint64_t Dataset::count() const { return state_->count; }
const std::vector<ShardInfo>& Dataset::shards() const { return state_->infos; }

std::pair<size_t, uint64_t> Dataset::Locate(uint64_t index) const {
  const State& s = *state_;
  if (index >= s.count) {
    FailPskd(PskdCode::kTruncated, "sample " + std::to_string(index) + " is beyond the count " + std::to_string(s.count) +
                                       (s.infos.size() == 1 ? " of " + s.infos[0].path : " of the dataset"));
  }
  if (s.infos.size() == 1) return {0, index};
  // The last shard starting at or before the index (empty shards start where the next one does).
  auto it = std::upper_bound(s.infos.begin(), s.infos.end(), index,
                             [](uint64_t i, const ShardInfo& info) { return i < info.first; });
  const size_t k = static_cast<size_t>(std::prev(it) - s.infos.begin());
  return {k, index - s.infos[k].first};
}

const PskdFile& Dataset::Shard(size_t k) const {
  const State::Shard& shard = *state_->shards.at(k);
  std::call_once(shard.mapped, [&] {
    const std::string& path = state_->infos[k].path;
    std::shared_ptr<MappedFile> mapped = MapShard(state_->sources.at(k));
    // Replaced or rewritten since Open: its samples may no longer be where the index says. A
    // size other than Open's says so before its header is parsed again (a file cut short since
    // then has changed, whatever its header now claims).
    if (mapped->size() != shard.file_size) FailChangedWhileRead(path);
    auto file = std::make_unique<PskdFile>(PskdFile::FromMapped(std::move(mapped)));
    const Header& h = file->header();
    if (h.count != shard.header.count || h.data_offset != shard.header.data_offset ||
        !SameLayout(h.type, shard.header.type)) {
      FailChangedWhileRead(path);
    }
    shard.file = std::move(file);
    shard.data.store(shard.file->bytes().data() + h.data_offset, std::memory_order_release);
  });
  return *shard.file;
}

std::span<const uint8_t> Dataset::Sample(uint64_t index) const {
  const auto [k, local] = Locate(index);
  const State::Shard& shard = *state_->shards[k];
  const uint8_t* data = shard.data.load(std::memory_order_acquire);
  if (data == nullptr) {
    Shard(k);
    data = shard.data.load(std::memory_order_acquire);
  }
  const uint64_t sample = state_->type.sample_bytes;
  return {data + local * sample, static_cast<size_t>(sample)};
}

void Dataset::CheckIndices(uint64_t index) const {
  const auto [k, local] = Locate(index);
  if (state_->infos.size() == 1) return Shard(k).CheckIndices(local);
  WithContext("dataset sample " + std::to_string(index), [&, k = k, local = local] { Shard(k).CheckIndices(local); });
}

}  // namespace trove::pskd
