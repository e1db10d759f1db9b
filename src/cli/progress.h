// cli/progress.h: the progress line of the commands that stream bytes (convert, pack, unpack,
// verify, diff, stats, report, cat --raw, cat text into a file or a pipe) and the closing line
// of those with no summary of their own.
//
// Driven by the library's progress callbacks (WriteOptions::progress, DiffOptions::progress,
// StatsOptions::progress, VerifyOptions::progress: Callback() returns one to install): on a
// terminal, once the work has lasted a second (TROVE_PROGRESS_DELAY seconds), stderr shows bytes,
// rate and time left, refreshed four times a second by a thread of its own (the callback only
// stores two numbers), and the line is erased at the end. Off a terminal, or when the command writes --json, nothing is shown. The
// line holds only numbers and trove's own carriage return and erase, written past the escaping of
// std::cerr (cli/escaped_output.h: ExactStderr).
//
// Lifetime: one per command run, on the main thread; the callback may be called from any thread
// while the object lives.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace trove::cli {

class Progress {
 public:
  // `shown`: false for output that must stay exactly what it is (--json): nothing is ever shown.
  explicit Progress(bool shown = true);
  ~Progress();  // End()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // For WriteOptions::progress; valid while this object lives. Thread-safe.
  std::function<void(uint64_t, uint64_t)> Callback();
  // Stops the line and erases it (before the command prints); later calls of the callback show
  // nothing. Idempotent.
  void End();
  // Since the object was made.
  double Seconds() const;

 private:
  void Run();
  std::atomic<uint64_t> done_{0};
  std::atomic<uint64_t> total_{0};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// A command's closing line, "<text> in 1.2 s" (the seconds given), on stderr when stderr is a
// terminal: what was done, for a command whose output says nothing of it. Never in a pipe.
// `text` is trove's own words; what comes from a file or the command line is escaped by the caller.
void PrintClosingLine(const std::string& text, double seconds);

}  // namespace trove::cli
