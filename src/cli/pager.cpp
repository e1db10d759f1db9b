#include "cli/pager.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/escaped_output.h"

extern char** environ;

namespace trove::cli {
namespace {

int g_terminal_fd = -1;  // the terminal while an OutputPager holds descriptor 1

// Writes all of `data` to `fd`; false when the reader is gone (EPIPE) or another error.
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Whether the program a shell command starts with can be run: its first word, as a path or
// searched in PATH. (A command the shell cannot find would lose the output: it is printed instead.)
bool ProgramFound(const std::string& command) {
  const size_t begin = command.find_first_not_of(" \t");
  if (begin == std::string::npos) return false;
  const std::string word = command.substr(begin, command.find_first_of(" \t", begin) - begin);
  auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (word.find('/') != std::string::npos) return runnable(word);
  // Shell syntax in the first word (a variable, quotes): the shell decides.
  if (word.find_first_of("$'\"`=\\") != std::string::npos) return true;
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (size_t at = 0; at <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string dir = dirs.substr(at, end - at);
    if (runnable((dir.empty() ? std::string(".") : dir) + "/" + word)) return true;
    at = end + 1;
  }
  return false;
}

}  // namespace

std::string PagerCommand() {
  const char* command = std::getenv("TROVE_PAGER");
  if (command == nullptr) command = std::getenv("PAGER");
  if (command == nullptr) command = "less";
  const std::string text = command;
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const size_t end = text.find_last_not_of(" \t");
  if (text.substr(begin, end + 1 - begin) == "cat") return "";
  return text;
}

int StdoutTerminalFd() { return g_terminal_fd >= 0 ? g_terminal_fd : STDOUT_FILENO; }

struct OutputPager::State {
  int tty = -1;          // the terminal, as descriptor 1 was
  int captured = -1;     // the read end of the pipe now on descriptor 1
  size_t rows = 24, columns = 80;
  std::string command;
  pid_t pager = -1;
  int pager_input = -1;  // the write end of the pager's standard input
  std::thread reader;
  bool ended = false;

  // Starts the pager on a pipe; false when it cannot be started (the output is then printed).
  bool StartPager() {
    if (!ProgramFound(command)) return false;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    std::vector<std::string> env_text;
    for (char** e = environ; *e != nullptr; ++e) env_text.emplace_back(*e);
    if (std::getenv("LESS") == nullptr) env_text.emplace_back("LESS=FRX");
    if (std::getenv("LV") == nullptr) env_text.emplace_back("LV=-c");
    std::vector<char*> envp;
    for (std::string& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string sh = "sh", dash_c = "-c";
    char* argv[] = {sh.data(), dash_c.data(), command.data(), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, tty, STDOUT_FILENO);
    const int failed = ::posix_spawn(&pager, "/bin/sh", &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[0]);
    if (failed != 0) {
      ::close(fds[1]);
      pager = -1;
      return false;
    }
    pager_input = fds[1];
    // As git: Ctrl-C belongs to the pager while it runs (less stops its search or scrolling);
    // the command ends when the pager does (below). Only read-only commands page.
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGQUIT, SIG_IGN);
    return true;
  }

  // The reader thread: holds the output until it is taller than the terminal, then pages it.
  void Read() {
    // A pager quit before the end makes writes to it fail (EPIPE) instead of ending this thread;
    // the pipe is then closed, so that the command's next write ends it (SIGPIPE), as git ends
    // when its pager is quit. A terminal that fails is read to the end and dropped instead.
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
    std::string held;
    size_t used_rows = 0, column = 0;
    bool escape = false;
    enum { kHolding, kPaging, kDirect, kDropping } mode = kHolding;
    std::vector<char> buffer(size_t{1} << 16);
    for (;;) {
      const ssize_t n = ::read(captured, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      const char* data = buffer.data();
      const size_t size = static_cast<size_t>(n);
      if (mode == kHolding) {
        held.append(data, size);
        // Rows on the screen: lines, long ones wrapped; colour sequences take no room, a UTF-8
        // character one column.
        for (size_t i = 0; i < size; ++i) {
          const unsigned char c = static_cast<unsigned char>(data[i]);
          if (escape) {
            if (c >= 0x40 && c <= 0x7E && c != '[') escape = false;
          } else if (c == 0x1B) {
            escape = true;
          } else if (c == '\n') {
            used_rows += 1 + (column > 0 ? (column - 1) / columns : 0);
            column = 0;
          } else if (c == '\r') {
            column = 0;
          } else if ((c & 0xC0) != 0x80) {
            ++column;
          }
        }
        if (used_rows + (column > 0 ? 1 : 0) < rows) continue;
        mode = StartPager() ? kPaging : kDirect;
        if (!WriteAll(mode == kPaging ? pager_input : tty, held.data(), held.size())) mode = kDropping;
        held.clear();
        held.shrink_to_fit();
      } else if (mode != kDropping) {
        if (!WriteAll(mode == kPaging ? pager_input : tty, data, size)) mode = kDropping;
      }
      if (mode == kDropping && pager_input >= 0) {
        ::close(captured);
        captured = -1;
        break;
      }
    }
    if (mode == kHolding) WriteAll(tty, held.data(), held.size());
    if (pager_input >= 0) {
      ::close(pager_input);
      pager_input = -1;
    }
  }
};

OutputPager::OutputPager(bool wanted) {
  if (!wanted || ::isatty(STDOUT_FILENO) != 1 || g_terminal_fd >= 0) return;
  std::string command = PagerCommand();
  if (command.empty()) return;
  auto state = std::make_unique<State>();
  state->command = std::move(command);
  struct winsize size {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0) {
    if (size.ws_row > 0) state->rows = size.ws_row;
    if (size.ws_col > 0) state->columns = size.ws_col;
  }
  std::cout.flush();
  ExactStdout().flush();
  std::fflush(stdout);
  int fds[2];
  state->tty = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (state->tty < 0) return;
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    ::close(state->tty);
    return;
  }
  if (::dup2(fds[1], STDOUT_FILENO) < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    ::close(state->tty);
    return;
  }
  ::close(fds[1]);
  state->captured = fds[0];
  g_terminal_fd = state->tty;
  State* s = state.get();
  try {
    state->reader = std::thread([s] { s->Read(); });
  } catch (const std::system_error&) {
    ::dup2(state->tty, STDOUT_FILENO);  // no thread: output goes to the terminal as without a pager
    ::close(state->captured);
    ::close(state->tty);
    g_terminal_fd = -1;
    return;
  }
  state_ = std::move(state);
}

OutputPager::~OutputPager() { End(); }

void OutputPager::End() {
  if (!state_ || state_->ended) return;
  state_->ended = true;
  std::cout.flush();
  ExactStdout().flush();
  std::fflush(stdout);
  ::dup2(state_->tty, STDOUT_FILENO);  // closes the pipe's last write end: the reader sees its end
  state_->reader.join();
  if (state_->captured >= 0) ::close(state_->captured);
  if (state_->pager > 0) {
    int status = 0;
    while (::waitpid(state_->pager, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ::close(state_->tty);
  g_terminal_fd = -1;
}

}  // namespace trove::cli
