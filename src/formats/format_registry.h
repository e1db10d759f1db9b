// formats/format_registry.h: every format trove knows, as a driver its own folder defines.
//
// A format is one folder under src/formats/ whose driver (a FormatDriver) says how its files are
// told by content, read, written, verified and scanned. format_registry.cpp lists the drivers, one
// line each; nothing else names a format's functions (docs/architecture.md, "Adding a format").
// ops/ detects by asking every driver (Detect: the most confident wins) and routes open, convert,
// verify and scan through the winner's hooks.
//
// Drivers are immutable statics: FormatDrivers() and the lookups are thread-safe.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/progress.h"
#include "trove/atomic_file.h"
#include "trove/convert_options.h"
#include "trove/document.h"
#include "trove/findings.h"
#include "trove/format.h"
#include "trove/shared_bytes.h"
#include "trove/zip_reader.h"

namespace trove {

// What detection found for one path, made once and handed to every hook after it.
struct Detection {
  Format format;
  std::string path;
  bool directory = false;
  std::shared_ptr<MappedFile> file;      // every file format
  std::shared_ptr<const ZipReader> zip;  // a file starting like a zip, parsed once (ZipDisagreement::
                                         // kReport); null when that parse failed (the reader
                                         // parses again, for its own error)
  bool zip_magic = false;                // the file starts with a zip signature

  // The first bytes of the file (at most 512), for magic numbers.
  std::string_view head() const {
    if (!file) return {};
    return {reinterpret_cast<const char*>(file->data()), static_cast<size_t>(std::min<uint64_t>(file->size(), 512))};
  }
};

// How sure a driver is that a path is its format. The highest wins; on a tie, the earlier driver
// in the registry. A name alone (kByName) decides only where no content matched.
enum DetectConfidence : int {
  kNotThisFormat = 0,
  kByName = 10,     // the name says so and the content does not say otherwise (a damaged header
                    // then gets this format's own error)
  kFallback = 20,   // the content is this container, but what it holds is unclear (a zip no
                    // reader accepts goes to the torch reader, whose error says why)
  kLikely = 60,     // structure matches, without a magic number
  kCertain = 100,   // a magic number or a defining entry
};

// The selection and casting are done (trove/convert.h); a writer takes its part of the options.
using WriteHook = void (*)(const Document& doc, const std::string& destination, const ConvertOptions& options);

struct FormatDriver {
  Format format;
  std::string_view summary;  // one line: what the files are
  // Destination names that choose this format as a conversion's target (".npy"); empty: only by
  // name (`--to`).
  std::vector<std::string_view> extensions = {};
  // Files: from the mapping and, for zips, the parsed archive. Directories: from the path.
  DetectConfidence (*detect)(const Detection&) = nullptr;
  // The document; null for formats recognised but never read (refuse says why).
  Document (*read)(const Detection&, const ReadOptions&) = nullptr;
  // Formats recognised but not read: throws the Error saying why (a TorchScript archive's code).
  void (*refuse)(const Detection&) = nullptr;
  WriteHook write = nullptr;       // null: trove does not write this format
  bool writes_directory = false;   // the destination is a directory trove fills
  OwnFileTest owns_file = nullptr; // writes_directory: the names it writes there (the rest stop
                                   // the write: trove never deletes what it did not write)
  // Its writer keeps ggml's block-quantized tensors as their blocks (GGUF); for every other
  // target convert refuses them, listing them, unless --dtype gives their values.
  bool keeps_ggml_blocks = false;
  // --max-shard-size writes this format's own parts (GGUF: a split model's files beside the
  // destination) rather than safetensors or pt shards into a directory: convert hands the write
  // hook max_shard_bytes.
  bool writes_own_parts = false;
  // Its files are zip archives: ops checks the container for every such format (CRCs, readers
  // that disagree, entries torch would unpickle) before the format's own hooks.
  bool zip_container = false;
  // Format-specific findings beyond what ops checks for every file of a container (a zip's
  // records, reading the document): verify adds integrity findings, scan what a loader would run.
  // A scan hook replaces the generic scan of a non-zip file (reading it, looking for a hidden zip).
  // verify reports its steps through `progress` (VerifyOptions::progress, trove/checks.h; may be
  // empty).
  void (*verify)(const Detection&, CheckReport&, const ProgressReporter::Callback& progress) = nullptr;
  void (*scan)(const Detection&, CheckReport&) = nullptr;
  // Directory formats: what marks such a directory ("meta.json (tensordict memmap)"), listed when
  // a directory is none of them. Empty for file formats.
  std::string_view directory_sign = {};
};

// Every driver, in registration order.
const std::vector<const FormatDriver*>& FormatDrivers();
// Why a directory is none of the directory formats: "a directory, but not one trove reads: no
// meta.json (tensordict memmap), no ... found", from every driver's directory_sign.
std::string NotADirectoryFormatText();
// The driver of a format; null for Format::kUnknown and names no driver has.
const FormatDriver* FindFormatDriver(Format format);
// The driver named `name` ("pt", "npz", ...); null if none.
const FormatDriver* FindFormatDriver(std::string_view name);

}  // namespace trove
