// trove/convert_options.h: what a conversion is asked to do, as every format's writer receives it.
//
// ConvertOptions is the selection and casting (applied by trove::Convert, trove/convert.h) and
// each target's settings; a format's driver (src/formats/format_registry.h) takes from it the part
// its writer uses. Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trove/document.h"
#include "trove/dtype.h"
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
  // Tensors renamed after the selection (and before dedupe_tied), each by the first rule that matches its key path: FROM
  // with one `*` matches any text (`/` included) and TO's `*` takes it; FROM without `*` is a
  // prefix (FROM=TO is FROM*=TO*). Only tensors reached through dicts with str keys can move (a
  // new path's missing dicts are made, dicts left empty are dropped); two tensors renamed to one
  // path, or onto a value that stays, are Error(kUsage).
  std::vector<std::pair<std::string, std::string>> renames;
  // Tied tensors (views of the same bytes: one storage, offset, dtype, shape and strides, as a
  // model's tied embedding and output weights are) written once, as Hugging Face's save_model
  // does: the first in tree order is kept, the others dropped, listed by `note` and (for
  // .safetensors) in the metadata entry "dropped_tied" as "dropped=kept,...".
  bool dedupe_tied = false;
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
  // .safetensors: "__metadata__" entries.
  std::vector<std::pair<std::string, std::string>> metadata;
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

// The document property ApplyConvertOptions leaves with dedupe_tied's "dropped=kept,..." list.
inline constexpr std::string_view kDroppedTiedProperty = "dropped_tied";

// A writer's options (a WriteOptions-derived struct) with what every writer takes copied from the
// convert options; the format's own settings are the driver's to copy.
template <class Options>
Options WriterPartOf(const ConvertOptions& options) {
  Options o;
  static_cast<WriteOptions&>(o) = options;
  return o;
}

}  // namespace trove
