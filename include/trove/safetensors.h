// trove/safetensors.h: reading and writing Hugging Face .safetensors files.
//
// The format: an 8-byte little-endian header length N, N bytes of a JSON object mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data
// section that follows the header) plus an optional "__metadata__" object of string values, then
// the data. ReadSafetensors validates the whole header before making any view (see
// docs/safetensors.md for the list) and returns a Document whose root is a flat dict from tensor
// name to a zero-copy view of the mapping, in file order; "__metadata__" entries become
// properties named "metadata.KEY". WriteSafetensors writes what the reference implementation
// writes for the same tensors (its ordering, compact JSON, space padding to a multiple of 8),
// streaming under a temporary name renamed when complete.
// Functions are thread-safe (no shared state); documents follow trove/document.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trove/document.h"
#include "trove/format.h"
#include "trove/shared_bytes.h"
#include "trove/write_options.h"

namespace trove {

// Largest header trove reads or writes: the reference implementation's own limit (100 MB), far
// above the ~10 MB header of a model with a hundred thousand tensors; it bounds the JSON parse.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// True when the first bytes look like a safetensors file: a header length that fits in the file
// and under the cap, and a header starting with '{'. `file_size` is the whole file's size.
bool LooksLikeSafetensors(std::string_view head, uint64_t file_size);

// Throws Error(kCorrupt) naming the tensor for any header or layout violation, Error(kLimit) past
// the header cap, Error(kUnsupported) for a dtype trove has no type for (F6_E2M3, F6_E3M2).
Document ReadSafetensors(std::shared_ptr<MappedFile> file, const ReadOptions& options);

// Tensor names are the documents' key paths with each component decoded and joined by '/'
// ("model/layer.0.weight"; a flat state dict keeps its keys). Values other than tensors are an
// error listing them unless options.drop_values (then a note names them); tensors sharing
// storage are written once per name (a note says so); non-contiguous views are gathered in
// bounded chunks. options.metadata becomes "__metadata__".
struct SafetensorsWriteOptions : WriteOptions {
  // "__metadata__" entries, in order.
  std::vector<std::pair<std::string, std::string>> metadata;
};
void WriteSafetensors(const Document& doc, const std::string& path, const SafetensorsWriteOptions& options = {});

// Sharded output: `directory` gets shards filled as the Hugging Face tools fill them and named
// as they name them (model-00001-of-00003.safetensors or pytorch_model-00001-of-00003.bin,
// options.shard_format kSafetensors or kPt) and the index
// (model.safetensors.index.json / pytorch_model.bin.index.json: total_size and the weight map);
// one shard is written alone under the unsharded name, without an index. The whole directory
// appears at once (AtomicDirectory).
struct ShardedWriteOptions : SafetensorsWriteOptions {
  Format shard_format = Format::kSafetensors;  // or kPt (.bin shards); anything else: Error(kUsage)
  // The most bytes of tensors a shard holds (--max-shard-size); more than 0. The default is the
  // transformers library's ("5GB").
  uint64_t max_shard_bytes = 5'000'000'000;
  // Files copied into the directory beside the shards (a model's config.json and
  // generation_config.json: what loads the weights beside them), in the same commit as the shards.
  // A file of that name already in the directory is left as it is (never replaced: trove did not
  // write it); `note` says so when its bytes differ.
  std::vector<std::string> carried_files;
};
void WriteShardedCheckpoint(const Document& doc, const std::string& directory, const ShardedWriteOptions& options = {});
// "5GB" (10^9), "500MiB" (2^20), "1000" (bytes): the sizes --max-shard-size takes.
uint64_t ParseShardSize(const std::string& text);

// The safetensors name of a dtype ("F32", "BF16", "F8_E4M3"), or "" when it has none.
std::string_view SafetensorsDTypeName(DType dtype);

}  // namespace trove
