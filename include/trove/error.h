// trove/error.h: the one error type of the library.
//
// Every failure is a trove::Error carrying a code and a message. The message gains context as the
// error propagates outward ("model.pt: archive/data.pkl @ 57: refused global 'posix.system'"):
// inner code states the reason, outer code prefixes where it happened with AddContext or
// WithContext. Errors are plain values; they are thread-compatible like std::string.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <utility>

namespace trove {

enum class ErrorCode {
  kUsage,        // the caller asked for something that makes no sense (bad key, bad option)
  kIo,           // the operating system refused (open, read, write, rename, disk full)
  kNotFound,     // a named file, record or key does not exist
  kCorrupt,      // the bytes do not follow the format (truncated, inconsistent, out of bounds)
  kRefused,      // well-formed but not allowed: code execution, unknown globals, path escapes
  kUnsupported,  // a valid feature trove does not implement (quantized tensors, tar format)
  kLimit,        // a named resource cap was exceeded (see the constant named in the message)
};

std::string_view ErrorCodeName(ErrorCode code);

class Error : public std::exception {
 public:
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const char* what() const noexcept override { return message_.c_str(); }

  // Prefixes "context: " to the message. Returns *this so that `throw e.AddContext(...)` works.
  Error& AddContext(std::string_view context);

 private:
  ErrorCode code_;
  std::string message_;
};

[[noreturn]] void Fail(ErrorCode code, std::string message);

// Runs fn(); an Error escaping it gets `context` prefixed.
template <class F>
auto WithContext(std::string_view context, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (Error& e) {
    e.AddContext(context);
    throw;
  }
}

}  // namespace trove
