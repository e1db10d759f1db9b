// formats/safetensors/sharded_reader.h: sharded checkpoints as one document.
//
// An index JSON ({"metadata": {"total_size": N}, "weight_map": {tensor: shard file}}) names the
// shard (.safetensors or torch .bin) of every tensor. The document's root is a flat dict of all
// tensors, shard by shard in file-name order; records list the shards. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trove/document.h"

namespace trove {

// Largest index file read: real ones are well under 1 MB (a name and a file name per tensor);
// the cap bounds the JSON parse.
inline constexpr uint64_t kMaxShardIndexBytes = 64ull << 20;

// The index file inside a directory (model.safetensors.index.json first, then
// pytorch_model.bin.index.json), or "" when there is none or the directory is a tensordict.
std::string FindShardIndex(const std::string& directory);
bool IsShardIndexName(const std::string& path);  // ends with ".index.json"

// Every tensor of the weight map must be in its shard and every tensor of a shard listed for it;
// shard names must be plain file names in the index's directory (a link must not lead out).
// Throws Error naming the shard and tensor otherwise.
Document ReadShardedCheckpoint(const std::string& index_path, const ReadOptions& options);
// The paths of the shards an index names, each checked as above, sorted, once each.
std::vector<std::string> ShardFiles(const std::string& index_path);

}  // namespace trove
