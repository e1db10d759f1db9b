// formats/pt/pt_checks.h: what a security scan (and verify, of checkpoint directories) knows about
// torch's own files.
//
// torch.load runs pickles: the zip's data.pkl (read with torch's persistent ids), a legacy
// file's five pickles, a pre-0.4 tar checkpoint's members, and, through Python's zipfile or a
// leading pickle, whatever a polyglot file shows other readers. These functions add to a
// CheckReport what each of those would run (pickle/pickle_scan.h) and how torch and other readers
// would see the file differently; ops/checks.cpp decides which apply. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/confined_directory.h"
#include "core/progress.h"
#include "formats/pt/pt_reader.h"
#include "pickle/pickle_scan.h"
#include "trove/findings.h"
#include "trove/shared_bytes.h"

namespace trove {

// Whether an entry's name says pickle to torch's loaders: torch.load opens <top>/data.pkl,
// torch.jit.load constants.pkl, bytecode.pkl and code/*.debug_pkl, torch.package its *.pkl
// resources, tensordict its *.pickle sidecars (compared as TorchRecordName folds it).
bool NamedLikePickle(std::string_view name);
// Records of a TorchScript/torch.package archive that hold raw storage bytes, never a pickle.
bool IsStorageRecord(std::string_view name);

// A pickle read with torch's resolver (permissive: everything listed, nothing run); legacy_ids
// for the legacy format's object pickle, whose persistent ids are storage keys; enum_members: the
// enum members the format reading the file reads as data (formats/pt/pt_reader.h, ReadPtWithEnums);
// data_classes: the classes it reads as data (PtKnownNames).
PickleScan ScanTorchPickle(CheckReport& report, const std::string& entry, const uint8_t* data, uint64_t size,
                           uint64_t base = 0, bool legacy_ids = false, const PtEnumMembers& enum_members = {},
                           const std::function<bool(const std::string&)>& data_classes = {});

// Every pickle of the torch.save archives a checkpoint directory names (its rank files), each
// opened by name inside `root`, scanned as ScanTorchPickle does with the format's names and
// labelled `file/entry`; counted in the report. A file that cannot be read is a finding, an I/O
// error is thrown.
void ScanTorchArchivesIn(CheckReport& report, const ConfinedDirectory& root, const std::vector<std::string>& names,
                         const PtEnumMembers& enum_members = {},
                         const std::function<bool(const std::string&)>& data_classes = {});

// verify's check of the torch.save archives a checkpoint directory names (FSDP's and DeepSpeed's
// rank files), each opened by name inside `root`: every entry's CRC-32, computed on the worker
// threads (ZipReader::CheckCrcs), a mismatch a finding labelled by the file; counted in the
// report. `progress` (VerifyOptions::progress) sees one step over the files' bytes. An error
// reading an archive is thrown, as opening it would throw it.
void CheckTorchArchiveCrcsIn(CheckReport& report, const ConfinedDirectory& root, const std::vector<std::string>& names,
                             const ProgressReporter::Callback& progress);

// The archive Python's zipfile reads when the end records put the central directory `prefix`
// bytes further on than its offset says: its pickles are scanned, labelled "zipfile view".
// False when zipfile would not read an archive there either.
bool ScanZipfileView(CheckReport& report, const std::shared_ptr<MappedFile>& file, uint64_t prefix, uint64_t* entries,
                     uint64_t* first_local);
// A file whose first bytes are not a zip but whose end is one (and, with scan_leading_pickle, a
// bare pickle at its start, which torch.load would run first).
void ScanPolyglot(CheckReport& report, const std::shared_ptr<MappedFile>& file, bool scan_leading_pickle);
// A pre-0.4 tar checkpoint: every pickle of sys_info, storages, tensors and pickle.
void ScanLegacyTar(CheckReport& report, const std::shared_ptr<MappedFile>& file);
// A legacy (non-zip) torch.save file: its pickles in the order torch.load runs them.
void ScanLegacyPt(CheckReport& report, const std::shared_ptr<MappedFile>& file);

}  // namespace trove
