// formats/dcp/dcp_reader.h: a torch.distributed.checkpoint (DCP) directory as one checkpoint.
//
// The directory holds `.metadata` (formats/dcp/dcp_metadata.h) and the `.distcp` files it names,
// in which each tensor chunk is a complete torch.save archive at a byte range, and each object
// item a torch.save'd object. The document's root is a dict of every item under its fully
// qualified name: a tensor is the GLOBAL tensor (its dtype and global shape); one stored as one
// chunk covering it is a zero-copy view of its archive's storage in the mapped file, one of
// several chunks is assembled when its bytes are asked for (SharedBytes::Deferred: a streaming
// pass holds that one tensor, never the checkpoint). Objects are values read by the pt reader.
// Files are opened by the rule for files a file names (core/confined_directory.h).
// Thread-safe: the functions share no state; a document's assembled tensors may be read from
// several threads (each pass assembles its own copy).
#pragma once

#include <string>

#include "core/progress.h"
#include "trove/document.h"
#include "trove/findings.h"

namespace trove {

inline constexpr std::string_view kDcpMetadataName = ".metadata";
inline constexpr std::string_view kDcpDataSuffix = ".distcp";
// Megatron-Core's torch_dist files beside the DCP ones (ReadDcpCheckpoint reads them when present).
inline constexpr std::string_view kMegatronMetadataName = "metadata.json";
inline constexpr std::string_view kMegatronCommonName = "common.pt";
// metadata.json is a few keys (backend names and versions); a larger one is not Megatron's.
inline constexpr uint64_t kMaxMegatronMetadataBytes = uint64_t{1} << 20;
// Megatron writes metadata.json as one flat object of backend names and versions; 16 levels leave
// room for what a later version adds and keep printing its values shallow.
inline constexpr int kMaxMegatronMetadataDepth = 16;

// True for a directory holding `.metadata` and at least one `.distcp` file.
bool IsDcpDirectory(const std::string& directory);

// `path` is the directory, or its `.metadata` file. Throws Error naming the file, item and chunk:
// what ParseDcpMetadata throws, chunks that do not tile their tensor (CheckDcpTiling), a file
// the rule refuses or that is missing, a byte range past a file's end, a single-chunk tensor's
// archive that disagrees with the metadata (dtype, shape). A multi-chunk tensor's archives are
// read when it is assembled (and by VerifyDcpCheckpoint). Megatron's metadata.json and common.pt,
// when present, add properties and items (AddMegatronFiles in the reader).
Document ReadDcpCheckpoint(const std::string& path, bool path_is_directory, const ReadOptions& options);

// Everything ReadDcpCheckpoint checks, and every chunk's archive: its CRCs, and that it holds a
// tensor of the metadata's dtype and the chunk's shape. Adds findings; counts entries and bytes.
// `progress` (VerifyOptions::progress) sees one step over the chunks' bytes.
void VerifyDcpCheckpoint(const std::string& path, bool path_is_directory, CheckReport& report,
                         const ProgressReporter::Callback& progress);

// What torch would run besides `.metadata` (ScanDcpMetadata): every item's archive's data.pkl,
// torch.load'ed by DCP's reader (an object item's with weights_only=False in torch's own
// planner), each scanned with torch's resolver as findings under "<file>@<offset>/<entry>". A
// `.metadata` that cannot be read (its own scan says why) leaves nothing more to scan.
void ScanDcpItems(const std::string& path, bool path_is_directory, CheckReport& report);

}  // namespace trove
