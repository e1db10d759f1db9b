#include "core/progress.h"

#include <algorithm>

namespace trove {

void ProgressReporter::Begin() {
  if (!callback_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (begun_ || finished_ || done_ > 0) return;
  begun_ = true;
  if (total_ > 0) callback_(0, total_);
}

void ProgressReporter::Add(uint64_t bytes) {
  if (!callback_ || bytes == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = std::min(total_, done_ + std::min(bytes, total_));
  if (finished_ || done_ - reported_ < kProgressStepBytes || done_ == total_) return;  // the last call is Finish's
  reported_ = done_;
  callback_(done_, total_);
}

void ProgressReporter::Finish() {
  if (!callback_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  if (begun_ && total_ == 0) return;
  done_ = reported_ = total_;
  callback_(total_, total_);
}

}  // namespace trove
