// formats/tensordict/tree_source.h: where a tensordict's files come from (a folder or an archive).
//
// The level reader asks a TreeSource for files by (directory, name), where directory is a
// '/'-joined relative path built only from names the reader chose ("", "next", "s/_source").
// Neither implementation ever resolves anything outside its root: DirectorySource walks with
// openat(O_NOFOLLOW) one component at a time (symlinks, "..", absolute names refused), and
// ArchiveSource only looks names up in the zip's central directory (ZipReader refuses "..",
// absolute and backslash names). Every file handed out is recorded for Document::records.
// Sources are single-threaded (the reader uses one at a time); the bytes they return keep their
// mapping alive on their own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trove/document.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"

namespace trove::tensordict {

// Leaf payload as found: at least the bytes asked for (longer files are cut to the prefix).
struct LeafBytes {
  SharedBytes bytes;
  std::string location;  // path or entry name, for errors and TensorView::storage_key
  bool zero_copy = true; // false when the payload was copied or decompressed into memory
};

class TreeSource {
 public:
  virtual ~TreeSource() = default;
  // The whole file (meta.json, sidecars), or nullopt when there is none. Throws when the name
  // exists but is not a regular file (a symlink, a directory) or exceeds `max_bytes`.
  virtual std::optional<SharedBytes> ReadSmallFile(const std::string& dir, const std::string& name,
                                                   uint64_t max_bytes) = 0;
  // The first `needed` bytes of a leaf file; nullopt when there is no such file. A shorter file
  // is Error(kCorrupt). `element_size` says which payload offsets may be viewed in place.
  virtual std::optional<LeafBytes> OpenLeaf(const std::string& dir, const std::string& name, uint64_t needed,
                                            uint64_t element_size) = 0;
  // True when dir/name is a regular file (a symlink there is refused with Error(kRefused)).
  virtual bool HasFile(const std::string& dir, const std::string& name) = 0;
  // True when dir/name is a directory (a symlink there is refused with Error(kRefused)).
  virtual bool HasDir(const std::string& dir, const std::string& name) = 0;
  // Sub-directories of dir, sorted by name.
  virtual std::vector<std::string> ListDirs(const std::string& dir) = 0;
  // "root/dir/name" as the user should read it in a message.
  virtual std::string Describe(const std::string& dir, const std::string& name) const = 0;

  std::vector<ContainerRecord>& records() { return records_; }

 protected:
  std::vector<ContainerRecord> records_;
};

std::string JoinRel(const std::string& dir, const std::string& name);

std::unique_ptr<TreeSource> MakeDirectorySource(const std::string& root);
// `name` (the archive's path) prefixes messages.
std::unique_ptr<TreeSource> MakeArchiveSource(std::shared_ptr<const ZipReader> zip, const std::string& name);

}  // namespace trove::tensordict
