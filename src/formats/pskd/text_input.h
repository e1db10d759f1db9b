// formats/pskd/text_input.h: streaming a text file in chunks that end at a safe cut point.
//
// The text commands (chars, encode, pack, lm-windows) read their input through a fixed buffer so
// that their memory does not grow with the file. Each chunk ends where the next one can start
// cleanly (a whole UTF-8 character, whitespace, or a line end); the unfinished tail is carried
// into the next chunk. Not thread-safe; one object per input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trove::pskd {

// A chunk grows past its initial size only to hold one record (line or token) that does not fit;
// beyond this a line is refused rather than held (far above any line of real text or samples).
inline constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 30;

class TextInput {
 public:
  enum class Cut { kUtf8, kWhitespace, kLine };
  // E9002 when the path cannot be opened.
  TextInput(const std::string& path, Cut cut);
  ~TextInput();
  TextInput(const TextInput&) = delete;
  TextInput& operator=(const TextInput&) = delete;

  // The next chunk; empty at the end of the file. Valid until the next call.
  std::string_view Next();
  uint64_t chunk_offset() const { return chunk_offset_; }  // of the last chunk's first byte
  const std::string& path() const { return path_; }

 private:
  size_t CutPoint(size_t filled) const;
  std::string path_;
  Cut cut_;
  int fd_ = -1;
  bool eof_ = false;
  std::vector<char> buffer_;
  size_t carry_begin_ = 0, carry_end_ = 0;  // the unfinished tail of the last chunk
  uint64_t consumed_ = 0;                   // bytes returned in chunks so far
  uint64_t chunk_offset_ = 0;
};

}  // namespace trove::pskd
