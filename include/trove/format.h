// trove/format.h: the name of a format trove knows.
//
// A Format says what a path holds, as detection (trove/open.h) finds it and as a writer's target
// (trove/convert.h) names it. It is a name, not an enumeration: each format is a driver in its own
// folder (src/formats/<name>/) that registers itself (docs/architecture.md, "Adding a format"), so
// a new format adds no case here. The constants below name the formats code outside their folders
// asks for by name; any registered format is `Format("npy")`. Plain values; thread-safe.
#pragma once

#include <string_view>

namespace trove {

class Format {
 public:
  constexpr Format() = default;  // unknown: nothing trove reads
  constexpr explicit Format(std::string_view name) : name_(name) {}

  // "pt", "pt-legacy", "pt-tar", "torchscript", "tensordict", "tdz", "pskd", "safetensors",
  // "sharded", "npy", "npz", ...; "unknown" for the default value.
  constexpr std::string_view name() const { return name_.empty() ? std::string_view("unknown") : name_; }
  constexpr bool known() const { return !name_.empty(); }
  friend constexpr bool operator==(const Format& a, const Format& b) { return a.name_ == b.name_; }

  static const Format kUnknown;
  static const Format kPt;             // torch.save zip (torch >= 1.6)
  static const Format kPtLegacy;       // torch.save non-zip "1001" pickle stream
  static const Format kPtTar;          // pre-0.4 tar checkpoint (recognised, refused)
  static const Format kTorchScript;    // TorchScript / torch.package archive
  static const Format kTensordictDir;  // tensordict memmap directory
  static const Format kTdz;            // tensordict .tdz archive
  static const Format kPskd;           // .psk.d sample file
  static const Format kSafetensors;    // Hugging Face .safetensors
  static const Format kShardedIndex;   // *.index.json of a sharded checkpoint (or a directory holding one)

 private:
  std::string_view name_;
};

inline constexpr Format Format::kUnknown{};
inline constexpr Format Format::kPt{"pt"};
inline constexpr Format Format::kPtLegacy{"pt-legacy"};
inline constexpr Format Format::kPtTar{"pt-tar"};
inline constexpr Format Format::kTorchScript{"torchscript"};
inline constexpr Format Format::kTensordictDir{"tensordict"};
inline constexpr Format Format::kTdz{"tdz"};
inline constexpr Format Format::kPskd{"pskd"};
inline constexpr Format Format::kSafetensors{"safetensors"};
inline constexpr Format Format::kShardedIndex{"sharded"};

constexpr std::string_view FormatName(Format format) { return format.name(); }

}  // namespace trove
