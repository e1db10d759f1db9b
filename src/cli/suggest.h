// cli/suggest.h: "did you mean" for misspelt commands, options and key paths.
//
// Suggest ranks candidates by how a person misspells a name: a candidate that ends with what was
// typed at a component boundary (a key missing its prefix, `blocks.0.attn.weight` for
// `model/blocks.0.attn.weight`), then by edit distance (insertions, deletions, substitutions and
// swapped neighbours) within a bound that grows with the name's length. Pure functions;
// thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trove::cli {

// Damerau-Levenshtein distance (optimal string alignment); gives up past `limit` (returns limit+1).
size_t EditDistance(std::string_view a, std::string_view b, size_t limit);

// At most `most` candidates close to `typed`, best first; empty when none is close.
std::vector<std::string> Suggest(std::string_view typed, const std::vector<std::string>& candidates, size_t most = 3);

// " (did you mean 'a' or 'b'?)" or "", each name escaped as core/display_escape.h shows names.
std::string DidYouMean(const std::vector<std::string>& suggestions);

}  // namespace trove::cli
