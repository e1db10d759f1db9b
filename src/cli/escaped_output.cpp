#include "cli/escaped_output.h"

#include <iostream>
#include <mutex>
#include <streambuf>
#include <string>

#include "core/display_escape.h"

namespace trove::cli {
namespace {

// A streambuf without a buffer of its own: every write is escaped and passed on at once (so it
// stays in order with writes that bypass it), except the start of a UTF-8 sequence cut at the
// end of a write, held until the rest comes.
class EscapingBuf : public std::streambuf {
 public:
  explicit EscapingBuf(std::streambuf* target) : target_(target) {}

  // Writes what is held, escaped as the bytes they are.
  void Finish() {
    std::lock_guard<std::mutex> lock(mu_);
    Pass(0);
    target_->pubsync();
  }

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
  }

  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard<std::mutex> lock(mu_);
    held_.append(s, static_cast<size_t>(n));
    return Pass(IncompleteUtf8Tail(held_)) ? n : 0;
  }

  int sync() override {
    std::lock_guard<std::mutex> lock(mu_);
    return target_->pubsync();
  }

 private:
  // Escapes and writes what is held but its last `keep` bytes.
  bool Pass(size_t keep) {
    const std::string text = EscapeForDisplay(std::string_view(held_).substr(0, held_.size() - keep), DisplayEscape::kLines);
    held_.erase(0, held_.size() - keep);
    return target_->sputn(text.data(), static_cast<std::streamsize>(text.size())) == static_cast<std::streamsize>(text.size());
  }

  std::streambuf* target_;
  std::mutex mu_;
  std::string held_;
};

std::ostream* g_exact_stdout = nullptr;
std::ostream* g_exact_stderr = nullptr;

}  // namespace

struct EscapedStandardStreams::State {
  std::streambuf* cout_buf = std::cout.rdbuf();
  std::streambuf* cerr_buf = std::cerr.rdbuf();
  EscapingBuf escaping_cout{cout_buf};
  EscapingBuf escaping_cerr{cerr_buf};
  std::ostream exact_stdout{cout_buf};
  std::ostream exact_stderr{cerr_buf};
};

EscapedStandardStreams::EscapedStandardStreams() : state_(std::make_unique<State>()) {
  state_->exact_stderr.setf(std::ios::unitbuf);  // as std::cerr: each write goes out at once
  g_exact_stdout = &state_->exact_stdout;
  g_exact_stderr = &state_->exact_stderr;
  std::cout.rdbuf(&state_->escaping_cout);
  std::cerr.rdbuf(&state_->escaping_cerr);
}

EscapedStandardStreams::~EscapedStandardStreams() {
  std::cout.flush();
  std::cerr.flush();
  state_->escaping_cout.Finish();
  state_->escaping_cerr.Finish();
  std::cout.rdbuf(state_->cout_buf);
  std::cerr.rdbuf(state_->cerr_buf);
  g_exact_stdout = nullptr;
  g_exact_stderr = nullptr;
}

std::ostream& ExactStdout() { return g_exact_stdout ? *g_exact_stdout : std::cout; }
std::ostream& ExactStderr() { return g_exact_stderr ? *g_exact_stderr : std::cerr; }

}  // namespace trove::cli
