#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>

#include "cli/escaped_output.h"

namespace trove::cli {

Progress::Progress() {
  if (::isatty(STDERR_FILENO)) thread_ = std::thread([this] { Run(); });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::function<void(uint64_t, uint64_t)> Progress::Callback() {
  return [this](uint64_t done, uint64_t total) {
    total_.store(total, std::memory_order_relaxed);
    done_.store(done, std::memory_order_relaxed);
  };
}

void Progress::Run() {
  using namespace std::chrono;
  const auto t0 = steady_clock::now();
  bool shown = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, milliseconds(250), [this] { return stop_; })) {
    const double secs = duration<double>(steady_clock::now() - t0).count();
    const uint64_t total = total_.load(std::memory_order_relaxed);
    if (secs < 1.0 || total == 0) continue;
    const uint64_t done = std::min(done_.load(std::memory_order_relaxed), total);
    const double rate = done / secs;
    const double left = rate > 0 ? (total - done) / rate : 0;
    ExactStderr() << fmt::format("\r{:.1f}/{:.1f} MB  {:.0f} MB/s  {:.0f} s left   ", done / 1e6, total / 1e6, rate / 1e6, left);
    shown = true;
  }
  if (shown) ExactStderr() << "\r\033[K";
}

}  // namespace trove::cli
