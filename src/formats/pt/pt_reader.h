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
#include "trove/format.h"
#include "trove/shared_bytes.h"

namespace trove {

class ZipReader;

// Records whose presence makes a torch zip a TorchScript/torch.package archive (code, not data),
// as TorchRecordName spells them.
inline constexpr std::string_view kTorchScriptRecords[] = {"constants.pkl", "bytecode.pkl", ".data/version"};
bool IsTorchScriptRecord(std::string_view record);
// The scan's wider view: those records and every record under code/ (TorchScript's source),
// each a sign the archive carries code. Detection and ReadPt use IsTorchScriptRecord only.
bool IsTorchScriptCodeRecord(std::string_view record);
// kTorchScript when the archive holds code records, kPt when it holds a data.pkl, else kUnknown.
Format TorchZipFormat(const ZipReader& zip);
// The record name torch would match an entry name with: the part after the top folder, ASCII
// lowercased (torch looks names up ignoring case).
std::string TorchRecordName(std::string_view entry);
// The legacy format's first pickle: PROTO n, LONG1 10 bytes of torch's magic number.
bool IsLegacyPtMagic(std::string_view head);

Document ReadPt(std::shared_ptr<MappedFile> file, const ReadOptions& options);
// A zip archive already parsed (ZipDisagreement::kReport or kRefuse) over a mapped file: what
// detection parsed is read without a second parse. Strict reads refuse what kRefuse would.
Document ReadPt(const ZipReader& zip, const ReadOptions& options);

}  // namespace trove
