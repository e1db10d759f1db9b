// Datasets of many shards: manifests, patterns, the global index, one layout, lazy mappings.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "pskd_test_support.h"
#include "trove/pipeline.h"
#include "trove/pskd_dataset.h"

namespace trove::pskd {
namespace {

using testing::TempDir;
using testing::WriteFile;

// Sample i of a shard starting at `first`: (first + i as an index, (first + i) / 2 as a real).
void WriteShard(const std::string& path, uint64_t first, uint64_t count, const std::string& type_text = "(idx[1000][], ℝ[2])") {
  SampleType type = ParseSampleType(type_text);
  PskdWriter writer(path, type);
  for (uint64_t i = 0; i < count; ++i) {
    SampleEncoder enc(writer.type());
    while (!enc.complete()) {
      if (enc.next_is_index()) {
        enc.PutIndex(first + i);
      } else {
        enc.PutReal(static_cast<double>(first + i) / 2);
      }
    }
    writer.Append(enc.bytes());
  }
  writer.Commit();
}

uint64_t IndexOf(std::span<const uint8_t> sample) { return LoadIndex(sample.data(), 2); }

// Lines of /proc/self/maps naming `path`, and descriptors open on it.
int MappingsOf(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.ends_with(std::filesystem::canonical(path).string());
  return n;
}

int DescriptorsOn(const std::string& path) {
  int n = 0;
  const auto target = std::filesystem::canonical(path);
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    n += std::filesystem::read_symlink(fd.path(), ec) == target;
  }
  return n;
}

template <class F>
Error ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::kUsage, "none");
}

TEST(ShardManifestTest, ListsPlainRelativePaths) {
  EXPECT_EQ(ParseShardManifest(R"({"shards": ["a.psk.d", "part/b.psk.d"], "note": "ignored"})"),
            (std::vector<std::string>{"a.psk.d", "part/b.psk.d"}));
  for (const char* bad : {R"({"shards": ["../a.psk.d"]})", R"({"shards": ["/etc/passwd"]})", R"({"shards": ["a//b"]})",
                          R"({"shards": ["./a"]})", R"({"shards": ["a\\b"]})", R"({"shards": [""]})",
                          R"({"shards": ["sub/.."]})", R"({"shards": [3]})", R"({"shards": []})", R"({"shard": ["a"]})",
                          R"(["a"])", R"({"shards": [["a"]]})", "{", R"({"shards": ["a\u0000b"]})"}) {
    Error e = ErrorOf([&] { ParseShardManifest(bad); });
    EXPECT_EQ(e.code(), ErrorCode::kCorrupt) << bad << ": " << e.message();
  }
  Error e = ErrorOf([] { ParseShardManifest(R"({"shards": ["ok", "../x"]})"); });
  EXPECT_EQ(e.entry(), "shards[1]");
}

TEST(ShardSourcesTest, PatternsSortByBytesManifestsResolveInTheirFolder) {
  TempDir tmp;
  for (const char* name : {"b.psk.d", "B.psk.d", "a10.psk.d", "a2.psk.d", "\xc3\xa4.psk.d"}) WriteShard(tmp.Path(name), 0, 1);
  const std::string d = tmp.dir().string() + "/";
  EXPECT_EQ(ExpandShardSources({d + "*.psk.d"}),
            (std::vector<std::string>{d + "B.psk.d", d + "a10.psk.d", d + "a2.psk.d", d + "b.psk.d", d + "\xc3\xa4.psk.d"}));
  std::filesystem::create_directories(tmp.dir() / "m" / "part");
  WriteShard(tmp.Path("m/part/x.psk.d"), 0, 1);
  WriteFile(tmp.Path("m/train.json"), R"(  {"shards": ["part/x.psk.d"]})");
  EXPECT_EQ(ExpandShardSources({d + "m/train.json", d + "b.psk.d"}),
            (std::vector<std::string>{d + "m/part/x.psk.d", d + "b.psk.d"}));
  // A link inside the folder may lead only inside it.
  std::filesystem::create_symlink(tmp.Path("b.psk.d"), tmp.Path("m/out.psk.d"));
  WriteFile(tmp.Path("m/escape.json"), R"({"shards": ["out.psk.d"]})");
  EXPECT_EQ(ErrorOf([&] { ExpandShardSources({d + "m/escape.json"}); }).code(), ErrorCode::kRefused);
  std::filesystem::create_symlink(tmp.Path("m/part/x.psk.d"), tmp.Path("m/in.psk.d"));
  WriteFile(tmp.Path("m/inside.json"), R"({"shards": ["in.psk.d"]})");
  EXPECT_EQ(ExpandShardSources({d + "m/inside.json"}).size(), 1u);

  Error none = ErrorOf([&] { ExpandShardSources({d + "nothing-*.psk.d"}); });
  EXPECT_EQ(none.code(), ErrorCode::kNotFound);
  EXPECT_EQ(none.spec_code(), 9002);
  EXPECT_EQ(testing::CodeOf(ErrorOf([&] { ExpandShardSources({d + "m"}); })), PskdCode::kNotPskd);
  Error twice = ErrorOf([&] { ExpandShardSources({d + "b.psk.d", d + "*.psk.d"}); });
  EXPECT_EQ(twice.code(), ErrorCode::kRefused);
  EXPECT_NE(twice.message().find("same file"), std::string::npos) << twice.message();
  EXPECT_EQ(ErrorOf([] { ExpandShardSources({}); }).code(), ErrorCode::kUsage);
  // A pipe is refused before anything opens it (opening it would wait for a writer), named or matched.
  ASSERT_EQ(::mkfifo(tmp.Path("pipe.psk.d").c_str(), 0600), 0);
  EXPECT_EQ(testing::CodeOf(ErrorOf([&] { ExpandShardSources({d + "pipe.psk.d"}); })), PskdCode::kNotPskd);
  EXPECT_EQ(testing::CodeOf(ErrorOf([&] { ExpandShardSources({d + "pi*"}); })), PskdCode::kNotPskd);
}

TEST(DatasetTest, ShardsAreOneGlobalIndexInOrder) {
  TempDir tmp;
  WriteShard(tmp.Path("s0.psk.d"), 0, 5);
  WriteShard(tmp.Path("s1.psk.d"), 5, 0);  // an empty shard takes no index
  WriteShard(tmp.Path("s2.psk.d"), 5, 7);
  WriteShard(tmp.Path("s3.psk.d"), 12, 3, "(idx[1000][], ℝ[axis: 2])");  // the same layout spelled otherwise
  Dataset data = Dataset::Open({tmp.Path("s*.psk.d")});
  ASSERT_EQ(data.count(), 15u);
  ASSERT_EQ(data.shards().size(), 4u);
  EXPECT_EQ(data.shards()[2].first, 5u);
  EXPECT_EQ(data.shards()[3].first, 12u);
  for (uint64_t i = 0; i < data.count(); ++i) {
    EXPECT_EQ(IndexOf(data.Sample(i)), i);
    data.CheckIndices(i);
  }
  EXPECT_EQ(data.Locate(5), (std::pair<size_t, uint64_t>{2, 0}));
  EXPECT_EQ(data.Locate(14), (std::pair<size_t, uint64_t>{3, 2}));
  EXPECT_PSKD_ERROR(data.Sample(15), PskdCode::kTruncated);
  // The batch loader reads global indices across shards.
  BatchLoader loader(data);
  Batch batch;
  std::vector<uint64_t> indices = {14, 0, 7, 4, 5};
  loader.Load(indices, batch);
  for (size_t b = 0; b < indices.size(); ++b) EXPECT_EQ(LoadIndex(batch.leaves[0].data() + 2 * b, 2), indices[b]);
  EXPECT_EQ(LoadReal(batch.leaves[1].data() + 16 * 2, Encoding::kF64), 3.5);
}

TEST(DatasetTest, ShardsAreMappedWhenFirstReadAndHoldNoDescriptor) {
  TempDir tmp;
  WriteShard(tmp.Path("a.psk.d"), 0, 4);
  WriteShard(tmp.Path("b.psk.d"), 4, 4);
  Dataset data = Dataset::Open({tmp.Path("a.psk.d"), tmp.Path("b.psk.d")});
  EXPECT_EQ(MappingsOf(tmp.Path("a.psk.d")), 0);
  EXPECT_EQ(MappingsOf(tmp.Path("b.psk.d")), 0);
  EXPECT_EQ(IndexOf(data.Sample(5)), 5u);
  EXPECT_EQ(MappingsOf(tmp.Path("a.psk.d")), 0);
  EXPECT_EQ(MappingsOf(tmp.Path("b.psk.d")), 1);
  EXPECT_EQ(DescriptorsOn(tmp.Path("b.psk.d")), 0);
  {
    Dataset copy = data;  // copies share the mapping
    EXPECT_EQ(IndexOf(copy.Sample(6)), 6u);
    EXPECT_EQ(MappingsOf(tmp.Path("b.psk.d")), 1);
  }
  data = Dataset::Of(PskdFile::Open(tmp.Path("a.psk.d")));
  EXPECT_EQ(MappingsOf(tmp.Path("b.psk.d")), 0);
}

TEST(DatasetTest, AShardRewrittenBeforeItIsReadIsAnError) {
  TempDir tmp;
  WriteShard(tmp.Path("a.psk.d"), 0, 4);
  WriteShard(tmp.Path("b.psk.d"), 4, 4);
  Dataset data = Dataset::Open({tmp.Path("a.psk.d"), tmp.Path("b.psk.d")});
  WriteShard(tmp.Path("b.psk.d"), 4, 6);
  Error e = ErrorOf([&] { data.Sample(4); });
  EXPECT_EQ(e.code(), ErrorCode::kIo);
  EXPECT_NE(e.message().find("changed while being read"), std::string::npos) << e.message();
  EXPECT_EQ(IndexOf(data.Sample(3)), 3u);
}

TEST(DatasetTest, ShardsOfAnotherLayoutAreE9005NamingBoth) {
  TempDir tmp;
  WriteShard(tmp.Path("a.psk.d"), 0, 2);
  for (const char* other : {"(idx[999][], ℝ[2])", "(idx[1000][], ℝ[3])", "(idx[1000][], (ℝ[2],))", "idx[1000][]"}) {
    WriteShard(tmp.Path("b.psk.d"), 0, 2, other);
    Error e = ErrorOf([&] { Dataset::Open({tmp.Path("a.psk.d"), tmp.Path("b.psk.d")}); });
    EXPECT_EQ(e.spec_code(), 9005) << other;
    EXPECT_NE(e.message().find(tmp.Path("a.psk.d")), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(tmp.Path("b.psk.d")), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(other), std::string::npos) << e.message();
  }
  // Another encoding is another layout too.
  {
    SampleType narrow = ParseSampleType("(idx[1000][], ℝ[2])");
    narrow.SetEncodings({Encoding::kF64, Encoding::kF32});
    PskdWriter w(tmp.Path("c.psk.d"), narrow);
    w.Commit();
  }
  Error e = ErrorOf([&] { Dataset::Open({tmp.Path("a.psk.d"), tmp.Path("c.psk.d")}); });
  EXPECT_EQ(e.spec_code(), 9005);
  EXPECT_NE(e.message().find("f32"), std::string::npos) << e.message();
  // Params shards have no layout; a file that is not a .psk.d is E9002.
  WriteFile(tmp.Path("p.psk.d"), testing::HeaderBytes(1, "params M", 1));
  EXPECT_PSKD_ERROR(Dataset::Open({tmp.Path("a.psk.d"), tmp.Path("p.psk.d")}), PskdCode::kNotClosedType);
  WriteFile(tmp.Path("x.psk.d"), "hello");
  EXPECT_PSKD_ERROR(Dataset::Open({tmp.Path("a.psk.d"), tmp.Path("x.psk.d")}), PskdCode::kNotPskd);
  EXPECT_PSKD_ERROR(Dataset::Open({tmp.Path("missing.psk.d")}), PskdCode::kNotPskd);
}

TEST(DatasetTest, AnIndexAtItsBoundNamesTheShardAndTheDatasetSample) {
  TempDir tmp;
  WriteShard(tmp.Path("a.psk.d"), 0, 3);
  std::string bad = testing::HeaderBytes(1, "(idx[1000][], ℝ[2])", 2);
  for (uint16_t v : {uint16_t{7}, uint16_t{1000}}) {
    bad.append(reinterpret_cast<const char*>(&v), 2);
    bad.append(16, '\0');
  }
  WriteFile(tmp.Path("b.psk.d"), bad);
  Dataset data = Dataset::Open({tmp.Path("a.psk.d"), tmp.Path("b.psk.d")});
  data.CheckIndices(3);
  Error e = ErrorOf([&] { data.CheckIndices(4); });
  EXPECT_EQ(e.spec_code(), 9004);
  EXPECT_NE(e.message().find("dataset sample 4"), std::string::npos) << e.message();
  EXPECT_NE(PskdMessageWithoutCode(e).find("b.psk.d: sample 1, leaf 0"), std::string::npos) << e.message();
  EXPECT_EQ(e.message().find(tmp.Path("b.psk.d")), e.message().rfind(tmp.Path("b.psk.d"))) << "the shard is named once";
  BatchLoader loader(data);
  Batch batch;
  std::vector<uint64_t> indices = {0, 4};
  EXPECT_PSKD_ERROR(loader.Load(indices, batch), PskdCode::kBadValue);
}

}  // namespace
}  // namespace trove::pskd
