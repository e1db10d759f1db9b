// formats/tensor_only_values.h: what the writers of formats that hold only tensors (safetensors,
// GGUF, .npy/.npz, .psk.d) do with a document's other values (ints, strings, a step counter, an
// epoch): nothing lost silently. They are refused, named by key path, before anything is written,
// unless WriteOptions::drop_values (`--drop-values`): then the writer's note names what was left
// out. Stateless; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trove/document.h"
#include "trove/write_options.h"

namespace trove {

// The key paths of the document's leaves that are not tensors ("(root)" for a root value).
std::vector<std::string> ValuesOtherThanTensors(const Document& doc);

// At most ten keys, quoted and comma-separated, then "and N more".
std::string ListedKeys(const std::vector<std::string>& keys);

// Throws Error(kUnsupported) listing the document's values other than tensors ("3 value(s) other
// than tensors cannot be held in <format>: 'epoch', ... (--drop-values leaves them out<remedy>)")
// unless options.drop_values; then calls options.note naming them. Nothing when there are none.
void RefuseOrDropValues(const Document& doc, std::string_view format, const WriteOptions& options,
                        std::string_view remedy = "");

}  // namespace trove
