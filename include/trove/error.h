// trove/error.h: the one error type of the library.
//
// Every failure is a trove::Error carrying a code, a reason and the fields that say where it
// happened: the file, the entry (record, member, key) inside it, the byte offset, the spec's own
// code where the format's specification has one (.psk.d's E9001-E9005), the refused pickle global
// where a resolver refused one, and a chain of context phrases ("storage '3'", "line 4"). Inner
// code states the reason; outer code fills the fields as the error propagates outward (SetFile,
// SetEntry, SetOffset, AddContext, or WithContext around a call). message() renders them in the
// order they were added, outermost first, which for a pickle refusal reads
//   "model.pt: archive/data.pkl @ 57: refused global 'posix.system'"
// (an offset joins what precedes it with a space, everything else with ": "; a spec code comes
// right before the reason: "data.pskd: E9002: bad magic"). Code that needs to know where an error
// happened reads the fields, never the message. Errors are plain values; they are
// thread-compatible like std::string.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
  // One element of the where-chain, as message() renders it.
  enum class PartKind : uint8_t { kFile, kEntry, kOffset, kContext };
  struct Part {
    PartKind kind;
    std::string text;  // the path, entry name, decimal offset or context phrase
  };

  Error(ErrorCode code, std::string reason) : code_(code), reason_(std::move(reason)) { Render(); }

  ErrorCode code() const noexcept { return code_; }
  // What went wrong, without where: "refused global 'posix.system'".
  const std::string& reason() const noexcept { return reason_; }
  // The file the error is about ("" when no layer named one).
  const std::string& file() const noexcept { return file_; }
  // The record / entry / member inside the file ("" when none).
  const std::string& entry() const noexcept { return entry_; }
  // The byte offset (in the entry when there is one, else in the file).
  std::optional<uint64_t> offset() const noexcept { return offset_; }
  // The specification's own error number (9004 for .psk.d's E9004), if the format's spec has one.
  std::optional<int> spec_code() const noexcept { return spec_code_; }
  // The pickle global a resolver refused ("posix.system"), "" for any other error.
  const std::string& refused_global() const noexcept { return refused_global_; }
  // The context phrases, outermost first (file, entry and offset are not among them).
  std::vector<std::string> contexts() const;
  // Everything message() renders before the reason, outermost first.
  const std::vector<Part>& parts() const noexcept { return parts_; }

  // The rendered text, its names as the file holds them (control characters included).
  const std::string& message() const noexcept { return message_; }
  const char* what() const noexcept override { return message_.c_str(); }
  // message() without the "E9004: " spec code (tools that print the code apart).
  std::string MessageWithoutSpecCode() const;
  // message() as a person is shown it (the command line's stderr, Python's exception text):
  // every character a terminal would act on escaped (src/core/display_escape.h, docs/security.md),
  // the file and the entry as names (a backslash doubled), so a file cannot rewrite the screen.
  std::string DisplayMessage() const;
  // DisplayMessage() without the spec code.
  std::string DisplayMessageWithoutSpecCode() const;
  // message() without the file, entry and/or offset parts (a Finding states those apart).
  std::string MessageWithout(bool file, bool entry, bool offset) const;

  // Each setter returns *this so that `throw e.SetFile(path)` works. The first file, entry and
  // offset set win: they are set by the innermost code, which knows the most specific place, so a
  // second SetFile (an outer layer naming the same file again) changes nothing.
  Error& SetFile(std::string_view path);
  Error& SetEntry(std::string_view entry);
  Error& SetOffset(uint64_t offset);
  // Sets file() without rendering it, for an error whose text names the file already (the
  // tensordict tree readers' messages start with the path they describe).
  Error& NoteFile(std::string_view path);
  Error& SetSpecCode(int code);
  Error& SetRefusedGlobal(std::string_view dotted);
  // Prefixes a context phrase (rendered "context: ..."); empty contexts are ignored.
  Error& AddContext(std::string_view context);

 private:
  void Render();

  ErrorCode code_;
  std::string reason_;
  std::string file_;
  std::string entry_;
  std::optional<uint64_t> offset_;
  std::optional<int> spec_code_;
  std::string refused_global_;
  std::vector<Part> parts_;  // outermost first
  std::string message_;      // parts_, spec code and reason rendered
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

// Runs fn(); an Error escaping it names `path` as its file (unless one is named already).
template <class F>
auto WithFile(std::string_view path, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (Error& e) {
    e.SetFile(path);
    throw;
  }
}

// Runs fn(); an Error escaping it names `entry` as its entry (unless one is named already).
template <class F>
auto WithEntry(std::string_view entry, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (Error& e) {
    e.SetEntry(entry);
    throw;
  }
}

}  // namespace trove
