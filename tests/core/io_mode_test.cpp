// trove/io_mode.h: mapped bytes read with pread give the same bytes as the mapping, in windows
// and through a Reader's buffer, and so does auto on a hot, a cold and a partly cached file; a
// file shorter than its mapping is the guard's error, in pread mode without any SIGBUS (no guard
// is installed there: a read through the mapping would kill the test).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "trove/error.h"
#include "trove/io_mode.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

// Restores the default mode whatever a test ends with.
struct IoModeScope {
  explicit IoModeScope(IoMode mode) { SetIoMode(mode); }
  ~IoModeScope() { SetIoMode(IoMode::kAuto); }
};

fs::path MakePatternFile(const std::string& name, size_t size) {
  fs::path dir = fs::temp_directory_path() / ("trove_io_mode_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path p = dir / name;
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

std::vector<uint8_t> Streamed(const SharedBytes& b) {
  std::vector<uint8_t> out;
  b.Stream([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
  return out;
}

// Reads the bytes with a Reader in uneven pieces: small ones (through its buffer), one larger
// than the buffer (straight into ours), skips in between.
std::vector<uint8_t> ReadInPieces(const SharedBytes& b) {
  std::vector<uint8_t> out(b.size(), 0);
  SharedBytes::Reader r(b);
  const size_t pieces[] = {1, 4095, 70000, 3 << 20, 12345};
  for (size_t i = 0; r.remaining() > 0; ++i) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(pieces[i % 5], r.remaining()));
    if (i % 7 == 3) {
      r.Skip(n);  // left zero in out
    } else {
      r.Read(out.data() + r.position(), n);
    }
  }
  return out;
}

TEST(IoMode, NamesRoundTrip) {
  for (IoMode m : {IoMode::kAuto, IoMode::kMmap, IoMode::kPread}) EXPECT_EQ(ParseIoMode(IoModeName(m)), m);
  EXPECT_FALSE(ParseIoMode("bogus"));
  EXPECT_FALSE(ParseIoMode(""));
}

TEST(IoMode, PreadGivesTheMappingsBytes) {
  const fs::path src = MakePatternFile("pattern.bin", (20 << 20) + 777);  // several windows, a ragged end
  auto file = MappedFile::Open(src.string());
  const SharedBytes slice = file->Slice(4099, file->size() - 4099 - 5);
  std::vector<uint8_t> mapped_stream, mapped_pieces;
  {
    IoModeScope mode(IoMode::kMmap);
    EXPECT_FALSE(slice.ReadsWithPread());
    mapped_stream = Streamed(slice);
    mapped_pieces = ReadInPieces(slice);
  }
  ASSERT_EQ(mapped_stream, std::vector<uint8_t>(slice.data(), slice.data() + slice.size()));
  {
    IoModeScope mode(IoMode::kPread);
    EXPECT_TRUE(slice.ReadsWithPread());
    EXPECT_EQ(Streamed(slice), mapped_stream);
    EXPECT_EQ(ReadInPieces(slice), mapped_pieces);
  }
  {
    // auto: pread for what the page cache holds (all of it, here: the file was just written and
    // read), the mapping for the rest; the same bytes either way.
    IoModeScope mode(IoMode::kAuto);
    EXPECT_TRUE(slice.ReadsWithPread());
    EXPECT_EQ(Streamed(slice), mapped_stream);
    EXPECT_EQ(ReadInPieces(slice), mapped_pieces);
    // Cold (its pages evicted), then partly cached: every other 1 MiB read back in, so that
    // windows are read partly without waiting and the rest through the mapping.
    const int fd = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ::fsync(fd);
    for (bool partly : {false, true}) {
      auto evict = [&] {
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        std::vector<char> buffer(1 << 20);
        for (off_t at = 0; partly && at < static_cast<off_t>(file->size()); at += 2 << 20) {
          ASSERT_GE(::pread(fd, buffer.data(), buffer.size(), at), 0);
        }
      };
      evict();
      EXPECT_EQ(Streamed(slice), mapped_stream) << (partly ? "partly cached" : "cold");
      evict();
      EXPECT_EQ(ReadInPieces(slice), mapped_pieces) << (partly ? "partly cached" : "cold");
    }
    ::close(fd);
  }
  // Bytes that are not a file's mapping are never pread.
  IoModeScope mode(IoMode::kPread);
  EXPECT_FALSE(SharedBytes::CopyOf("abc", 3).ReadsWithPread());
  fs::remove_all(src.parent_path());
}

TEST(IoMode, ShortReadIsTheChangedFileError) {
  const fs::path src = MakePatternFile("shrinks.bin", 12 << 20);
  auto file = MappedFile::Open(src.string());
  IoModeScope mode(IoMode::kPread);
  fs::resize_file(src, 5 << 20);  // another program shrinks the file under the mapping
  auto expect_changed = [&](const std::function<void()>& read) {
    try {
      read();
      ADD_FAILURE() << "no error for a file shrunk under its mapping";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kIo);
      EXPECT_NE(e.message().find(src.string() + ": changed while being read"), std::string::npos) << e.message();
    }
  };
  expect_changed([&] { Streamed(file->bytes()); });
  expect_changed([&] { ReadInPieces(file->bytes()); });
  fs::remove_all(src.parent_path());
}

TEST(IoMode, AutoOnAShrunkFileIsTheChangedFileError) {
  // auto reads what is past the end through the mapping: under the guard, as every command runs.
  IoModeScope mode(IoMode::kAuto);
  for (int reader = 0; reader < 2; ++reader) {
    // A new file each time: the guard leaves a changed file's mapping zero pages.
    const fs::path src = MakePatternFile("shrinks_auto.bin", 12 << 20);
    auto file = MappedFile::Open(src.string());
    fs::resize_file(src, 5 << 20);
    try {
      RunGuardingTruncation([&] { reader ? (void)ReadInPieces(file->bytes()) : (void)Streamed(file->bytes()); });
      ADD_FAILURE() << "no error for a file shrunk under its mapping";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kIo);
      EXPECT_NE(e.message().find(src.string() + ": changed while being read"), std::string::npos) << e.message();
    }
    file.reset();
    fs::remove_all(src.parent_path());
  }
}

// CopyOut: a mapped file's bytes read with pread (in every mode), held bytes copied; a range
// outside the bytes is refused; a file shrunk under its mapping is the changed-file error.
TEST(IoMode, CopyOutGivesTheBytesWithoutTheMapping) {
  const fs::path src = MakePatternFile("copy_out.bin", 3 << 20);
  auto file = MappedFile::Open(src.string());
  const SharedBytes bytes = file->bytes().Slice(4096 + 17, (2 << 20) + 5);
  for (IoMode m : {IoMode::kMmap, IoMode::kPread, IoMode::kAuto}) {
    IoModeScope mode(m);
    std::vector<uint8_t> got(1000);
    bytes.CopyOut(12345, got.data(), got.size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), bytes.data() + 12345)) << IoModeName(m);
  }
  const SharedBytes held = SharedBytes::CopyOf(bytes.data(), 100);
  uint8_t small[10];
  held.CopyOut(90, small, 10);
  EXPECT_TRUE(std::equal(small, small + 10, bytes.data() + 90));
  EXPECT_THROW(held.CopyOut(91, small, 10), Error);
  EXPECT_THROW(bytes.CopyOut(bytes.size() + 1, small, 0), Error);
  fs::resize_file(src, 1 << 20);
  try {
    bytes.CopyOut((2 << 20) - 10, small, 10);
    ADD_FAILURE() << "no error for a file shrunk under its mapping";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(src.string() + ": changed while being read"), std::string::npos) << e.message();
  }
  file.reset();
  fs::remove_all(src.parent_path());
}

}  // namespace
}  // namespace trove
