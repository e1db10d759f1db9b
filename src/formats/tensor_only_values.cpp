// Values other than tensors in formats that hold only tensors (formats/tensor_only_values.h).
#include "formats/tensor_only_values.h"

#include "core/count_text.h"
#include "trove/error.h"

namespace trove {

std::vector<std::string> ValuesOtherThanTensors(const Document& doc) {
  std::vector<std::string> values;
  ForEachLeaf(doc.root, [&](const std::string& key, const Value& leaf) {
    if (leaf.kind != ValueKind::kTensor) values.push_back(key.empty() ? "(root)" : key);
  });
  return values;
}

std::string ListedKeys(const std::vector<std::string>& keys) {
  std::vector<std::string> quoted;
  for (size_t i = 0; i < keys.size() && i < kNamesListed; ++i) quoted.push_back("'" + keys[i] + "'");
  return FirstFew(quoted, kNamesListed, keys.size());
}

void RefuseOrDropValues(const Document& doc, std::string_view format, const WriteOptions& options,
                        std::string_view remedy) {
  const std::vector<std::string> values = ValuesOtherThanTensors(doc);
  if (values.empty()) return;
  if (!options.drop_values) {
    Fail(ErrorCode::kUnsupported, std::to_string(values.size()) + " value(s) other than tensors cannot be held in " +
                                      std::string(format) + ": " + ListedKeys(values) + " (--drop-values leaves them out" +
                                      std::string(remedy) + ")");
  }
  if (options.note) options.note("dropped " + std::to_string(values.size()) + " value(s) other than tensors: " + ListedKeys(values));
}

}  // namespace trove
