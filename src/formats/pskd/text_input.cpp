// Chunked text reading with carried tails (see text_input.h).
#include "formats/pskd/text_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trove/atomic_file.h"
#include "trove/pskd.h"

namespace trove::pskd {
namespace {

// Large enough to amortise system calls, small enough to stay in cache-sized memory.
constexpr size_t kChunkBytes = size_t{1} << 20;

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

TextInput::TextInput(const std::string& path, Cut cut) : path_(path), cut_(cut) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) FailPskd(PskdCode::kNotPskd, "cannot read " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    FailPskd(PskdCode::kNotPskd, "cannot read " + path + ": is a directory");
  }
  buffer_.resize(kChunkBytes);
}

TextInput::~TextInput() {
  if (fd_ >= 0) ::close(fd_);
}

size_t TextInput::CutPoint(size_t filled) const {
  switch (cut_) {
    case Cut::kUtf8: {
      // Cut before the last character's lead byte; a complete one is just carried over.
      for (size_t back = 1; back <= 4 && back <= filled; ++back) {
        unsigned char c = static_cast<unsigned char>(buffer_[filled - back]);
        if (c < 0x80) return filled - back + 1;
        if ((c & 0xC0) != 0x80) return filled - back;
      }
      return filled;  // not UTF-8: the decoder will say where
    }
    case Cut::kWhitespace:
      for (size_t i = filled; i-- > 0;) {
        if (IsSpace(buffer_[i])) return i + 1;
      }
      return 0;
    case Cut::kLine:
      for (size_t i = filled; i-- > 0;) {
        if (buffer_[i] == '\n') return i + 1;
      }
      return 0;
  }
  return filled;
}

std::string_view TextInput::Next() {
  // Move the carried tail to the front.
  size_t filled = carry_end_ - carry_begin_;
  if (filled > 0 && carry_begin_ > 0) std::memmove(buffer_.data(), buffer_.data() + carry_begin_, filled);
  carry_begin_ = carry_end_ = 0;
  while (true) {
    while (!eof_ && filled < buffer_.size()) {
      ssize_t n = ::read(fd_, buffer_.data() + filled, buffer_.size() - filled);
      if (n < 0) {
        if (errno == EINTR) {
          ThrowIfInterrupted();  // a signal during a write: stop waiting for input
          continue;
        }
        FailPskd(PskdCode::kTruncated, path_ + ": read: " + std::strerror(errno));
      }
      if (n == 0) {
        eof_ = true;
        break;
      }
      filled += static_cast<size_t>(n);
    }
    size_t cut = eof_ ? filled : CutPoint(filled);
    if (cut > 0 || filled == 0) {
      carry_begin_ = cut;
      carry_end_ = filled;
      chunk_offset_ = consumed_;
      consumed_ += cut;
      return {buffer_.data(), cut};
    }
    // One record fills the whole buffer: grow it to hold the record.
    if (buffer_.size() >= kMaxRecordBytes) {
      FailPskd(PskdCode::kBadValue, path_ + ", offset " + std::to_string(consumed_) + ": a line or token of more than " +
                                        std::to_string(kMaxRecordBytes) + " bytes");
    }
    buffer_.resize(buffer_.size() * 2);
  }
}

}  // namespace trove::pskd
