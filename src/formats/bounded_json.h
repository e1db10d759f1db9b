// formats/bounded_json.h: parsing a small JSON file a format reads beside its tensors (a Megatron
// checkpoint's metadata.json, a model's config.json, a character vocabulary) with its nesting
// bounded while it is parsed.
//
// nlohmann's parser keeps its own stack, but what is done with the tree afterwards (dump(),
// comparisons, walking it) recurses once per level: a file of 100,000 nested brackets crashed
// the process with a stack overflow. Every such file is flat or nearly so, so the caller names the
// depth its content can have and anything deeper is refused before the tree is built further.
// (meta.json of tensordict, safetensors headers and shard indexes have parsers of their own with
// the same bound.) Stateless; thread-safe.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace trove {

// The JSON value of `text`. Throws Error(kCorrupt) for text that is not JSON (with nlohmann's
// reason and byte offset) and Error(kLimit) for arrays or objects nested deeper than
// `max_depth` (1: a flat object or array). Errors do not name the file: callers run this
// inside WithFile.
nlohmann::json ParseBoundedJson(std::string_view text, int max_depth);

}  // namespace trove
