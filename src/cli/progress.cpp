#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "cli/escaped_output.h"

namespace trove::cli {

Progress::Progress(bool shown) {
  if (shown && ::isatty(STDERR_FILENO)) thread_ = std::thread([this] { Run(); });
}

Progress::~Progress() { End(); }

void Progress::End() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

double Progress::Seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

void PrintClosingLine(const std::string& text, double seconds) {
  if (::isatty(STDERR_FILENO)) std::cerr << text << fmt::format(" in {:.1f} s", seconds) << '\n';
}

std::function<void(uint64_t, uint64_t)> Progress::Callback() {
  return [this](uint64_t done, uint64_t total) {
    total_.store(total, std::memory_order_relaxed);
    done_.store(done, std::memory_order_relaxed);
  };
}

// How long work lasts before its progress line shows: TROVE_PROGRESS_DELAY seconds (as git's
// GIT_PROGRESS_DELAY), 1 by default. At 0 the line shows however short the work, at least once
// before it is erased, so that scripts driving a terminal (and the tests) see it for certain.
double ProgressDelaySeconds() {
  const char* text = std::getenv("TROVE_PROGRESS_DELAY");
  if (text == nullptr || *text == '\0') return 1.0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  return (*end == '\0' && std::isfinite(seconds) && seconds >= 0) ? seconds : 1.0;
}

void Progress::Run() {
  using namespace std::chrono;
  const double delay = ProgressDelaySeconds();
  // A command of several steps (report: statistics, then the comparison) starts each with a new
  // total: the rate and time left are of the current step.
  auto step_start = started_;
  uint64_t step_total = 0;
  bool shown = false;
  auto show = [&](steady_clock::time_point now, uint64_t total) {
    const double secs = std::max(duration<double>(now - step_start).count(), 0.25);
    const uint64_t done = std::min(done_.load(std::memory_order_relaxed), total);
    const double rate = done / secs;
    const double left = rate > 0 ? (total - done) / rate : 0;
    ExactStderr() << fmt::format("\r{:.1f}/{:.1f} MB  {:.0f} MB/s  {:.0f} s left   ", done / 1e6, total / 1e6, rate / 1e6, left);
    shown = true;
  };
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, milliseconds(250), [this] { return stop_; })) {
    const auto now = steady_clock::now();
    const uint64_t total = total_.load(std::memory_order_relaxed);
    if (total != step_total) {
      if (step_total != 0) step_start = now;
      step_total = total;
    }
    if (duration<double>(now - started_).count() < delay || total == 0) continue;
    show(now, total);
  }
  const uint64_t total = total_.load(std::memory_order_relaxed);
  if (!shown && delay == 0 && total != 0) show(steady_clock::now(), total);
  if (shown) ExactStderr() << "\r\033[K";
}

}  // namespace trove::cli
