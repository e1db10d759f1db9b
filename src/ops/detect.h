// ops/detect.h: what a path holds, found once and handed on.
//
// Detect maps a file (or looks into a directory) and asks every format driver
// (formats/format_registry.h) how sure it is; the most confident names the format. A zip is
// parsed once, before the drivers are asked (ZipDisagreement::kReport, which every later use can read from: a
// strict reader refuses through ZipReader::RefuseDisagreements) so that Open, Verify and Scan do
// not parse it again. ReadDetected routes to the format's reader. Thread-safe: no shared state.
#pragma once

#include <memory>
#include <string>

#include "core/confined_directory.h"
#include "formats/format_registry.h"
#include "trove/document.h"
#include "trove/format.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"

namespace trove::ops {

// Detection (formats/format_registry.h): what a path holds, by the most confident driver.
using trove::Detection;


// Throws Error for a path that cannot be opened or mapped (unknown content is kUnknown). A file
// is told by its content; a name only decides between formats the bytes leave open (a damaged
// .safetensors header, an index). Never blocks: a FIFO or device is refused, not opened for reading.
Detection Detect(const std::string& path);
// Detect for a file already opened (by the rule for files a file names, core/confined_directory.h).
Detection DetectFile(ConfinedFile file);
// The document; Error for formats trove recognises but does not read (tar, TorchScript) and for
// kUnknown. Errors do not yet name the path (OpenDetected adds it).
Document ReadDetected(const Detection& detection, const ReadOptions& options);
// ReadDetected with the path named in every error, as trove::Open reports them.
Document OpenDetected(const Detection& detection, const ReadOptions& options);

}  // namespace trove::ops
