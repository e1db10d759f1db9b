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

#include "trove/convert_options.h"
#include "trove/document.h"
#include "trove/format.h"

namespace trove {


// The target format from `--to` (pt, tensordict, tdz, pskd, safetensors) or else from the
// destination's name (.pt .pth .bin .ckpt, .tdz, .psk.d, .safetensors; an existing directory or a name without extension:
// tensordict). Throws Error(kUsage) when neither says.
Format TargetFormat(const std::string& destination, const std::string& to);

// Applies keys/exclude/dequantize/floating_dtype/cast_keys (and drop_unknown) to a document in
// place and recomputes its tensor list. Returns how many tensors were cast (not counting dequantized).
size_t ApplyConvertOptions(Document& doc, const ConvertOptions& options);

bool KeyMatches(const std::string& pattern, const std::string& key);

// The one wording of every command for a selection that keeps no tensor: "--keys 'enc/*'
// select none of the 7 tensors (trove info lists their keys)".
std::string NothingSelectedText(const std::vector<std::string>& keys, const std::vector<std::string>& exclude,
                                uint64_t tensors);

void Convert(const std::string& source, const std::string& destination, Format target, const ConvertOptions& options);
// The writing half of Convert, for a document already opened (and ApplyConvertOptions'd).
void ConvertDocument(const Document& doc, const std::string& destination, Format target, const ConvertOptions& options);

}  // namespace trove
