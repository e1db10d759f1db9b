// formats/pt/pt_reader.h: reading torch.save checkpoints (zip since torch 1.6, legacy "1001").
//
// ReadPt maps nothing itself: it takes the mapped file, parses the container, unpickles data.pkl
// with TorchResolver (never executing anything) and returns a Document whose tensors view the
// mapping. Thread-safe: no shared state.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "trove/document.h"
#include "trove/open.h"
#include "trove/shared_bytes.h"

namespace trove {

class ZipReader;

// kPt for a torch zip, kTorchScript for TorchScript/torch.package zips, kTdz for a tensordict
// archive (top-level meta.json), kUnknown otherwise. Does not throw on malformed zips (kPt).
Format DetectZipFormat(std::shared_ptr<MappedFile> file);
// The record name torch would match an entry name with: the part after the top folder, ASCII
// lowercased (torch looks names up ignoring case).
std::string TorchRecordName(std::string_view entry);
// The legacy format's first pickle: PROTO n, LONG1 10 bytes of torch's magic number.
bool IsLegacyPtMagic(std::string_view head);

Document ReadPt(std::shared_ptr<MappedFile> file, const ReadOptions& options);

}  // namespace trove
