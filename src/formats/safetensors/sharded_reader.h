// formats/safetensors/sharded_reader.h: sharded checkpoints as one document.
//
// An index JSON ({"metadata": {"total_size": N}, "weight_map": {tensor: shard file}}) names the
// shard (.safetensors or torch .bin) of every tensor. The document's root is a flat dict of all
// tensors, shard by shard in file-name order; records list the shards. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trove/convert_options.h"
#include "trove/document.h"
#include "trove/safetensors.h"

namespace trove {

// Largest index file read: real ones are well under 1 MB (a name and a file name per tensor);
// the cap bounds the JSON parse.
inline constexpr uint64_t kMaxShardIndexBytes = 64ull << 20;

// The index file inside a directory (model.safetensors.index.json first, then
// pytorch_model.bin.index.json), or "" when there is none or the directory is a tensordict.
std::string FindShardIndex(const std::string& directory);
bool IsShardIndexName(const std::string& path);  // ends with ".index.json"
// Whether a file's first bytes can be an index (a JSON object): a file is an index by its
// content, never by its name alone.
bool LooksLikeShardIndex(std::string_view head);

// Every tensor of the weight map must be in its shard and every tensor of a shard listed for it.
// Shards are opened by the one rule for files a file names (core/confined_directory.h: inside
// the index's directory, no link out of it but the Hugging Face cache's blobs, regular files
// only) and must be .safetensors or torch.save files by content: an index is never a shard, so
// indexes cannot name each other. The index is read by a SAX pass (its memory is the tensor
// names and a shard number each). Throws Error naming the shard and tensor otherwise.
// Who named the index: the user (the path is followed as any path a user gives) or the directory
// the user named (found there by FindShardIndex: opened by the rule, a link out refused).
enum class IndexNamedBy { kUser, kDirectory };
Document ReadShardedCheckpoint(const std::string& index_path, const ReadOptions& options,
                               IndexNamedBy named_by = IndexNamedBy::kUser);
struct Detection;
// The index file of a detected sharded checkpoint: the file itself, or the one its directory holds.
std::string ShardIndexOf(const Detection& d);
// What the safetensors writer takes of a conversion's options (shards included): the source's own
// __metadata__ when it is a .safetensors file, then --metadata.
SafetensorsWriteOptions SafetensorsPartOf(const Document& doc, const ConvertOptions& options);

// The shard names an index gives, each checked by the rule's form, sorted, once each.
std::vector<std::string> ShardFiles(const std::string& index_path, IndexNamedBy named_by = IndexNamedBy::kUser);

}  // namespace trove
