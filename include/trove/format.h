// trove/format.h: the names of the formats trove knows.
//
// A Format says what a path holds, as detection (trove/open.h) finds it and as a writer's target
// (trove/convert.h) names it. Plain values; thread-safe.
#pragma once

#include <string_view>

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

// The formats held in a zip container (torch zips, TorchScript archives, .tdz).
inline bool IsZipFormat(Format f) { return f == Format::kPt || f == Format::kTorchScript || f == Format::kTdz; }

}  // namespace trove
