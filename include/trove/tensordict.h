// trove/tensordict.h: tensordict memmap directories and .tdz archives (read, write, pack, edit).
//
// Reading goes through trove::Open (or ReadTensordict here) and yields a Document whose tree is
// described in docs/tensordict.md: each TensorDict level is a kDict ("tensordict:TensorDict")
// whose `state` holds the level's own entries, leaves are zero-copy TensorViews of the mapped
// files (or of the one mapped archive), non-tensor data are kObject nodes.
// Writing takes any Document (a .pt state_dict, a tensordict read earlier, ...) and produces the
// spec's format version 1: a directory built under a temporary name and renamed into place
// (AtomicDirectory), or an archive written through AtomicFile. Leaves are streamed in bounded
// chunks, so memory does not grow with the data size.
// All functions are thread-compatible: concurrent calls on different paths are safe; nothing
// here keeps global state. Errors are trove::Error naming the file, entry or key and the reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trove/atomic_file.h"
#include "trove/document.h"
#include "trove/write_options.h"
#include "trove/zip_reader.h"

namespace trove {

// The format version trove writes, and the newest one it reads.
inline constexpr int kTensordictFormatVersion = 1;

struct TensordictWriteOptions : WriteOptions {
  // Archives only: how `.memmap` payloads are stored. meta.json and pickles are always stored.
  ZipMethod compression = ZipMethod::kStored;
  // UnpackTdz only: write compressed entries that together inflate beyond kMaxInflateRatio times
  // the archive's entries (a decompression bomb's ratio; docs/security.md, "The expansion rule").
  bool allow_expand = false;
};

// Reads a tensordict directory or a .tdz archive (detected by content: a directory, or a zip
// with a top-level meta.json).
Document ReadTensordict(const std::string& path, const ReadOptions& options = {});

// Writes `doc` as a format-version-1 directory at `dir` (replacing an existing one atomically).
void WriteTensordictDir(const Document& doc, const std::string& dir, const TensordictWriteOptions& options = {});
// Writes `doc` as a .tdz archive at `path` (replacing an existing file atomically).
void WriteTdz(const Document& doc, const std::string& path, const TensordictWriteOptions& options = {});

// Packs a tensordict directory (which must hold meta.json) file by file into an archive, in the
// spec's entry order, `.memmap` payloads stored 64-byte aligned or compressed as asked. The
// files are copied as they are (meta.json is not rewritten). Symlinks are refused. Progress
// counts the bytes of every file packed.
void PackTdz(const std::string& dir, const std::string& archive, const TensordictWriteOptions& options = {});
// Extracts an archive into `dir` (built under a temporary name, then renamed into place).
// Names that would leave `dir` are refused; nothing is ever written outside it.
// An existing `dir` is replaced only as CheckDestination allows (an empty directory or one holding
// only a tensordict's files), never a directory containing the archive.
// options.compression is not used; progress counts the bytes of the entries extracted.
void UnpackTdz(const std::string& archive, const std::string& dir, const TensordictWriteOptions& options);
void UnpackTdz(const std::string& archive, const std::string& dir,
               Durability durability = Durability::kReplaceSafe);

// In-place editing (the spec's mode="r+"): overwrites `size` bytes at `offset` inside the stored
// payload of the leaf at `key_path` (a Document key path, e.g. "next/obs"). The leaf must be
// stored (not compressed) and the range inside it. Like tensordict, this does not update the
// CRC-32s: call RefreshTdzChecksums afterwards. Not crash-safe by nature (it edits in place).
void WriteTdzLeafInPlace(const std::string& archive, std::string_view key_path, uint64_t offset, const void* data,
                         uint64_t size);

// Recomputes every entry's CRC-32 and rewrites the stale ones (local header unless it holds zeros
// for a data descriptor, data descriptor, central directory; zip64 too) in a copy that replaces
// the archive atomically once the zip reader accepts it with every CRC right; otherwise the
// archive is left as it was and Error(kCorrupt) says why. Returns the names of the entries fixed.
std::vector<std::string> RefreshTdzChecksums(const std::string& archive);

// Names of the entries whose payload does not match their CRC-32 (for `trove verify`).
std::vector<std::string> CheckTdzChecksums(const std::string& archive);

}  // namespace trove
