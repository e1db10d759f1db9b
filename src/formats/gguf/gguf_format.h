// formats/gguf/gguf_format.h: GGUF files (llama.cpp, ggml, ollama) as trove documents
// (docs/gguf.md).
//
// A GGUF file is a header, typed metadata, tensor infos and the tensors' bytes (the layout is
// written out in gguf_layout.h). The reader parses and checks everything but the tensors' bytes
// and returns a Document whose tensors view the mapping: float and integer types as ordinary
// tensors, ggml's block-quantized types as their raw blocks in a dtype naming the type (one byte
// per element; trove/dtype.h). Shapes are in PyTorch's order (ggml's ne reversed). Metadata
// becomes the document's properties (a summary first, then every key). Functions are
// thread-safe (no shared state); documents follow trove/document.h. WriteGguf writes GGUF v3.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trove/document.h"
#include "trove/findings.h"
#include "trove/gguf.h"
#include "trove/shared_bytes.h"
#include "trove/write_options.h"

namespace trove {

// True when `head` starts like a GGUF file.
bool LooksLikeGguf(std::string_view head);

// Throws what gguf::ParseGguf throws (the field, its offset and the limit), named by the file.
// A part of a split model (split.count > 1; any part) reads the whole set as one document: every
// part found by llama.cpp's name <name>-NNNNN-of-MMMMM.gguf beside it, each checked (split.no,
// split.count, split.tensors.count; no tensor twice; one architecture), its tensors views of its
// own mapping; the properties are the first part's. Errors name the part.
Document ReadGguf(std::shared_ptr<MappedFile> file, const ReadOptions& options);
// One file as it is, a split part alone (EditGgufMetadata).
Document ReadGgufFile(std::shared_ptr<MappedFile> file);

// What reading does not refuse but a careful loader would want to know: bytes after the last
// tensor or between tensors beyond their padding, a missing general.architecture, quantized
// tensors without general.quantization_version, the July 2023 draft layout. A file that does
// not parse is a finding (the error: field, offset, limit).
void VerifyGguf(const MappedFile& file, CheckReport& report);

// Jinja in metadata (tokenizer.chat_template and any string that looks like a template), flagged
// high when its code reaches what chat templates never use: dunder attributes, cycler, joiner,
// lipsum, namespace attributes, import, os, popen, eval and their kin. A file that does not
// parse is a finding.
void ScanGguf(const MappedFile& file, CheckReport& report);

struct GgufWriteOptions : WriteOptions {
  // A GGUF file whose metadata is kept, every key with its type and value as they are (the
  // document's source: convert sets it when reading GGUF), and its size when it was read; empty:
  // none. A v1, big-endian or draft-layout source's metadata is refused (not re-encoded).
  std::string source_gguf;
  uint64_t source_size = 0;
  // The source's split.no, split.count and split.tensors.count are kept (rewriting one part of a
  // split model as itself); else left out: they describe the source's parts, not what is written.
  bool split_keys_kept = false;
  // Typed keys from a config.json beside the source (GgufMetadataFromConfig), before --metadata's.
  std::vector<GgufMetadataEdit> config_metadata;
  // String keys to add or replace (--metadata KEY=VALUE), after the source's.
  std::vector<std::pair<std::string, std::string>> metadata;
  // Typed changes after those (trove/gguf.h: EditGgufMetadata's).
  std::vector<GgufMetadataEdit> edits;
  // Above 0: a split model as llama.cpp's gguf-split writes it (--max-shard-size): parts
  // <name>-00001-of-0000N.gguf beside the destination's name (.gguf dropped), tensors in order
  // filling each up to this many bytes (a larger tensor alone), the metadata in the first, split.no,
  // split.count and split.tensors.count in each; every part appears or none (AtomicDirectory of
  // kFilesInDirectory: other files there stay).
  uint64_t max_part_bytes = 0;
};

// GGUF v3, little-endian: the metadata (above), the tensors in the document's order, each a
// tensor info (its key as the name, ne its shape reversed, a block type's row counted in values)
// and its bytes at a multiple of general.alignment (the source's, else 32), padded to it. Float
// and integer tensors GGUF holds and ggml's block types are written as their bytes (a block type
// exactly as read). Error(kUnsupported), before anything is written, for what GGUF cannot hold:
// a dtype ggml lacks (bool, uint8, complex, float8...), more than 4 dimensions, a name over 63
// bytes, a meta tensor, values other than tensors (unless drop_values). Through AtomicFile.
// The GGUF metadata of a Hugging Face config.json (llama, mistral, qwen2): general.architecture
// and <arch>.context_length, embedding_length, block_count, feed_forward_length,
// attention.head_count(_kv), vocab_size, attention.layer_norm_rms_epsilon, rope.freq_base,
// rope.dimension_count, typed as llama.cpp's converter writes them. Error(kUnsupported) naming
// every missing key, or an unknown model_type; kCorrupt for a file that is not a JSON object.
std::vector<GgufMetadataEdit> GgufMetadataFromConfig(const std::string& path);

void WriteGguf(const Document& doc, const std::string& destination, const GgufWriteOptions& options = {});

}  // namespace trove
