// formats/tensordict/tensordict_reader.h: the two entry points trove::Open routes tensordict
// data to. Both return a Document in the model described in docs/tensordict.md; leaves view the
// mapped files (directory) or the one mapped archive (stored, aligned entries). Thread-safe: no
// shared state; the Document keeps its mappings alive.
#pragma once

#include <memory>
#include <string>

#include "trove/document.h"
#include "trove/shared_bytes.h"

namespace trove {

class ZipReader;

// A tensordict memmap directory (holding meta.json).
Document ReadTensordictDir(const std::string& path, const ReadOptions& options);
// A .tdz archive: a zip with a top-level meta.json.
Document ReadTdz(std::shared_ptr<MappedFile> file, const ReadOptions& options);
// An archive already parsed (detection's ZipReader, in either ZipDisagreement mode): read without
// parsing it again; what ZipDisagreement::kRefuse would refuse is refused.
Document ReadTdz(std::shared_ptr<const ZipReader> zip, const ReadOptions& options);
// A zip with a top-level meta.json entry: what makes an archive a .tdz.
bool IsTdzArchive(const ZipReader& zip);
// The same over archive bytes already in memory (fuzzing, nested archives); `name` is used in
// messages and as Document::path.
Document ReadTdzBytes(SharedBytes archive, const std::string& name, const ReadOptions& options);

}  // namespace trove
