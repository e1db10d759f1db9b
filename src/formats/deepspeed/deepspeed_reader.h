// formats/deepspeed/deepspeed_reader.h: a DeepSpeed ZeRO (stage 1, 2 or 3) checkpoint directory
// as one checkpoint: the fp32 master weights by parameter name with their shapes, the frozen
// parameters, buffers and tied names; opt-in beside them (Document::opt_in_prefixes) the module's
// 16-bit weights under "module/" and the optimizer's per-element state under "optimizer/<state>/".
// Tensor- and pipeline-parallel directories (mp_rank_01 and up, layer_* files) are refused.
//
// The directory is a checkpoint root whose `latest` file names a tag (a subdirectory), or the
// tag directory (`global_stepN/`) itself. It holds `mp_rank_00_model_states.pt` (stage 3:
// `zero_pp_rank_0_mp_rank_00_model_states.pt`: param_shapes, buffers, shared params) and one
// `[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt` per data-parallel rank (each rank's fp32
// partitions). Every file is read by the pt reader under the policy asked for (DeepSpeed's
// classes are inert objects; its ZeroStageEnum members are read as data). A parameter lying in one
// rank's partition is a zero-copy view of it; one spread over several is assembled when its bytes
// are read (SharedBytes::Deferred: a streaming pass holds that one tensor). Files are opened by
// the rule for files a directory holds (core/confined_directory.h).
// Thread-safe: the functions share no state; a document's assembled tensors may be read from
// several threads (each pass assembles its own copy).
#pragma once

#include <string>

#include "core/progress.h"
#include "trove/document.h"
#include "trove/findings.h"

namespace trove {

inline constexpr std::string_view kDeepSpeedLatestName = "latest";

// True for a directory whose `latest` names a tag directory holding a model-states file and a
// rank's optimizer states, or a directory holding both itself.
bool IsDeepSpeedDirectory(const std::string& directory);

// Throws Error naming the file and parameter: a `latest` tag outside the directory, a missing
// rank file, world sizes that disagree, partitions whose sizes disagree with param_shapes
// (formats/deepspeed/zero_layout.h), what the pt reader refuses in any file.
Document ReadDeepSpeedCheckpoint(const std::string& directory, const ReadOptions& options);

// Everything reading checks, then every file's zip CRCs and every assembled tensor's pieces;
// `progress` (VerifyOptions::progress) sees one step over the files' bytes.
void VerifyDeepSpeedCheckpoint(const std::string& directory, CheckReport& report,
                               const ProgressReporter::Callback& progress);

// What DeepSpeed runs: every file is torch.load'ed with weights_only=False; each file's pickles
// are scanned with torch's resolver, findings under "<file>/<entry>".
void ScanDeepSpeedCheckpoint(const std::string& directory, CheckReport& report);

}  // namespace trove
