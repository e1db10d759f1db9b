// trove/pt_writer.h: writing PyTorch checkpoints as current torch.save does.
//
// The archive: one folder named after the file, records data.pkl, .format_version,
// .storage_alignment, byteorder, data/<key>..., version, .data/serialization_id, each payload
// 64-byte aligned with PyTorch's padding field, data descriptors and zip64 end records as torch
// writes them. A record of 1 MiB or more copied from a mapped source is padded a little more, to
// start at the same offset within a page as its source (still 64-byte aligned; PlacementFor in
// trove/zip_writer.h), so that the kernel copies it in whole pages. The pickle is protocol 2
// with _rebuild_tensor_v2 (typed storages) or _rebuild_tensor_v3 (UntypedStorage, for the newer
// dtypes); tensors sharing a storage in the source share one record (views stay views). The
// file loads with torch.load(weights_only=True) wherever its values allow (torch 1.13's
// weights_only cannot read floats in the pickle).
// Written under a temporary name and renamed when complete. Thread-compatible.
#pragma once

#include <string>

#include "trove/document.h"
#include "trove/write_options.h"

namespace trove {

// Nothing beyond what every writer takes (trove/write_options.h).
struct PtWriteOptions : WriteOptions {};

void WritePt(const Document& doc, const std::string& path, const PtWriteOptions& options = {});

}  // namespace trove
