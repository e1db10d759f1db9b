// Writing sharded checkpoints as the Hugging Face tools do: tensors in document order fill a
// shard until the next would pass the maximum (a tensor larger than the maximum gets a shard of
// its own), shards named model-00001-of-00003.safetensors / pytorch_model-00001-of-00003.bin,
// and an index with the tensors' total size and each tensor's shard (keys sorted, indented by
// 2, ASCII, a final newline, as transformers' save_pretrained writes it). A single shard is
// written as model.safetensors / pytorch_model.bin without an index, as they do.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/count_text.h"
#include "formats/tensor_only_values.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/pt_writer.h"
#include "trove/safetensors.h"

namespace trove {

uint64_t ParseShardSize(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  const std::map<std::string, uint64_t> units = {
      {"", 1}, {"B", 1}, {"KB", 1000}, {"MB", 1000'000}, {"GB", 1000'000'000}, {"TB", 1000'000'000'000},
      {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40}};
  auto it = units.find(unit);
  if (digits == 0 || it == units.end()) {
    Fail(ErrorCode::kUsage, "--max-shard-size takes a number and a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), not '" + text + "'");
  }
  // 15 digits are a petabyte in bytes: more than any shard, and std::stoull cannot overflow.
  uint64_t value = digits > 15 ? 0 : std::stoull(text.substr(0, digits)), bytes = 0;
  if (digits > 15 || __builtin_mul_overflow(value, it->second, &bytes) || bytes == 0) {
    Fail(ErrorCode::kUsage, "--max-shard-size '" + text + "' is out of range (1 byte to 15 digits of a unit)");
  }
  return bytes;
}

namespace {

bool SameBytes(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::ifstream x(a, std::ios::binary), y(b, std::ios::binary);
  char bx[1 << 14], by[1 << 14];
  while (x && y) {
    x.read(bx, sizeof bx);
    y.read(by, sizeof by);
    if (x.gcount() != y.gcount() || std::memcmp(bx, by, static_cast<size_t>(x.gcount())) != 0) return false;
  }
  return x.eof() && y.eof();
}

// ShardedWriteOptions::carried_files into the temporary tree, which Commit moves in with the shards.
void CarryFiles(const ShardedWriteOptions& options, const std::string& directory, const std::string& tree) {
  namespace fs = std::filesystem;
  for (const std::string& source : options.carried_files) {
    std::error_code ec;
    const fs::path name = fs::path(source).filename();
    const fs::path existing = fs::path(directory) / name;
    if (fs::exists(fs::symlink_status(existing, ec))) {
      // Never replaced: the user's own file (or the same one, converted into its own directory).
      if (options.note && !(fs::is_regular_file(existing, ec) && SameBytes(source, existing))) {
        options.note(existing.string() + " differs from " + source + " and was not written by trove: left as it is");
      }
      continue;
    }
    fs::copy_file(source, fs::path(tree) / name, fs::copy_options::none, ec);
    if (ec) Fail(ErrorCode::kIo, "copying " + source + " beside the shards: " + ec.message());
  }
}

// model-00002-of-00003.safetensors, or model.safetensors for a single shard, as the Hugging Face
// tools name them.
std::string ShardFileName(const std::string& stem, const std::string& ext, size_t index, size_t count) {
  if (count == 1) return stem + ext;
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, "-%05zu-of-%05zu", index + 1, count);
  return stem + suffix + ext;
}

// A name this writer gives in some sharding: stem + ext, stem-NNNNN-of-NNNNN + ext, or the index.
bool IsShardingName(const std::string& name, const std::string& stem, const std::string& ext) {
  if (name == stem + ext || name == stem + ext + ".index.json") return true;
  const std::string middle = "-NNNNN-of-NNNNN";
  if (name.size() != stem.size() + middle.size() + ext.size() || !name.starts_with(stem) || !name.ends_with(ext)) return false;
  for (size_t i = 0; i < middle.size(); ++i) {
    const char c = name[stem.size() + i];
    if (middle[i] == 'N' ? !std::isdigit(static_cast<unsigned char>(c)) : c != middle[i]) return false;
  }
  return true;
}

// Before anything is written: files of another sharding of the same naming (other shard counts,
// the single file or the index the new layout does not have) would be read with the new shards by
// tools that glob. save_pretrained deletes them; trove deletes no file it did not write, so it
// refuses, naming them, and writes nothing. A source of this command is left out (converted in
// place, it stays beside its shards, as it was).
void RefuseOtherShardings(const std::string& directory, const std::string& stem, const std::string& ext,
                          const std::set<std::string>& to_write) {
  std::vector<std::string> others;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (to_write.count(name) || !IsShardingName(name, stem, ext) || IsGuardedSource(it->path().string())) continue;
    others.push_back(name);
  }
  if (others.empty()) return;
  std::sort(others.begin(), others.end());
  throw Error(ErrorCode::kRefused, "holds " + FirstFew(others) + " of another sharding, which tools that read every shard would mix with the new ones; "
                                   "trove deletes no file it did not write: remove them, or write into another folder")
      .SetFile(directory);
}

}  // namespace

void WriteShardedCheckpoint(const Document& doc, const std::string& directory, const ShardedWriteOptions& options) {
  const Format target = options.shard_format;
  if (target != Format::kSafetensors && target != Format::kPt) {
    Fail(ErrorCode::kUsage, "--max-shard-size writes safetensors or pt shards (--to safetensors or --to pt)");
  }
  const uint64_t max = options.max_shard_bytes;
  if (max == 0) Fail(ErrorCode::kUsage, "--max-shard-size must be more than 0 bytes");
  // Names as the safetensors writer gives them; for .bin shards they are the state dict's keys.
  struct Item {
    std::string name;
    const TensorView* view;
  };
  std::vector<std::vector<Item>> shards;
  uint64_t current = 0, total = 0;
  std::vector<Item> open;
  RefuseOrDropValues(doc, "shards", options);
  for (const NamedTensor& t : doc.tensors) {
    const std::string name = FlatName(t.key);
    const uint64_t size = t.view->nbytes();
    total += size;
    if (size > max) {
      shards.push_back({{name, t.view}});
      continue;
    }
    if (current + size > max && !open.empty()) {
      shards.push_back(std::move(open));
      open.clear();
      current = 0;
    }
    open.push_back({name, t.view});
    current += size;
  }
  if (!open.empty() || shards.empty()) shards.push_back(std::move(open));

  const bool st = target == Format::kSafetensors;
  const std::string stem = st ? "model" : "pytorch_model", ext = st ? ".safetensors" : ".bin";
  std::set<std::string> to_write;
  for (size_t s = 0; s < shards.size(); ++s) to_write.insert(ShardFileName(stem, ext, s, shards.size()));
  if (shards.size() > 1) to_write.insert(stem + ext + ".index.json");
  if (std::filesystem::is_directory(directory)) RefuseOtherShardings(directory, stem, ext, to_write);
  // Into an existing directory (a model folder with its config.json, tokenizer and README) only
  // the shards and the index go; every other file there stays.
  AtomicDirectory out(directory, options.durability, OutputKind::kFilesInDirectory);
  nlohmann::json weight_map = nlohmann::json::object();
  SafetensorsWriteOptions shard_options = options;
  // Each shard's writer reports its own bytes; they map onto the shard's share of `total` (a
  // .bin shard may write a little more or less than its tensors' bytes: whole or shared storages).
  uint64_t before = 0, share = 0;
  if (options.progress) {
    shard_options.progress = [&](uint64_t done, uint64_t of) {
      // done <= of: the shard's fraction of its share (a progress figure; a double's rounding is invisible).
      const uint64_t part = of == 0 ? share : static_cast<uint64_t>(static_cast<double>(done) / static_cast<double>(of) *
                                                                     static_cast<double>(share));
      options.progress(before + part, total);
    };
  }
  PtWriteOptions pt_options;
  static_cast<WriteOptions&>(pt_options) = shard_options;
  for (size_t s = 0; s < shards.size(); ++s) {
    share = 0;
    for (const Item& item : shards[s]) share += item.view->nbytes();
    const std::string file = ShardFileName(stem, ext, s, shards.size());
    Document part;
    part.format = doc.format;
    part.path = doc.path;
    Value* root = part.arena->Dict("collections.OrderedDict");
    for (const Item& item : shards[s]) {
      if (weight_map.contains(item.name)) Fail(ErrorCode::kUnsupported, "a second tensor named '" + item.name + "'");
      weight_map[item.name] = file;
      root->entries.emplace_back(part.arena->Str(item.name), part.arena->Tensor(*item.view));
    }
    part.root = root;
    part.tensors = CollectTensors(root);
    const std::string path = (std::filesystem::path(out.path()) / file).string();
    WithFile(file, [&] {
      if (st) WriteSafetensors(part, path, shard_options);
      else WritePt(part, path, pt_options);
    });
    before += share;
  }
  CarryFiles(options, directory, out.path());
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    const std::string text = index.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
    const std::string name = stem + ext + ".index.json";
    AtomicFile file((std::filesystem::path(out.path()) / name).string(), options.durability);
    file.Write(text.data(), text.size());
    file.Commit();
    out.MoveLast(name);
  }
  out.Commit();
}

}  // namespace trove
