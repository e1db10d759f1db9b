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
// Leaves in one tensordict. Reading one costs ~1.6 kB of index in `trove info` (measured with
// /usr/bin/time on trees of 20,000 and 200,000 leaves: the Value nodes of its key and tensor,
// its TensorView, its zip entry or file record, its row of the printed tables), so 2^17 keeps
// `info` of a tree at the cap near 220 MB, within issue 11's 256 MB (2^21 let a hostile tree
// take ~3.4 GB). Real trees have tens to thousands of leaves.
inline constexpr uint64_t kMaxLeaves = uint64_t{1} << 17;
// Levels (directories) in one tensordict: each costs a meta.json parse and ~3.9 kB of index in
// `info` (its dict, its state's entries, its record; measured on 20,000 and 65,536 levels), so
// 2^15 keeps a tree of empty levels at the cap near 130 MB, and one at both caps near 350 MB.
// Real trees nest tens of levels; a lazy stack is one level per member.
inline constexpr uint64_t kMaxLevels = uint64_t{1} << 15;
// Keys in one level, and names listed in its directory (or under its prefix in a .tdz): a
// replay buffer has tens. A level cannot hold more than kMaxLeaves leaves and kMaxLevels
// sub-levels; 2^18 allows both, and the two files of each nested leaf, and bounds one level's
// work before any of it is read.
inline constexpr uint64_t kMaxEntriesPerLevel = uint64_t{1} << 18;
// Components of nested tensors in one tensordict: each is a view of its own (a few hundred bytes
// of index, more in `info --json`), declared by one number in meta.json and 8 bytes of sizes.
// Real nested leaves hold a batch (thousands); 2^16 keeps a hostile tree's index small.
inline constexpr uint64_t kMaxNestedComponents = uint64_t{1} << 16;
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
