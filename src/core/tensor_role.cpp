#include "core/tensor_role.h"

#include <array>
#include <cctype>
#include <string>

#include "trove/dtype.h"

namespace trove {
namespace {

// The key path's components, split at '/' and at '.' (module names).
template <typename F>
void ForEachComponent(std::string_view key, F&& f) {
  size_t at = 0;
  while (at <= key.size()) {
    const size_t end = std::min(key.find_first_of("/.", at), key.size());
    f(key.substr(at, end - at));
    at = end + 1;
  }
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

constexpr std::array<std::string_view, 8> kMomentNames = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer",
                                                          "square_avg", "acc_delta", "sum", "step"};
constexpr std::array<std::string_view, 3> kRunningStatistics = {"running_mean", "running_var", "num_batches_tracked"};

}  // namespace

TensorRole RoleOf(std::string_view key, const TensorView& view) {
  bool optimizer = false, rng = false, under_state = false;
  std::string_view last;
  ForEachComponent(key, [&](std::string_view c) {
    const std::string lower = Lower(c);
    if (lower.starts_with("optim")) optimizer = true;
    if (lower.find("rng") != std::string::npos) rng = true;
    if (lower == "state") under_state = true;
    last = c;
  });
  for (std::string_view m : kMomentNames) {
    if (under_state && last == m) optimizer = true;
  }
  if (optimizer) return TensorRole::kOptimizerState;
  const DTypeKind kind = Info(view.dtype).kind;
  if (kind == DTypeKind::kInt || kind == DTypeKind::kUInt || kind == DTypeKind::kBool || kind == DTypeKind::kBits) {
    return TensorRole::kOther;
  }
  if (rng) return TensorRole::kOther;
  for (std::string_view s : kRunningStatistics) {
    if (last == s) return TensorRole::kOther;
  }
  return TensorRole::kParameter;
}

}  // namespace trove
