// trove/convert.h: moving tensors between formats through the one model in the middle.
//
// Convert() opens the source with trove::Open, applies the selection and casting options to the
// Document, and hands it to the target format's writer. Writers stream every tensor from the
// mapped source into the output once (TensorView::ForEachChunk), write under a temporary name and
// rename at the end, so peak memory is bounded and the destination appears only when complete.
// A value the target cannot hold is an error naming its key. Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trove/document.h"
#include "trove/format.h"
#include "trove/write_options.h"
#include "trove/zip_reader.h"

namespace trove {

// The selection and casting options, then what the target's writer takes (trove/write_options.h
// and each format's own settings below; ConvertDocument hands each writer its part).
struct ConvertOptions : WriteOptions {
  // Key-path globs (`*` within one component, `**` across components, `?` one character).
  // Tensors matching none are dropped (dict entries removed, list items left as None so the
  // other indices keep their keys). Empty: keep all.
  std::vector<std::string> keys;
  // Key-path globs of tensors to drop (after `keys`). A selection that keeps no tensor of a file
  // that has some is Error(kUsage); dicts left empty by it are dropped too.
  std::vector<std::string> exclude;
  std::optional<DType> floating_dtype;  // cast float16/32/64, bfloat16 tensors to this on the way
  // Which floating tensors floating_dtype casts (globs). Empty: the weights, that is every floating
  // tensor except optimizer state (inside a dict holding both "state" and "param_groups", as
  // torch's Optimizer.state_dict() is) and step counters (a last key component "step").
  std::vector<std::string> cast_keys;
  // Quantized tensors become float32 tensors of their values (torch's dequantize()), before
  // floating_dtype. Without it a quantized tensor is written only to .pt (with its quantizer); any
  // other target is Error(kUnsupported) naming it.
  bool dequantize = false;
  std::optional<uint64_t> vocab;        // .psk.d: the N of idx[N] for integer leaves (else max+1)
  ZipMethod compression = ZipMethod::kStored;  // .tdz payloads (ZipMethodFromName)
  ReadOptions read;
  // Write anyway what the expansion rule (trove/tensor.h, CheckExpansion in trove/document.h)
  // refuses: views beyond kMaxExpandRatio written whole into a format without strides or shared
  // storage, compressed storages inflating beyond kMaxInflateRatio (`--allow-expand`); otherwise
  // that is Error(kLimit) before anything is written.
  bool allow_expand = false;
  // .safetensors: "__metadata__" entries; values other than tensors left out instead of refused.
  std::vector<std::pair<std::string, std::string>> metadata;
  bool drop_values = false;
  // Objects of classes trove gives no data meaning (Value::unknown_class; the default policy reads
  // them inert): keep_unknown writes them back as they were read (.pt only: PtWriteOptions);
  // drop_unknown leaves them out, with what they hold, and `note` lists them. With neither, a
  // document holding one is Error(kUnsupported) listing them by key path, before anything is
  // written.
  bool keep_unknown = false;
  bool drop_unknown = false;
  // Sharded output into a directory (safetensors or pt shards and their index): the most bytes of
  // tensors a shard holds, as --max-shard-size gives it.
  std::optional<uint64_t> max_shard_bytes;
};

// The target format from `--to` (pt, tensordict, tdz, pskd, safetensors) or else from the
// destination's name (.pt .pth .bin .ckpt, .tdz, .psk.d, .safetensors; an existing directory or a name without extension:
// tensordict). Throws Error(kUsage) when neither says.
Format TargetFormat(const std::string& destination, const std::string& to);

// Applies keys/exclude/dequantize/floating_dtype/cast_keys (and drop_unknown) to a document in
// place and recomputes its tensor list. Returns how many tensors were cast (not counting dequantized).
size_t ApplyConvertOptions(Document& doc, const ConvertOptions& options);

bool KeyMatches(const std::string& pattern, const std::string& key);

void Convert(const std::string& source, const std::string& destination, Format target, const ConvertOptions& options);
// The writing half of Convert, for a document already opened (and ApplyConvertOptions'd).
void ConvertDocument(const Document& doc, const std::string& destination, Format target, const ConvertOptions& options);

}  // namespace trove
