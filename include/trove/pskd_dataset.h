// trove/pskd_dataset.h: one dataset over one or many .psk.d shards of one sample type.
//
// A Dataset is its shards end to end: global sample i is sample i - first of the shard holding it,
// so the pipeline indexes and shuffles the whole dataset as one file. Opening reads each shard's
// header (its mapping is dropped again), checks every shard against the first one's layout (E9005
// naming both) and keeps no descriptor open; a shard is mapped, without a descriptor, the first time
// one of its samples is read, and stays mapped until the last copy of the Dataset goes. Sources
// are .psk.d files, shard manifests and glob patterns (docs/pskd.md, "Datasets of many files").
// A Dataset is an immutable value (copies share the shards and their mappings); any number of
// threads may read samples at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trove/pskd.h"

namespace trove::pskd {

// Each mapped shard is one memory mapping, and Linux allows 65530 per process by default
// (vm.max_map_count): half of them is far beyond any real dataset and leaves the rest to the program.
inline constexpr size_t kMaxShards = size_t{1} << 15;
// A manifest is a list of names: 16 MiB holds the cap's worth of long ones.
inline constexpr uint64_t kMaxManifestBytes = uint64_t{16} << 20;

struct ShardInfo {
  std::string path;
  uint64_t count = 0;  // samples in the shard
  uint64_t first = 0;  // global index of its sample 0
};

// The shards a manifest lists, in order. A manifest is a JSON object whose "shards" member is an
// array of paths relative to the manifest's folder, each made of plain names (no "", ".", "..",
// leading "/" or backslash); other members are ignored. Error(kCorrupt) naming the entry for
// anything else; Error(kLimit) beyond kMaxShards. Reads nothing but the text.
std::vector<std::string> ParseShardManifest(std::string_view text);

// The shard files `sources` name, in order: a .psk.d file names itself; a manifest (a file whose
// first non-blank byte is '{') its shards, resolved in its folder, where links must stay; a
// pattern with * ? or [ that is not itself a file, the files it matches in the byte order of their
// paths (the same on every machine, whatever the locale). E9002 for a file that is neither, a
// folder, or a pattern matching nothing (then also ErrorCode kNotFound); kRefused for a manifest
// entry leading out of its folder or a file named twice (it would be read twice an epoch).
std::vector<std::string> ExpandShardSources(const std::vector<std::string>& sources);

class Dataset {
 public:
  // ExpandShardSources, then every shard's header. E9001 for a params shard, E9005 for a shard of
  // another layout than the first (naming both files and types), kLimit beyond kMaxShards.
  static Dataset Open(const std::vector<std::string>& sources);
  static Dataset Open(const std::string& source) { return Open(std::vector<std::string>{source}); }
  // One file already open (bytes in memory, tests): its only shard.
  static Dataset Of(PskdFile file);

  const SampleType& type() const;
  uint64_t count() const;
  const std::vector<ShardInfo>& shards() const;
  // The shard holding global sample `index`, and the sample's index in it. E9003 beyond count().
  std::pair<size_t, uint64_t> Locate(uint64_t index) const;
  // Shard k's file, mapped on first use. Error(kIo, "changed while being read") naming the file
  // when its header or size is no longer what Open read.
  const PskdFile& Shard(size_t k) const;
  // The bytes of global sample `index` (a view into its shard's mapping). E9003 beyond count().
  std::span<const uint8_t> Sample(uint64_t index) const;
  // Every index of global sample `index` below its bound, else E9004 naming the shard, the sample
  // in it and in the dataset, the leaf and the element.
  void CheckIndices(uint64_t index) const;

 private:
  struct State;
  std::shared_ptr<const State> state_;
};

}  // namespace trove::pskd
