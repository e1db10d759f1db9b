// cli/progress.h: the progress line of convert, pack and unpack.
//
// Driven by the writers' WriteOptions::progress callback (Callback() returns one to install):
// on a terminal, once the work has lasted a second, stderr shows bytes, rate and time left,
// refreshed four times a second by a thread of its own (the callback only stores two numbers),
// and the line is erased at the end. Off a terminal nothing is shown. The line holds only numbers
// and trove's own carriage return and erase, written past the escaping of std::cerr
// (cli/escaped_output.h: ExactStderr).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace trove::cli {

class Progress {
 public:
  Progress();
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // For WriteOptions::progress; valid while this object lives. Thread-safe.
  std::function<void(uint64_t, uint64_t)> Callback();

 private:
  void Run();
  std::atomic<uint64_t> done_{0};
  std::atomic<uint64_t> total_{0};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace trove::cli
