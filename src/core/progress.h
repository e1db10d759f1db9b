// Reporting WriteOptions::progress (trove/write_options.h) and VerifyOptions::progress
// (trove/checks.h) at a bounded rate.
//
// A writer makes one ProgressReporter for the bytes of tensors it will write, calls Add as they
// stream (per chunk or per tensor, from any of its threads) and Finish once they are all written.
// The callback is called at most once per kProgressStepBytes of progress, plus once at Finish
// with (total, total): so a file of N bytes gets at most N / kProgressStepBytes + 1 calls however
// many tensors or chunks it has (one more for a reporter whose Begin is called: (0, total)). Calls are serialized (a mutex: never two at once, even from a
// directory writer's helper threads) and their first argument never decreases nor exceeds total.
// An exception thrown by the callback propagates out of Add or Finish.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>

namespace trove {

// The bytes between two calls of a progress callback (before the final one).
inline constexpr uint64_t kProgressStepBytes = uint64_t{4} << 20;

class ProgressReporter {
 public:
  using Callback = std::function<void(uint64_t, uint64_t)>;
  // `callback` may be empty (then nothing is ever called); it must outlive the reporter.
  ProgressReporter(const Callback& callback, uint64_t total) : callback_(callback), total_(total) {}
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  bool active() const { return static_cast<bool>(callback_); }
  uint64_t total() const { return total_; }
  // Shows the step from its start: calls (0, total). For a step that counts nothing for a while
  // (verify's parse of a large pickle, a directory's archives opened one by one), so that a long
  // one is never a blank screen. A step begun with nothing to count (total 0) makes no call at
  // all, Finish's included: (0, 0) would take the previous step off the progress line.
  // Thread-safe.
  void Begin();
  // `bytes` more are written. Thread-safe.
  void Add(uint64_t bytes);
  // Everything is written: calls (total, total) unless that was the last call. Thread-safe.
  void Finish();

 private:
  const Callback& callback_;
  const uint64_t total_;
  std::mutex mutex_;
  uint64_t done_ = 0;
  uint64_t reported_ = 0;
  bool finished_ = false;
  bool begun_ = false;
};

}  // namespace trove
