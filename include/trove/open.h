// trove/open.h: open any file trove understands, by content.
//
// DetectFormat looks at the first bytes (and, for directories, at meta.json); Open routes to the
// matching reader and returns its Document. Both are thread-safe (they share no state).
#pragma once

#include <string>
#include <string_view>

#include "trove/document.h"

namespace trove {

enum class Format {
  kUnknown,
  kPt,            // torch.save zip (torch >= 1.6)
  kPtLegacy,      // torch.save non-zip "1001" pickle stream
  kPtTar,         // pre-0.4 tar checkpoint (recognised, refused)
  kTorchScript,   // TorchScript / torch.package zip (recognised, refused)
  kTensordictDir, // tensordict memmap directory
  kTdz,           // tensordict .tdz archive
  kPskd,          // .psk.d sample file
  kSafetensors,   // Hugging Face .safetensors
  kShardedIndex,  // *.index.json of a sharded checkpoint (or a directory holding one)
};

std::string_view FormatName(Format format);  // "pt", "pt-legacy", "tensordict", "tdz", "pskd", "safetensors", ...
Format DetectFormat(const std::string& path);

// Throws Error with the path as context.
Document Open(const std::string& path, const ReadOptions& options = {});

}  // namespace trove
