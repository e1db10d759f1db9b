// cli/escaped_output.h: the command line's last step for text, under the escaping of the commands.
//
// Every command escapes the text it takes from a file where it formats it (core/display_escape.h;
// so a table measures its columns on the escaped text). As a safety net, EscapedStandardStreams
// puts the same rule (DisplayEscape::kLines: newline and tab kept, backslashes kept) under
// std::cout and std::cerr for as long as it lives, so that a path which missed the escaping
// still cannot put a raw control character on a terminal. What must stay exact does not pass
// through it: --json output goes to ExactStdout(), trove's own terminal control (the progress
// line's carriage return and erase) to ExactStderr(), and cat's --raw bytes and numbers are
// written with C stdio, which it never sees.
//
// One EscapedStandardStreams per process, made on the main thread before any output and ended
// after the last; the streams may be written from any thread meanwhile (each write is
// serialised). Without one, ExactStdout() and ExactStderr() are std::cout and std::cerr.
#pragma once

#include <memory>
#include <ostream>

namespace trove::cli {

class EscapedStandardStreams {
 public:
  EscapedStandardStreams();
  // Writes what it still holds (the start of a UTF-8 sequence that never ended, escaped) and
  // gives std::cout and std::cerr their own buffers back.
  ~EscapedStandardStreams();
  EscapedStandardStreams(const EscapedStandardStreams&) = delete;
  EscapedStandardStreams& operator=(const EscapedStandardStreams&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Standard output and error without the net: JSON (which escapes what it must itself, and must
// stay byte-exact) and trove's own terminal control sequences.
std::ostream& ExactStdout();
std::ostream& ExactStderr();

}  // namespace trove::cli
