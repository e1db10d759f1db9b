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
// weights_only cannot read floats in the pickle). Values keep their Python class: a torch.Size
// is a torch.Size, dict subclasses (collections.defaultdict, argparse.Namespace, a class of the
// file's) are written as that class, data objects (torch.device, numpy dtypes) as torch wrote
// them; weights_only loads refuse classes outside torch's allowlist.
// Written under a temporary name and renamed when complete. Thread-compatible.
#pragma once

#include <string>

#include "trove/document.h"
#include "trove/write_options.h"

namespace trove {

struct PtWriteOptions : WriteOptions {
  // Objects of classes trove gives no data meaning (Value::unknown_class, read under the default
  // or permissive pickle policy) are written back as the file had them: the same class by name,
  // made the same way (NEWOBJ or REDUCE of the same arguments), then what SETITEM(S), APPEND(S)
  // and BUILD gave it; nothing of them is run or understood. Without it such an object is
  // Error(kUnsupported) naming its key path.
  bool keep_unknown = false;
};

void WritePt(const Document& doc, const std::string& path, const PtWriteOptions& options = {});

}  // namespace trove
