// Deferred bytes that say which file ranges they are made of (DeferredSource::Pieces): every
// streaming read reads those ranges in turn, writers get mapped runs whole, and a part of them
// (SharedBytes::OwnSlice) reads only the pieces it overlaps: another piece's file may be
// truncated meanwhile without an error, as long as the part does not reach it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "trove/error.h"
#include "trove/shared_bytes.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

fs::path TestDir() {
  fs::path dir = fs::temp_directory_path() / ("trove_pieces_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::string Pattern(size_t size, int seed) {
  std::string s(size, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + i / 4099) & 0xff);
  return s;
}

// Two files' ranges back to back; producing them whole is counted (the tests want it never).
class TwoFiles : public DeferredSource {
 public:
  TwoFiles(SharedBytes a, SharedBytes b) : a_(std::move(a)), b_(std::move(b)) {}
  SharedBytes Produce() const override {
    ++produced;
    std::vector<uint8_t> out(a_.data(), a_.data() + a_.size());
    out.insert(out.end(), b_.data(), b_.data() + b_.size());
    return SharedBytes::FromVector(std::move(out));
  }
  std::optional<std::vector<SharedBytes>> Pieces(uint64_t offset, uint64_t length) const override {
    std::vector<SharedBytes> out;
    const uint64_t end = offset + length;
    if (offset < a_.size()) out.push_back(a_.Slice(offset, std::min(end, a_.size()) - offset));
    if (end > a_.size()) {
      const uint64_t from = std::max(offset, a_.size()) - a_.size();
      out.push_back(b_.Slice(from, end - a_.size() - from));
    }
    return out;
  }
  mutable std::atomic<int> produced{0};

 private:
  SharedBytes a_, b_;
};

struct Fixture {
  fs::path dir = TestDir();
  std::string a = Pattern((3 << 20) + 17, 1), b = Pattern((2 << 20) + 5, 2);
  std::shared_ptr<MappedFile> fa, fb;
  std::shared_ptr<TwoFiles> source;
  SharedBytes bytes;
  Fixture() {
    std::ofstream(dir / "a.bin", std::ios::binary) << a;
    std::ofstream(dir / "b.bin", std::ios::binary) << b;
    fa = MappedFile::Open((dir / "a.bin").string());
    fb = MappedFile::Open((dir / "b.bin").string());
    // Unaligned ranges of each file: the first from byte 9, the second up to 3 bytes short.
    source = std::make_shared<TwoFiles>(fa->Slice(9, a.size() - 9), fb->Slice(0, b.size() - 3));
    bytes = SharedBytes::Deferred(source, a.size() - 9 + b.size() - 3);
  }
  ~Fixture() { fs::remove_all(dir); }
  std::string Expected(uint64_t offset, uint64_t length) const {
    return (a.substr(9) + b.substr(0, b.size() - 3)).substr(offset, length);
  }
};

TEST(DeferredSliceTest, StreamReaderAndRunsReadThePiecesInOrderNeverTheWhole) {
  Fixture f;
  std::string streamed;
  f.bytes.Stream([&](const uint8_t* p, size_t n) { streamed.append(reinterpret_cast<const char*>(p), n); });
  EXPECT_EQ(streamed, f.Expected(0, f.bytes.size()));
  // A reader across the seam, after a skip into the first piece.
  SharedBytes::Reader reader(f.bytes);
  reader.Skip(1000);
  std::string read(f.bytes.size() - 1000, '\0');
  reader.Read(reinterpret_cast<uint8_t*>(read.data()), 12345);
  reader.Read(reinterpret_cast<uint8_t*>(read.data()) + 12345, read.size() - 12345);
  EXPECT_EQ(read, f.Expected(1000, f.bytes.size() - 1000));
  // Runs: each mapped piece whole, at its place in its mapping (a writer's kernel copy).
  std::vector<std::pair<const uint8_t*, size_t>> runs;
  f.bytes.Slice(5, f.bytes.size() - 10).ForEachRun([&](const uint8_t* p, size_t n) { runs.emplace_back(p, n); });
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].first, f.fa->data() + 9 + 5);
  EXPECT_EQ(runs[0].second, f.a.size() - 9 - 5);
  EXPECT_EQ(runs[1].first, f.fb->data());
  EXPECT_EQ(runs[1].second, f.b.size() - 3 - 5);
  EXPECT_EQ(f.bytes.Pieces().size(), 2u);
  EXPECT_EQ(f.source->produced.load(), 0);
}

TEST(DeferredSliceTest, AnOwnSliceReadsOnlyThePiecesItOverlaps) {
  Fixture f;
  const uint64_t at = 4096, length = f.a.size() - 9 - 4096 - 100;  // inside a.bin's range
  const SharedBytes part = f.bytes.OwnSlice(at, length);
  // Another program truncates b.bin: reading it would be an error; the part never reaches it.
  fs::resize_file(f.dir / "b.bin", 0);
  std::string got;
  RunGuardingTruncation([&] { got.assign(reinterpret_cast<const char*>(part.data()), part.size()); });
  EXPECT_EQ(got, f.Expected(at, length));
  EXPECT_EQ(f.source->produced.load(), 0);
  // A part reaching b.bin's range reads it, and the truncation is the error, naming the file.
  const SharedBytes across = f.bytes.OwnSlice(at, f.a.size());
  try {
    RunGuardingTruncation([&] { (void)across.data(); });
    ADD_FAILURE() << "no error for a truncated piece";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("b.bin"), std::string::npos) << e.message();
  }
  // Bytes that are not deferred: an OwnSlice is a Slice.
  const SharedBytes mapped = f.fa->Slice(0, 100).OwnSlice(10, 20);
  EXPECT_EQ(mapped.data(), f.fa->data() + 10);
  EXPECT_FALSE(mapped.deferred());
}

}  // namespace
}  // namespace trove
