// cli/pager.h: long output on a terminal goes through a pager, as git's does.
//
// While an OutputPager lives, standard output (every writer of file descriptor 1: std::cout
// through its escaping, ExactStdout(), C stdio) goes into a pipe that a thread of its own reads.
// Output that fits the terminal's height is written to the terminal unchanged when the pager
// ends; once it is taller, the pager command starts with what came so far and gets the rest as it
// comes (memory stays bounded by one screen). The command is $TROVE_PAGER, else $PAGER, else
// `less`, run by /bin/sh as git runs it, with LESS=FRX when LESS is unset (F: quit when it fits,
// R: keep colours, X: leave the text on the screen). An empty command or `cat` means no pager, and
// so does a command whose program is not found (the text is then printed directly).
// Nothing changes off a terminal: a pipe or a file gets the output as it is written.
//
// The output stays what the command wrote: the escaping of file-controlled text
// (cli/escaped_output.h) happens before it, so the pager receives escaped text.
//
// While paging, StdoutTerminalFd() is the terminal's descriptor, so that the commands still size
// and colour their tables for it. One OutputPager at a time, made and ended on the main thread.
#pragma once

#include <memory>
#include <string>

namespace trove::cli {

class OutputPager {
 public:
  // `wanted`: false for --json and --no-pager (nothing changes). Also nothing when standard
  // output is no terminal or no pager command is configured.
  explicit OutputPager(bool wanted);
  // End().
  ~OutputPager();
  OutputPager(const OutputPager&) = delete;
  OutputPager& operator=(const OutputPager&) = delete;

  // Flushes standard output, gives descriptor 1 back, and waits for the pager when one runs
  // (until the person quits it). Idempotent.
  void End();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The descriptor standard output's terminal is on: STDOUT_FILENO, or the terminal saved while an
// OutputPager captures descriptor 1.
int StdoutTerminalFd();

// The pager command to run, or "" for none: $TROVE_PAGER, else $PAGER, else "less"; "" for an
// empty one and for "cat".
std::string PagerCommand();

}  // namespace trove::cli
