// tests/core/copy_mapped_bytes_test.cpp: CopyMappedBytes: bytes of a MappedFile copied by the
// kernel into a writer's file.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

// A new directory `name` (under the temporary directory, with the process id) holding src.bin:
// `size` bytes of a pattern that repeats neither within a page nor page to page.
std::string PatternFile(const std::string& name, size_t size, fs::path* dir) {
  *dir = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::create_directories(*dir);
  std::string pattern(size, '\0');
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>((i * 131 + i / 4099) & 0xff);
  std::ofstream(*dir / "src.bin", std::ios::binary) << pattern;
  return pattern;
}

// Large writes of mapped bytes go through the kernel (copy_file_range) straight from the mapped
// file; what lands must be exactly those bytes at the writer's position; what the kernel cannot
// copy goes through a buffer, and bytes outside any mapping fall back to the caller.
TEST(CopyMappedBytesTest, CopiesFromTheFileFallsBackAndNamesATruncatedSource) {
  fs::path dir;
  const std::string pattern = PatternFile("trove-copy", 3 * 1024 * 1024 + 123, &dir);
  const fs::path src = dir / "src.bin";
  auto file = MappedFile::Open(src.string());
  const uint64_t at = 4097, length = 2 * 1024 * 1024 + 7;  // unaligned on both sides
  SharedBytes slice = file->Slice(at, length);
  {
    AtomicFile out((dir / "out.bin").string());
    out.Write("head!", 5);  // buffered, so the copy must land after it
    out.Write(slice.data(), slice.size());
    out.Write("tail", 4);
    out.Commit();
  }
  std::ifstream in(dir / "out.bin", std::ios::binary);
  std::string got((std::istreambuf_iterator<char>(in)), {});
  // 4097 in the source, 5 in the destination: offsets within a page differ, so this went through
  // the buffer (pread and write); the next one, page offsets equal, through copy_file_range.
  EXPECT_EQ(got, "head!" + pattern.substr(at, length) + "tail");
  const uint64_t aligned_at = 4096 + 8, aligned_length = 2 * 1024 * 1024 + 9;
  {
    AtomicFile out((dir / "aligned.bin").string());
    out.Write("8 bytes!", 8);
    out.Write(file->data() + aligned_at, aligned_length);
    out.Commit();
  }
  std::ifstream aligned_in(dir / "aligned.bin", std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(aligned_in)), {}),
            "8 bytes!" + pattern.substr(aligned_at, aligned_length));

  std::vector<uint8_t> heap(4096, 7);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  EXPECT_EQ(CopyMappedBytes(pipe_fds[1], heap.data(), heap.size(), "pipe"), 0u);  // not a mapping
  // The kernel cannot copy into a pipe (nor across file systems): the bytes go through the buffer.
  EXPECT_EQ(CopyMappedBytes(pipe_fds[1], slice.data(), 4096, "pipe"), 4096u);
  std::string piped(4096, '\0');
  ASSERT_EQ(::read(pipe_fds[0], piped.data(), piped.size()), 4096);
  EXPECT_EQ(piped, pattern.substr(at, 4096));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);

  fs::resize_file(src, 1024 * 1024);  // another program shrinks the file under the mapping
  int out_fd = ::open((dir / "after.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(out_fd, 0);
  try {
    CopyMappedBytes(out_fd, file->data() + 2 * 1024 * 1024, 4096, "after.bin");
    ADD_FAILURE() << "no error for a truncated source";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("src.bin: changed while being read"), std::string::npos)
        << e.what();
  }
  // The same through the buffer (source 1 byte into a page, destination at 0): the read ends
  // early at the new end of file, after half of the range was written.
  try {
    CopyMappedBytes(out_fd, file->data() + 512 * 1024 + 1, 1024 * 1024, "after.bin");
    ADD_FAILURE() << "no error for a truncated source copied through the buffer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("src.bin: changed while being read"), std::string::npos)
        << e.what();
  }
  ::close(out_fd);
  fs::remove_all(dir);
}

// A copy's first piece ends on a 256 KiB block of the destination and the rest start on one
// (docs/performance.md): whatever the destination's position relative to those blocks, through
// copy_file_range (equal offsets within a page) and through the buffer (different ones), the
// bytes land in order, once each.
TEST(CopyMappedBytesTest, LandsExactlyWhereverTheDestinationStarts) {
  fs::path dir;
  const std::string pattern = PatternFile("trove-copy-blocks", 3 * 1024 * 1024 + 321, &dir);
  auto file = MappedFile::Open((dir / "src.bin").string());
  const uint64_t kBlock = 256 * 1024;
  for (const uint64_t prefix : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, kBlock - 1, kBlock, kBlock + 1, kBlock + 4096 + 64}) {
    for (const uint64_t from : {uint64_t{64}, uint64_t{4096 + 5}, prefix % 4096 + 8192}) {
      const uint64_t length = 2 * 1024 * 1024 + 77;
      const fs::path out_path = dir / "out.bin";
      const int fd = ::open(out_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      ASSERT_GE(fd, 0);
      const std::string head(prefix, 'h');
      ASSERT_EQ(::write(fd, head.data(), head.size()), static_cast<ssize_t>(head.size()));
      EXPECT_EQ(CopyMappedBytes(fd, file->data() + from, length, out_path.string()), length);
      EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), static_cast<off_t>(prefix + length));  // the position follows the bytes
      ::close(fd);
      std::ifstream in(out_path, std::ios::binary);
      const std::string got((std::istreambuf_iterator<char>(in)), {});
      EXPECT_TRUE(got == head + pattern.substr(from, length)) << "prefix " << prefix << ", from " << from;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trove
