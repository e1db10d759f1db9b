// formats/pt/pt_reader.h: reading torch.save checkpoints (zip since torch 1.6, legacy "1001").
//
// ReadPt maps nothing itself: it takes the mapped file, parses the container, unpickles data.pkl
// with TorchResolver (never executing anything) and returns a Document whose tensors view the
// mapping. Thread-safe: no shared state.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "trove/document.h"
#include "trove/format.h"
#include "trove/shared_bytes.h"

namespace trove {

class ZipReader;

// Records whose presence makes a torch zip a TorchScript/torch.package archive (code, not data),
// as TorchRecordName spells them: TorchScript since torch 1.3 (constants.pkl), its mobile form
// (bytecode.pkl), writers of version 6 and later (.data/version), TorchScript of torch 1.0-1.2
// (model.json, attributes.pkl) and torch.package (.data/extern_modules).
inline constexpr std::string_view kTorchScriptRecords[] = {"constants.pkl",  "bytecode.pkl",  ".data/version",
                                                           "model.json",     "attributes.pkl", ".data/extern_modules"};
bool IsTorchScriptRecord(std::string_view record);
// The scan's wider view: those records and every record under code/ (TorchScript's source),
// libs/ (torch 1.0's) or tensors/ (torch 1.0-1.2's tensors), each a sign the archive carries
// code. Detection and ReadPt use IsTorchScriptRecord only.
bool IsTorchScriptCodeRecord(std::string_view record);
// kTorchScript when the archive holds code records, kPt when it holds a data.pkl, else kUnknown.
Format TorchZipFormat(const ZipReader& zip);
// Which code archive a kTorchScript zip is, by the records that say so ("torch.package archive
// (.data/extern_modules)", "TorchScript archive of torch 1.0-1.2 (model.json, attributes.pkl,
// tensors/)", ...), for the error that refuses it.
std::string TorchCodeArchiveKind(const ZipReader& zip);
// The kind torch.jit.save's archives (torch >= 1.3) are: the one code archive whose data trove reads.
inline constexpr std::string_view kJitSaveArchiveKind = "a TorchScript archive (constants.pkl, code/)";
// The same for a file that is not a zip: TorchScript's mobile flatbuffer ("PTMF" at byte 4) and
// the 1.0 preview's container ("PYTORCH1" at byte 0); empty for anything else.
std::string TorchCodeFileKind(std::string_view head);
// The record name torch would match an entry name with: the part after the top folder, ASCII
// lowercased (torch looks names up ignoring case).
std::string TorchRecordName(std::string_view entry);
// True when the file's first pickle (of any protocol, 0 to 5) is torch's legacy magic number
// 0x1950a86a20f9469cfc6c, as every non-zip torch.save file starts: read by structure with the
// data-only unpickler, not matched as bytes (protocol 0 and 1 spell the number as text, 4 and 5
// put a FRAME first).
bool IsLegacyPtStart(const uint8_t* data, uint64_t size);

Document ReadPt(std::shared_ptr<MappedFile> file, const ReadOptions& options);
// A zip archive already parsed (ZipDisagreement::kReport or kRefuse) over a mapped file: what
// detection parsed is read without a second parse. Strict reads refuse what kRefuse would.
Document ReadPt(const ZipReader& zip, const ReadOptions& options);
// The same, its values made in `arena` (the document's arena is that one), so that another
// document can hold them: a DCP checkpoint's items are torch.save archives inside its files
// (the zip may then be bytes of a mapping, not a file of its own).
Document ReadPtInto(const ZipReader& zip, const ReadOptions& options, std::shared_ptr<ValueArena> arena);
// The members of the enum classes a format knows its torch.save pickles to hold (true for
// `enum_class` "module.Class" and one of its member names), read where Python >= 3.11 pickles
// them as getattr(EnumClass, 'NAME'); every other getattr stays refused.
using PtEnumMembers = std::function<bool(const std::string& enum_class, const std::string& member)>;
// ReadPt of a zip archive whose pickle may hold those enum members (a DeepSpeed optimizer state).
Document ReadPtWithEnums(const ZipReader& zip, const ReadOptions& options, const PtEnumMembers& enum_members);
// The names a format knows its torch.save pickles to hold beyond torch's own: enum members (and
// class attributes spelled the same way, getattr(Class, 'NAME')), and classes read as data
// objects under every policy (TorchResolver::data_classes: FSDP's ShardedTensor and DTensor).
struct PtKnownNames {
  PtEnumMembers enum_members;
  std::function<bool(const std::string& dotted)> data_classes;
};
// Its values are made in `arena` when one is given (as ReadPtInto).
Document ReadPtWithNames(const ZipReader& zip, const ReadOptions& options, const PtKnownNames& names,
                         std::shared_ptr<ValueArena> arena = nullptr);
// A TorchScript archive (torch.jit.save, torch >= 1.3) read as data: its data.pkl (the module's
// parameters and buffers, under the module's attribute names; its __torch__.* classes inert
// objects) and constants.pkl's constants (under `(constants)`); code/ is never read. Format "torchscript",
// with a warning saying the code was left.
Document ReadTorchScriptData(const ZipReader& zip, const ReadOptions& options);
// Where a TorchScript archive's constants (constants.pkl) sit: an entry of the root module's state
// (not a name Python gives an attribute, so no module's own).
inline constexpr std::string_view kTorchScriptConstantsKey = "(constants)";
// For conversion: a "torchscript" document's modules become plain dicts of their tensors and
// submodules (the code, module classes and other attributes are not carried; `note` says so).
// Any other document is left as it is.
void TorchScriptModulesAsDicts(Document& doc, const std::function<void(const std::string&)>& note);

}  // namespace trove
