// trove/open.h: open any file trove understands, by content.
//
// DetectFormat looks at the first bytes (and, for directories, at meta.json); Open routes to the
// matching reader and returns its Document. Both are thread-safe (they share no state).
#pragma once

#include <string>
#include <string_view>

#include "trove/document.h"
#include "trove/format.h"

namespace trove {

Format DetectFormat(const std::string& path);

// Throws Error with the path as context.
Document Open(const std::string& path, const ReadOptions& options = {});

}  // namespace trove
