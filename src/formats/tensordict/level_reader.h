// formats/tensordict/level_reader.h: builds the Document tree from a tensordict's files.
//
// One reader for both containers: it asks a TreeSource for meta.json files and leaves, level by
// level, dispatching on each level's class. Everything tensordict silently drops is an error
// here (see docs/tensordict.md). Single-use, single-threaded.
#pragma once

#include <cstdint>
#include <string>

#include "formats/tensordict/tree_source.h"
#include "trove/document.h"

namespace trove::tensordict {

// Caps (reasons):
// Levels nest one directory each; real data nests < 10 deep. 64 bounds the reader's recursion
// (and matches the deepest path most filesystems handle comfortably with encoded names).
inline constexpr int kMaxLevelDepth = 64;
// Keys in one level: a replay buffer has tens; 2^20 is far beyond and bounds one level's work.
inline constexpr uint64_t kMaxEntriesPerLevel = uint64_t{1} << 20;
// Leaves in one tensordict: each costs a few hundred bytes of views; 2^21 keeps a hostile tree
// under ~1 GB of index while allowing two million tensors.
inline constexpr uint64_t kMaxLeaves = uint64_t{1} << 21;
// Components of nested tensors in one tensordict: each is a view of its own (a few hundred bytes
// of index, more in `info --json`), declared by one number in meta.json and 8 bytes of sizes.
// Real nested leaves hold a batch (thousands); 2^16 keeps a hostile tree's index small.
inline constexpr uint64_t kMaxNestedComponents = uint64_t{1} << 16;
// Levels (directories) in one tensordict: each costs a meta.json parse; same reasoning.
inline constexpr uint64_t kMaxLevels = uint64_t{1} << 20;
// A pickled sidecar or json_types.json is small metadata (non-tensor fields), never tensor data.
inline constexpr uint64_t kMaxSidecarBytes = uint64_t{64} << 20;

struct TreeStats {
  uint64_t leaves = 0;
  uint64_t levels = 0;
  uint64_t copied_leaves = 0;    // leaves read into memory (compressed or unaligned entries)
  uint64_t nested_components = 0;
  int root_format_version = 0;   // 0 when the root meta.json has no _format_version
  std::string root_class;
};

// Reads the tree rooted at the source's top directory into doc.arena; sets doc.root,
// doc.warnings. Returns statistics for Document::properties.
TreeStats ReadTree(TreeSource& source, Document& doc, const ReadOptions& options);

}  // namespace trove::tensordict
