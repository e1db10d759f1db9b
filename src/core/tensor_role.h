// core/tensor_role.h: what a tensor of a checkpoint is for, as info and stats count it.
//
// "parameters" in a summary means the model's weights: a training checkpoint also holds the
// optimizer's moments (often twice the model), RNG states, running statistics and integer
// counters, and counting those as parameters made a checkpoint look three times its model.
// The rule, by key path and dtype (docs/json.md says it for --json users):
// - optimizer state: a key path component that starts with "optim" (optimizer, optimizer_states,
//   optim_state...), or a torch optimizer's per-parameter state: a moment name (exp_avg,
//   exp_avg_sq, max_exp_avg_sq, momentum_buffer, square_avg, acc_delta, sum, step) under a
//   component "state";
// - other: integer, unsigned, bool and bits tensors; a component holding "rng" (RNG states); running
//   statistics (running_mean, running_var, num_batches_tracked as the last name);
// - parameters: every other tensor (floating, complex, quantized and ggml block types).
// Pure functions; thread-safe.
#pragma once

#include <string_view>

#include "trove/tensor.h"

namespace trove {

enum class TensorRole { kParameter, kOptimizerState, kOther };

TensorRole RoleOf(std::string_view key, const TensorView& view);

}  // namespace trove
