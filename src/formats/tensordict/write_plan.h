// formats/tensordict/write_plan.h: what a Document becomes on disk, decided before any write.
//
// PlanTensordict walks a Document's tree once and produces the whole layout of format version 1:
// for each directory its meta.json text, its other files (leaf payloads as references to the
// Document's TensorViews, never copies) and its sub-directories. Every check happens here (keys
// the format would lose, file-name collisions, values JSON cannot hold, dtypes tensordict cannot
// load), so a writer that starts writing has nothing left to refuse. The directory writer and
// the archive writer both emit a plan; the plan borrows the Document, which must outlive it.
// Not thread-safe (plain data, built and consumed by one caller).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trove/document.h"

namespace trove::tensordict {

// The string meta.json entry that marks a level written from a Python list or tuple. tensordict
// skips entries that are not objects, so it loads such a level as a TensorDict with keys
// "0", "1", ...; trove reads it back as a list ("list") or a tuple ("tuple").
inline constexpr const char* kSequenceMarker = "_trove_sequence";
// The meta.json entry listing a level's keys that were Python ints (an optimizer state's 0, 1,
// ...): a tensordict's keys are str, and tensordict skips this entry (an array, not an object);
// trove reads those keys back as ints, so a .pt -> .tdz -> .pt round trip keeps them.
inline constexpr const char* kIntKeysMarker = "_trove_int_keys";

struct PlannedFile {
  std::string name;                             // file name inside its directory
  std::string bytes;                            // small files: meta.json, nested sizes
  std::vector<const TensorView*> tensors;       // leaf payload: these views' C-order bytes, in turn
  uint64_t size = 0;                            // total payload bytes
  bool is_memmap() const;                       // a ".memmap" file (aligned or compressed in archives)
  // Calls fn with consecutive chunks of the payload (bounded scratch for non-contiguous views); a
  // leaf held contiguously in its source run by run (SharedBytes::ForEachRun: a mapped run whole,
  // for the kernel to copy). With `stored`, such a leaf goes to it whole instead, as the view of
  // its bytes (which may carry their recorded CRC-32).
  void Emit(const std::function<void(const uint8_t*, size_t)>& fn,
            const std::function<void(const SharedBytes&)>& stored = nullptr) const;
};

struct PlannedDir {
  std::string name;                             // inside its parent ("" for the root)
  PlannedFile meta;                             // meta.json
  std::vector<PlannedFile> files;               // sorted by name
  std::vector<std::unique_ptr<PlannedDir>> dirs;  // sorted by name
};

// Throws Error(kUsage/kUnsupported/kLimit) naming the key path when the Document cannot be
// written exactly. Dict keys that are not str (an optimizer state's int 0) are written as their
// text, as tensordict's keys are str: ints are listed in kIntKeysMarker (trove reads them back
// as ints); `note` names any other kind (a float, None, a tuple, a class), which reads back as str.
std::unique_ptr<PlannedDir> PlanTensordict(const Document& doc, const std::function<void(const std::string&)>& note);

// The payload bytes of every file holding tensors in the tree: what a writer's progress counts.
uint64_t TensorBytes(const PlannedDir& dir);

}  // namespace trove::tensordict
