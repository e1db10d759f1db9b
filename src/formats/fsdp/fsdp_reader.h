// formats/fsdp/fsdp_reader.h: FSDP / verl per-rank checkpoint files as one checkpoint.
//
// FSDP's LOCAL_STATE_DICT and SHARDED_STATE_DICT saved with a plain torch.save per rank
// (`model_rank0.pt`, `rank_0.pt`, verl's `model_world_size_W_rank_R.pt`, ...) hold state dicts
// whose values are ShardedTensors (torch 1.13: local shards with their offsets and sizes) or
// DTensors (torch >= 2: a local tensor, a device mesh and placements), beside plain tensors and
// other values. A directory of such files, the rank number the only difference between their
// names, is read as ONE checkpoint: every sharded value is its global tensor, assembled from the
// ranks' local shards when its bytes are read (SharedBytes::Deferred: a streaming pass holds that
// one tensor); the shards must tile it (formats/dcp/dcp_layout.h, shared with DCP); replicated
// copies (a plain tensor on every rank, a replicated DTensor) are taken once and checked equal.
// Each file is read by the pt reader under the policy asked for, with exactly the classes of
// ShardedTensor and DTensor read as data (docs/security.md); files are opened by the rule for
// files a directory holds (core/confined_directory.h).
// Thread-safe: the functions share no state; a document's assembled tensors may be read from
// several threads (each pass assembles its own copy).
#pragma once

#include <cstdint>
#include <string>

#include "core/progress.h"
#include "trove/document.h"
#include "trove/findings.h"

namespace trove {

// Ranks one checkpoint may have: more than any run, and it bounds the files opened before their
// contents are compared (and a DTensor's device mesh, whose entries are ranks).
inline constexpr uint64_t kMaxFsdpRanks = uint64_t{1} << 16;
// Containers nested around a state dict's values: a model's (1), an optimizer's (3), verl's
// extra state (a few). Deeper nesting is no state dict; it bounds the key paths built.
inline constexpr size_t kMaxFsdpNesting = 64;

// True for a directory holding files named `<prefix>rank[_-]<R><.pt|.pth|.bin>` (their ranks are
// checked when read).
bool IsFsdpDirectory(const std::string& directory);

// Throws Error naming the file, the key and the ranks: a missing rank, what the pt reader refuses
// in any file (code-running globals by name), sharded values whose shards overlap, leave a hole or
// lie outside the global shape, ranks that disagree on a value's global shape or dtype, a tensor
// on one rank and not another, placements trove does not read (Partial, _StridedShard).
// Replicated copies that differ are an error when the tensor's bytes are read.
Document ReadFsdpCheckpoint(const std::string& directory, const ReadOptions& options);

// Everything reading checks, every file's zip CRCs, and every tensor assembled once (each
// replicated copy compared): findings naming the file or key. `progress` (VerifyOptions::progress)
// sees two steps: the files' bytes, then the assembled tensors'.
void VerifyFsdpCheckpoint(const std::string& directory, CheckReport& report,
                          const ProgressReporter::Callback& progress);

// What torch.load (weights_only=False, as FSDP's and verl's loaders call it) would run: each
// rank file's pickles, findings under "<file>/<entry>".
void ScanFsdpCheckpoint(const std::string& directory, CheckReport& report);

}  // namespace trove
