#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/byte_reader.h"
#include "trove/atomic_file.h"
#include "trove/document.h"
#include "trove/dtype.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/tensor.h"
#include "trove/value.h"

namespace trove {
namespace {

TEST(DTypeTest, TableIsInEnumOrderAndLookupsRoundTrip) {
  auto all = AllDTypes();
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(all[i].dtype), i) << all[i].name;
    EXPECT_EQ(DTypeFromName(all[i].name), all[i].dtype);
    EXPECT_EQ(DTypeFromTorchString("torch." + std::string(all[i].torch_name)), all[i].dtype);
    if (!all[i].storage_class.empty()) {
      EXPECT_EQ(DTypeFromStorageClass(all[i].storage_class), all[i].dtype);
    }
  }
  EXPECT_EQ(Name(DType::kFloat4E2M1FNx2), "float4_e2m1fn");
  EXPECT_EQ(DTypeFromName("float4_e2m1fn_x2"), DType::kFloat4E2M1FNx2);
  EXPECT_EQ(ElementSize(DType::kComplex128), 16u);
  EXPECT_FALSE(Info(DType::kQUInt8).readable);
  EXPECT_EQ(DTypeFromTorchString("torch.float128"), std::nullopt);
  EXPECT_EQ(DTypeFromStorageClass("EvilStorage"), std::nullopt);
}

TEST(ErrorTest, ContextJoinsWithOffsetRule) {
  Error e(ErrorCode::kRefused, "refused global 'posix.system'");
  e.SetOffset(57).SetEntry("archive/data.pkl").SetFile("model.pt");
  EXPECT_EQ(e.message(), "model.pt: archive/data.pkl @ 57: refused global 'posix.system'");
  EXPECT_EQ(e.offset(), 57u);
}

TEST(KeyPathTest, EncodesLikeTensordict) {
  EXPECT_EQ(EncodeKeyComponent("layer.0.weight"), "layer.0.weight");
  EXPECT_EQ(EncodeKeyComponent("x/y"), "x%2Fy");
  EXPECT_EQ(EncodeKeyComponent(""), "%");
  EXPECT_EQ(EncodeKeyComponent("."), "%2E");
  EXPECT_EQ(EncodeKeyComponent(".."), "%2E%2E");
  EXPECT_EQ(EncodeKeyComponent("a b%"), "a%20b%25");
  EXPECT_EQ(EncodeKeyComponent("h\xc3\xa9"), "h\xc3\xa9");
  for (std::string k : {"x/y", "", ".", "..", "a b%c", "q?*<>|\"\\:", "\x01\x7f"})
    EXPECT_EQ(DecodeKeyComponent(EncodeKeyComponent(k)), k);
  EXPECT_THROW(DecodeKeyComponent("%2"), Error);
  EXPECT_THROW(DecodeKeyComponent("%zz"), Error);
}

TEST(KeyPathTest, CollectTensorsBuildsPaths) {
  ValueArena arena;
  TensorView tv;
  tv.storage = SharedBytes::CopyOf("abcd", 4);
  tv.dtype = DType::kUInt8;
  tv.shape = {4};
  tv.strides = {1};
  Value* t = arena.Tensor(tv);
  Value* root = arena.Dict();
  Value* state = arena.Dict();
  Value* zero = arena.Dict();
  zero->entries.push_back({arena.Str("exp_avg"), t});
  state->entries.push_back({arena.Int(0), zero});
  root->entries.push_back({arena.Str("state"), state});
  root->entries.push_back({arena.Str("x/y"), t});
  Value* list = arena.List();
  list->items.push_back(t);
  root->entries.push_back({arena.Str(""), list});
  auto named = CollectTensors(root);
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0].key, "state/0/exp_avg");
  EXPECT_EQ(named[1].key, "x%2Fy");
  EXPECT_EQ(named[2].key, "%/0");
  EXPECT_EQ(CollectTensors(t)[0].key, "");
}

TEST(KeyPathTest, CyclesAndDagsAreBounded) {
  ValueArena arena;
  Value* l = arena.List();
  l->items.push_back(l);  // contains itself
  EXPECT_TRUE(CollectTensors(l).empty());
  // 2^40 paths through a chain of lists that each hold the next one twice.
  Value* node = arena.List();
  for (int i = 0; i < 40; ++i) {
    Value* up = arena.List();
    up->items = {node, node};
    node = up;
  }
  try {
    CollectTensors(node);
    FAIL() << "expected a limit error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimit);
  }
}

TEST(ValueTest, BigIntsPrintInDecimal) {
  ValueArena arena;
  // 2^64 as little-endian two's complement: 9 bytes.
  std::vector<uint8_t> b(9, 0);
  b[8] = 1;
  EXPECT_EQ(arena.BigInt(b)->IntToString(), "18446744073709551616");
  std::vector<uint8_t> neg(9, 0);
  neg[8] = 0xFF;  // -2^64
  EXPECT_EQ(arena.BigInt(neg)->IntToString(), "-18446744073709551616");
  EXPECT_EQ(arena.BigInt({0xFF})->integer, -1);
  EXPECT_EQ(arena.BigInt({0x00, 0x00, 0x00, 0x00, 0x00, 0x01})->integer, int64_t{1} << 40);
}

TensorView MakeView(std::vector<uint8_t> bytes, DType dt, std::vector<int64_t> shape, std::vector<int64_t> strides,
                    int64_t offset = 0) {
  TensorView v;
  v.dtype = dt;
  v.storage = SharedBytes::FromVector(std::move(bytes));
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  v.storage_offset = offset;
  return v;
}

TEST(TensorViewTest, ValidateRejectsLies) {
  EXPECT_NO_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {3, 4}, {4, 1}).Validate());
  EXPECT_THROW(MakeView(std::vector<uint8_t>(46), DType::kFloat32, {3, 4}, {4, 1}).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {3, 4}, {4, 1}, 1).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {-1}, {1}).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {2}, {-1}).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}, {1, 1}).Validate(), Error);
  EXPECT_THROW(MakeView(std::vector<uint8_t>(48), DType::kFloat32, {int64_t{1} << 62}, {0}).Validate(), Error);
  EXPECT_NO_THROW(MakeView(std::vector<uint8_t>(0), DType::kFloat32, {0, 5}, {5, 1}).Validate());
  EXPECT_THROW(MakeView(std::vector<uint8_t>(4), DType::kFloat32, {1}, {1, 1}).Validate(), Error);
}

TEST(TensorViewTest, GathersTransposeAndSwapsBigEndian) {
  std::vector<uint8_t> bytes(12 * 2);
  for (int i = 0; i < 12; ++i) { bytes[2 * i] = static_cast<uint8_t>(i); bytes[2 * i + 1] = 0; }
  auto t = MakeView(bytes, DType::kInt16, {4, 3}, {1, 4});  // transpose of a 3x4
  ASSERT_NO_THROW(t.Validate());
  EXPECT_FALSE(t.is_contiguous());
  auto c = t.ContiguousLittleEndian();
  ASSERT_EQ(c.size(), 24u);
  std::vector<int> got;
  for (int i = 0; i < 12; ++i) got.push_back(c.data()[2 * i]);
  EXPECT_EQ(got, (std::vector<int>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  auto be = MakeView({0, 1, 0, 2}, DType::kInt16, {2}, {1});
  be.byte_order = ByteOrder::kBig;
  auto s = be.ContiguousLittleEndian();
  EXPECT_EQ(std::vector<uint8_t>(s.data(), s.data() + 4), (std::vector<uint8_t>{1, 0, 2, 0}));
  // Small chunks must give the same bytes.
  std::vector<uint8_t> chunked;
  t.ForEachChunk([&](const uint8_t* p, size_t n) { chunked.insert(chunked.end(), p, p + n); }, 4);
  EXPECT_EQ(chunked, std::vector<uint8_t>(c.data(), c.data() + c.size()));
}

TEST(ByteReaderTest, NamesOffsetsOnTruncation) {
  uint8_t data[3] = {1, 2, 3};
  ByteReader r(data, 3, 100);
  EXPECT_EQ(r.U16(), 0x0201);
  try {
    r.U32();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("offset 102"), std::string::npos) << e.message();
  }
}

TEST(AtomicFileTest, AppearsOnlyOnCommitAndKeepsOldFile) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("trove-atomic-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path dest = dir / "out.bin";
  { std::ofstream(dest) << "old"; }
  {
    AtomicFile f(dest.string());
    f.Write("new contents", 12);
    // Not committed: the destroyed writer leaves the old file and no stray files.
  }
  std::ifstream in(dest);
  std::string s((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(s, "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  {
    AtomicFile f(dest.string());
    f.Write("new contents", 12);
    f.WriteAt(0, "N", 1);
    f.Commit();
  }
  std::ifstream in2(dest);
  std::string s2((std::istreambuf_iterator<char>(in2)), {});
  EXPECT_EQ(s2, "New contents");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  {
    // What a replacing writer killed between its link and its rename leaves: a hidden name. The
    // next writer removes it, unless a live writer holds it (flock).
    const fs::path orphan = dir / ".out.bin.trove-tmp-0badf00d";
    const fs::path live = dir / ".out.bin.trove-tmp-0000aaaa";
    std::ofstream(orphan) << "left by a killed writer";
    std::ofstream(live) << "being written";
    int held = ::open(live.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(held, 0);
    ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
    AtomicFile f(dest.string());
    EXPECT_FALSE(fs::exists(orphan));
    EXPECT_TRUE(fs::exists(live));
    ::close(held);
    fs::remove(live);
  }
  {
    AtomicDirectory d((dir / "tree").string());
    std::ofstream(fs::path(d.path()) / "a") << "1";
    std::ofstream(fs::path(d.path()) / "meta.json") << "{}";  // what makes it replaceable: a tensordict
    d.Commit();
  }
  {
    AtomicDirectory d((dir / "tree").string());
    std::ofstream(fs::path(d.path()) / "b") << "2";
    d.Commit();
  }
  EXPECT_FALSE(fs::exists(dir / "tree" / "a"));
  EXPECT_TRUE(fs::exists(dir / "tree" / "b"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2);
  fs::remove_all(dir);
}

// Durability: a new destination is written as cp writes it; replacing one, or kDurable, syncs
// before the swap (tests/python/test_convert.py sees the fsync calls themselves).
TEST(AtomicFileTest, SyncsWhenReplacingOrDurable) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("trove-durable-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    AtomicFile f((dir / "new.bin").string());
    EXPECT_FALSE(f.syncs());
    f.Write("a", 1);
    f.Commit();
  }
  {
    AtomicFile f((dir / "new.bin").string());
    EXPECT_TRUE(f.syncs());
  }
  {
    AtomicFile f((dir / "other.bin").string(), Durability::kDurable);
    EXPECT_TRUE(f.syncs());
  }
  {
    AtomicDirectory d((dir / "tree").string());
    EXPECT_FALSE(d.syncs());
    d.Commit();
  }
  {
    AtomicDirectory d((dir / "tree").string());
    EXPECT_TRUE(d.syncs());
  }
  {
    AtomicDirectory d((dir / "tree2").string(), Durability::kDurable);
    EXPECT_TRUE(d.syncs());
  }
  {
    // A destination made while the writer works is replaced, and so protected, too.
    AtomicFile f((dir / "late.bin").string());
    EXPECT_FALSE(f.syncs());
    f.Write("new", 3);
    std::ofstream(dir / "late.bin") << "made meanwhile";
    f.Commit();
    EXPECT_TRUE(f.syncs());
    std::ifstream in(dir / "late.bin");
    std::string s((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(s, "new");
  }
  fs::remove_all(dir);
}

// Large writes of mapped bytes go through the kernel (copy_file_range) straight from the mapped
// file; what lands must be exactly those bytes at the writer's position, and the cases the kernel
// cannot copy fall back to the caller.
TEST(CopyMappedBytesTest, CopiesFromTheFileFallsBackAndNamesATruncatedSource) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("trove-copy-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path src = dir / "src.bin";
  std::string pattern(3 * 1024 * 1024 + 123, '\0');
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>((i * 131 + i / 4099) & 0xff);
  { std::ofstream(src, std::ios::binary) << pattern; }
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
  EXPECT_EQ(got, "head!" + pattern.substr(at, length) + "tail");

  std::vector<uint8_t> heap(4096, 7);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  EXPECT_EQ(CopyMappedBytes(pipe_fds[1], heap.data(), heap.size(), "pipe"), 0u);  // not a mapping
  EXPECT_EQ(CopyMappedBytes(pipe_fds[1], slice.data(), 4096, "pipe"), 0u);       // kernel cannot
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
  ::close(out_fd);
  fs::remove_all(dir);
}

// Writes hand their writeback requests to a helper thread; a child of fork() has no such thread
// and must still write (and not hang on a lock or a queue nobody serves).
TEST(WriteBehindTest, LargeWritesWorkBeforeAndAfterFork) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("trove-wb-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string block(1 << 20, 'x');
  auto write = [&](const fs::path& path) {
    AtomicFile f(path.string());
    for (int i = 0; i < 40; ++i) f.Write(block.data(), block.size());  // 40 MiB: several steps
    f.Commit();
    return fs::file_size(path) == 40u * block.size();
  };
  ASSERT_TRUE(write(dir / "parent.bin"));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);  // a hang ends the child with SIGALRM, which the parent reports
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) ok = write(dir / ("child" + std::to_string(i) + ".bin"));
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_TRUE(write(dir / "parent2.bin"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trove
