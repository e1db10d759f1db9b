// trove's model of a .psk.d file (ReadPskd/WritePskd), and reading a large file by mapping.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "formats/pskd/pskd_reader.h"
#include "formats/pskd/pskd_text.h"
#include "trove/pskd.h"
#include "pskd_test_support.h"
#include "trove/pipeline.h"

namespace trove::pskd {
namespace {

using testing::TempDir;
using testing::WriteFile;

// Element i of a view, through its strides (rank 2 or less).
template <class T>
T At(const TensorView& v, int64_t i, int64_t j = 0) {
  int64_t offset = v.storage_offset + i * v.strides[0] + (v.strides.size() > 1 ? j * v.strides[1] : 0);
  T out;
  std::memcpy(&out, v.storage.data() + offset * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return out;
}

TEST(ReadPskdTest, LeavesAreStridedViewsIntoTheMapping) {
  TempDir tmp;
  SampleType type = ParseSampleType("(ℝ[2], (idx[70000][], ℝ[]))");
  type.SetEncodings({Encoding::kF32, Encoding::kF64, Encoding::kF32});  // 8 + 4 + 4 = 16 bytes a sample
  {
    PskdWriter w(tmp.Path("m.psk.d"), type);
    SampleEncoder enc(w.type());
    for (int i = 0; i < 5; ++i) {
      enc.Reset();
      enc.PutReal(i);
      enc.PutReal(-i);
      enc.PutIndex(static_cast<uint64_t>(60000 + i));
      enc.PutReal(i + 0.5);
      w.Append(enc.bytes());
    }
    w.Commit();
  }
  auto file = MappedFile::Open(tmp.Path("m.psk.d"));
  Document doc = ReadPskd(file, {});
  EXPECT_EQ(doc.format, "pskd");
  EXPECT_EQ(*doc.Property("type"), "(ℝ[2], (idx[70000][], ℝ[]))");
  EXPECT_EQ(*doc.Property("count"), "5");
  EXPECT_EQ(*doc.Property("version"), "2");
  EXPECT_EQ(*doc.Property("encodings"), "f32, u32, f32");  // the index leaf by its width
  EXPECT_EQ(doc.root->type_name, "dict");  // a plain dict: every writer takes it (.pt too)
  ASSERT_EQ(doc.tensors.size(), 3u);
  EXPECT_EQ(doc.tensors[0].key, "0");
  EXPECT_EQ(doc.tensors[1].key, "1/0");
  EXPECT_EQ(doc.tensors[2].key, "1/1");
  const TensorView& reals = *doc.tensors[0].view;
  EXPECT_EQ(reals.dtype, DType::kFloat32);
  EXPECT_EQ(reals.shape, (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(reals.strides, (std::vector<int64_t>{4, 1}));
  EXPECT_TRUE(reals.storage.SameOwner(file->bytes()));  // zero-copy
  EXPECT_EQ(At<float>(reals, 3, 1), -3.0f);
  const TensorView& ids = *doc.tensors[1].view;
  EXPECT_EQ(ids.dtype, DType::kUInt32);
  EXPECT_EQ(ids.shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(ids.strides, (std::vector<int64_t>{4}));
  EXPECT_EQ(At<uint32_t>(ids, 4), 60004u);
  EXPECT_EQ(At<float>(*doc.tensors[2].view, 2), 2.5f);
  // Interleaved with other leaves, a leaf is no storage of its own: writers store its elements,
  // and info counts them, not the sample records under it.
  for (const NamedTensor& t : doc.tensors) EXPECT_EQ(t.view->storage_index, -1) << t.key;
  EXPECT_EQ(ids.nbytes(), 20u);
  // The contiguous bytes of a leaf are its values in order.
  SharedBytes c = reals.ContiguousLittleEndian();
  ASSERT_EQ(c.size(), 40u);
  float f[10];
  std::memcpy(f, c.data(), 40);
  EXPECT_EQ(f[8], 4.0f);
  EXPECT_EQ(f[9], -4.0f);
}

TEST(ReadPskdTest, MisalignedLeavesAreGathered) {
  TempDir tmp;
  // 1 + 8 = 9 bytes a sample: the f64 leaf cannot be expressed in element strides.
  std::string bytes = testing::HeaderBytes(1, "(idx[3][], ℝ[])", 2);
  for (int i = 0; i < 2; ++i) {
    double d = 1.5 * i;
    bytes += static_cast<char>(i);
    bytes.append(reinterpret_cast<const char*>(&d), 8);
  }
  WriteFile(tmp.Path("g.psk.d"), bytes);
  Document doc = ReadPskd(MappedFile::Open(tmp.Path("g.psk.d")), {});
  const TensorView& ids = *doc.tensors[0].view;
  EXPECT_EQ(ids.strides, (std::vector<int64_t>{9}));
  EXPECT_EQ(At<uint8_t>(ids, 1), 1);
  const TensorView& reals = *doc.tensors[1].view;
  EXPECT_EQ(reals.strides, (std::vector<int64_t>{1}));
  EXPECT_EQ(At<double>(reals, 1), 1.5);
}

TEST(ReadPskdTest, ALeafAloneIsItsOwnStorage) {
  TempDir tmp;
  std::string bytes = testing::HeaderBytes(1, "ℝ[3]", 2);
  for (int i = 0; i < 6; ++i) {
    const double d = i;
    bytes.append(reinterpret_cast<const char*>(&d), 8);
  }
  WriteFile(tmp.Path("one.psk.d"), bytes);
  Document doc = ReadPskd(MappedFile::Open(tmp.Path("one.psk.d")), {});
  ASSERT_EQ(doc.tensors.size(), 1u);
  const TensorView& v = *doc.tensors[0].view;
  EXPECT_EQ(v.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(v.storage_index, 0);
  EXPECT_EQ(v.storage.size(), 48u);
  EXPECT_TRUE(v.is_contiguous());
}

TEST(ReadPskdTest, ParamsFileIsE9001) {
  TempDir tmp;
  WriteFile(tmp.Path("p.psk.d"), testing::HeaderBytes(1, "params MiniGPT", 1) + "x");
  EXPECT_PSKD_ERROR(ReadPskd(MappedFile::Open(tmp.Path("p.psk.d")), {}), PskdCode::kNotClosedType);
}

TEST(WritePskdTest, ConvertsADocumentAndReadsItBack) {
  TempDir tmp;
  SampleType type = ParseSampleType("(ℝ[2], idx[300][3], bool[])");
  type.SetEncodings({Encoding::kBF16, Encoding::kF64, Encoding::kF64});
  {
    PskdWriter w(tmp.Path("src.psk.d"), type);
    SampleEncoder enc(w.type());
    for (int i = 0; i < 4; ++i) {
      enc.Reset();
      enc.PutReal(i * 0.5);
      enc.PutReal(-1);
      for (int j = 0; j < 3; ++j) enc.PutIndex(static_cast<uint64_t>(i * 10 + j));
      enc.PutIndex(i % 2);
      w.Append(enc.bytes());
    }
    w.Commit();
  }
  Document doc = ReadPskd(MappedFile::Open(tmp.Path("src.psk.d")), {});
  WritePskd(doc, tmp.Path("dst.psk.d"), {});
  PskdFile dst = PskdFile::Open(tmp.Path("dst.psk.d"));
  // The source's type is kept (its bound 300, its bool leaf), which the tensors alone do not say;
  // reals keep their encoding.
  EXPECT_EQ(dst.type().text, "(ℝ[2], idx[300][3], bool[])");
  EXPECT_EQ(dst.header().version, 2);
  EXPECT_EQ(dst.type().leaves[0].encoding, Encoding::kBF16);
  EXPECT_EQ(dst.count(), 4u);
  // Tensors chosen by --keys are no longer the source's leaves: their type is inferred (idx N
  // becomes max + 1; the bool leaf reads as idx[2] and stays idx[2]).
  Document part = ReadPskd(MappedFile::Open(tmp.Path("src.psk.d")), {});
  part.tensors.erase(part.tensors.begin());
  WritePskd(part, tmp.Path("part.psk.d"), {});
  EXPECT_EQ(PskdFile::Open(tmp.Path("part.psk.d")).type().text, "(idx[33][3], idx[2][])");
  PskdFile src = PskdFile::Open(tmp.Path("src.psk.d"));
  std::string a, b;
  for (uint64_t i = 0; i < 4; ++i) {
    AppendSampleText(src.type(), src.Sample(i), true, 0, a);
    AppendSampleText(dst.type(), dst.Sample(i), true, 0, b);
  }
  EXPECT_EQ(a, b);
  PskdWriteOptions vocab300, vocab8;
  vocab300.vocab = 300;
  vocab8.vocab = 8;
  WritePskd(doc, tmp.Path("v.psk.d"), vocab300);
  EXPECT_EQ(PskdFile::Open(tmp.Path("v.psk.d")).type().text, "(ℝ[2], idx[300][3], idx[300][])");
  EXPECT_THROW(WritePskd(doc, tmp.Path("small.psk.d"), vocab8), Error);
  EXPECT_FALSE(std::filesystem::exists(tmp.Path("small.psk.d")));
}

constexpr uint64_t kBigSamples = 1 << 18;  // 256 Ki samples
constexpr uint64_t kBigSampleValues = 128;  // idx[65536][128]: 256 bytes a sample, 64 MiB in all
uint64_t BigValue(uint64_t i, uint64_t e) { return (i * 2654435761u + e * 40503u) & 0xFFFF; }

// Reads 4 random samples and a shuffled batch of 4; returns the number of wrong values.
int ReadSome(const std::string& path, bool check) {
  int failures = 0;
  PskdFile file = PskdFile::Open(path);
  std::mt19937_64 rng(5);
  for (int k = 0; k < 4; ++k) {
    uint64_t i = rng() % file.count();
    auto s = file.Sample(i);
    for (uint64_t e = 0; e < kBigSampleValues; e += 17) failures += check && LoadIndex(s.data() + 2 * e, 2) != BigValue(i, e);
  }
  BatchLoader loader(file);
  Pipeline pipeline(file.count(), {9, 4, 1});
  Batch batch;
  for (const auto& indices : pipeline.Batches(0)) {
    loader.Load(indices, batch);
    for (size_t b = 0; b < indices.size(); ++b) {
      failures += check && LoadIndex(batch.leaves[0].data() + b * 256, 2) != BigValue(indices[b], 0);
    }
  }
  return failures;
}

// The measuring child: this test binary re-executed with TROVE_PSKD_RSS_BIG/SMALL set. A fresh
// process (not a fork, whose resident counters start from shared pages it has not faulted in)
// runs the reading code on the small file first, then measures the big file's growth, and exits
// before GoogleTest starts: 0 bounded and correct, 1 wrong values, 2 grew with the file.
[[maybe_unused]] const int kRssChild = [] {
  const char* big = std::getenv("TROVE_PSKD_RSS_BIG");
  const char* small = std::getenv("TROVE_PSKD_RSS_SMALL");
  if (big == nullptr || small == nullptr) return 0;
  int failures = ReadSome(small, false);
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  failures += ReadSome(big, true);
  ::getrusage(RUSAGE_SELF, &after);
  const long growth_kb = after.ru_maxrss - before.ru_maxrss;
  // Each sample read maps the page-cache folio holding it: a 64 KiB fault-around window, or on
  // kernels with large folios (Linux 6.18 on ext4) up to 2 MiB. 8 reads thus map at most 16 MiB,
  // and the permutation of 256 Ki indices takes 2 MiB; reading the whole file would add 64 MiB.
  const bool bounded = growth_kb < 32 * 1024;
  if (!bounded) std::fprintf(stderr, "resident memory grew by %ld KiB\n", growth_kb);
  std::fflush(stderr);
  ::_exit(failures != 0 ? 1 : bounded ? 0 : 2);
}();

// A multi-MB file: random samples and batches read correctly, and reading them grows resident
// memory by far less than the file.
TEST(LargeFileTest, RandomAccessAndBoundedResidentMemory) {
  TempDir tmp;
  const std::string big = tmp.Path("big.psk.d");
  const std::string small = tmp.Path("small.psk.d");
  {
    PskdWriter w(big, ParseSampleType("idx[65536][128]"));
    SampleEncoder enc(w.type());
    for (uint64_t i = 0; i < kBigSamples; ++i) {
      enc.Reset();
      for (uint64_t e = 0; e < kBigSampleValues; ++e) enc.PutIndex(BigValue(i, e));
      w.Append(enc.bytes());
    }
    w.Commit();
    PskdWriter s(small, ParseSampleType("idx[65536][128]"));
    std::vector<uint8_t> zero(256, 0);
    for (int i = 0; i < 64; ++i) s.Append(zero);
    s.Commit();
  }
  EXPECT_EQ(ReadSome(big, true), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("TROVE_PSKD_RSS_BIG", big.c_str(), 1);
    ::setenv("TROVE_PSKD_RSS_SMALL", small.c_str(), 1);
    ::execl("/proc/self/exe", "test_formats_pskd", "--gtest_list_tests", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: wrong values read; 2: resident memory grew with the file";
}

}  // namespace
}  // namespace trove::pskd
