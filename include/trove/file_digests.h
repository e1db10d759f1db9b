// trove/file_digests.h: SHA-256 of the files a checkpoint is made of, to compare with the
// digests a model hub lists (the Hugging Face Hub shows each LFS file's sha256) or that
// `sha256sum -c` checks.
//
// A file is hashed whole; a directory (a sharded checkpoint, a tensordict tree, a model folder)
// file by file, sorted by name, subdirectories included, with the same rule for links as every
// directory trove reads (core/confined_directory.h: a link leading out of the directory is named
// and refused, not read). Files are streamed with large reads: memory stays bounded whatever
// their size. Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trove {

// Files one call hashes at most: a directory tree of more is no checkpoint, and the list is
// held in memory.
inline constexpr size_t kMaxDigestFiles = size_t{1} << 20;

struct FileDigest {
  std::string path;     // the path given, or the directory's path joined with the file's name
  std::string sha256;   // lowercase hex; empty when the file was not read (see refused)
  uint64_t bytes = 0;
  std::string refused;  // why a directory's entry was not read (a link out of it, a FIFO...)
};

// Throws Error(kNotFound/kIo) naming the path when it cannot be read, Error(kLimit) beyond
// kMaxDigestFiles.
std::vector<FileDigest> Sha256Files(const std::string& path);
// The same, calling `progress` with (bytes hashed, bytes of the files to hash) as the reads go,
// as WriteOptions::progress is called (at most once per 4 MiB and once at the end, never two
// calls at once).
std::vector<FileDigest> Sha256Files(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace trove
