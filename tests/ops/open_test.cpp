#include <algorithm>
// DetectFormat and Open over every format trove detects: files written by trove's own writers,
// files made by Debian's torch, and what trove recognises only to refuse.
#include <filesystem>

#include "ops_fixtures.h"
#include "trove/convert.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/safetensors.h"
#include "trove/tensordict.h"

namespace trove::opstest {
namespace {

namespace fs = std::filesystem;

class OpenTest : public OpsTest {};

TEST_F(OpenTest, TrovesOwnPtIsDetectedAndOpened) {
  const std::string pt = SamplePt();
  EXPECT_EQ(DetectFormat(pt), Format::kPt);
  Document doc = Open(pt);
  EXPECT_EQ(doc.format, "pt");
  EXPECT_EQ(doc.path, pt);
  EXPECT_EQ(Keys(doc), (std::vector<std::string>{"enc/0/weight", "enc/0/bias", "enc/1/weight", "head.w", "ids"}));
  ExpectSample(doc);
}

TEST_F(OpenTest, EveryFormatTroveWritesIsDetectedByContent) {
  const Document sample = MakeDocument(SampleLeaves());
  WriteTensordictDir(sample, P("td"));
  WriteTdz(sample, P("m.tdz"));
  WriteSafetensors(sample, P("m.safetensors"));
  ConvertDocument(sample, P("m.psk.d"), Format::kPskd, {});
  ConvertOptions sharded;
  sharded.max_shard_bytes = 32;  // the 24-byte weights each fill a shard
  ConvertDocument(sample, P("sharded"), Format::kSafetensors, sharded);

  struct Case {
    std::string path;
    Format format;
    std::string name;
    bool flat = false;  // safetensors names each tensor by its whole path
  };
  const Case cases[] = {
      {P("td"), Format::kTensordictDir, "tensordict"},
      {P("m.tdz"), Format::kTdz, "tdz"},
      {P("m.safetensors"), Format::kSafetensors, "safetensors", true},
      {P("m.psk.d"), Format::kPskd, "pskd"},
      {P("sharded"), Format::kShardedIndex, "sharded", true},
      {P("sharded/model.safetensors.index.json"), Format::kShardedIndex, "sharded", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    EXPECT_EQ(DetectFormat(c.path), c.format);
    EXPECT_EQ(FormatName(c.format), c.name);
    Document doc = Open(c.path);
    if (c.format == Format::kPskd) {
      // .psk.d keeps the leaves, not their names: the same values in the same order.
      ASSERT_EQ(doc.tensors.size(), 5u);
      EXPECT_EQ(Values(*doc.tensors[0].view), (std::vector<double>{0, 1, 2, 3, 4, 5}));
      EXPECT_EQ(Values(*doc.tensors[4].view), (std::vector<double>{3, 7}));
    } else {
      ExpectSample(doc, c.flat);
    }
  }
  // Content decides, not the name: a safetensors file named .pt is still safetensors.
  fs::copy_file(P("m.safetensors"), P("looks-like.pt"));
  EXPECT_EQ(DetectFormat(P("looks-like.pt")), Format::kSafetensors);
  // Sharded output is several shards and one index.
  size_t shards = 0;
  for (const auto& e : fs::directory_iterator(P("sharded"))) shards += e.path().extension() == ".safetensors";
  EXPECT_GE(shards, 3u);
}

TEST_F(OpenTest, TorchSavedZipAndLegacyFiles) {
  Torch("sd = {'a': torch.arange(6, dtype=torch.float32).reshape(2, 3), 'h': torch.tensor([1.5], dtype=torch.float16), 'n': 3}\n"
        "torch.save(sd, ROOT + '/zip.pt')\n"
        "torch.save(sd, ROOT + '/legacy.pt', _use_new_zipfile_serialization=False)\n");
  for (const auto& [name, format, text] : {std::tuple{"zip.pt", Format::kPt, "pt"}, std::tuple{"legacy.pt", Format::kPtLegacy, "pt-legacy"}}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(DetectFormat(P(name)), format);
    Document doc = Open(P(name));
    EXPECT_EQ(doc.format, text);
    ASSERT_EQ(Keys(doc), (std::vector<std::string>{"a", "h"}));
    const TensorView& a = *doc.FindTensor("a")->view;
    EXPECT_EQ(a.dtype, DType::kFloat32);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a.At<float>(1, 2), 5.0f);
    EXPECT_EQ(doc.FindTensor("h")->view->dtype, DType::kFloat16);
    EXPECT_EQ(doc.FindTensor("h")->view->At<double>(0), 1.5);
    ASSERT_NE(doc.root->Find("n"), nullptr);
    EXPECT_EQ(doc.root->Find("n")->integer, 3);
  }
}

TEST_F(OpenTest, TorchScriptArchiveIsReadAsDataItsCodeNever) {
  Torch("torch.jit.script(torch.nn.Linear(2, 2)).save(ROOT + '/scripted.pt')\n");
  EXPECT_EQ(DetectFormat(P("scripted.pt")), Format::kTorchScript);
  const Document doc = Open(P("scripted.pt"));
  EXPECT_EQ(doc.format, "torchscript");
  ASSERT_NE(doc.FindTensor("weight"), nullptr);
  ASSERT_NE(doc.FindTensor("bias"), nullptr);
  EXPECT_TRUE(std::any_of(doc.warnings.begin(), doc.warnings.end(),
                          [](const std::string& w) { return w.find("its code") != std::string::npos; }));
}

TEST_F(OpenTest, TarCheckpointIsRecognisedAndUnsupported) {
  Torch("import tarfile\n"
        "with tarfile.open(ROOT + '/old.tar', 'w', format=tarfile.USTAR_FORMAT) as t:\n"
        "    for name in ('sys_info', 'pickle', 'storages', 'tensors'):\n"
        "        data = b'x' * 10\n"
        "        info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))\n");
  EXPECT_EQ(DetectFormat(P("old.tar")), Format::kPtTar);
  ExpectError([&] { Open(P("old.tar")); }, ErrorCode::kUnsupported, "a checkpoint of torch < 0.4 (a tar archive");
}

TEST_F(OpenTest, UnknownBytesDirectoriesAndMissingPaths) {
  Write("notes.txt", "hello, not a tensor file at all\n");
  EXPECT_EQ(DetectFormat(P("notes.txt")), Format::kUnknown);
  ExpectError([&] { Open(P("notes.txt")); }, ErrorCode::kUnsupported, P("notes.txt") + ": not a checkpoint: none of the formats trove knows (pskd, pt, ");

  fs::create_directories(P("empty"));
  EXPECT_EQ(DetectFormat(P("empty")), Format::kUnknown);
  ExpectError([&] { Open(P("empty")); }, ErrorCode::kUnsupported, "a directory, but none that trove reads: it holds none of meta.json");

  ExpectError([&] { Open(P("missing.pt")); }, ErrorCode::kNotFound, P("missing.pt"));

  // A sound zip that is neither torch's (no data.pkl) nor tensordict's (no meta.json): unknown.
  Torch("with zipfile.ZipFile(ROOT + '/other.zip', 'w') as z: z.writestr('readme.txt', 'hi')\n");
  EXPECT_EQ(DetectFormat(P("other.zip")), Format::kUnknown);
  ExpectError([&] { Open(P("other.zip")); }, ErrorCode::kUnsupported, P("other.zip") + ": a zip archive, but not a checkpoint");
  // A zip no zip reader accepts (its central directory cut off) goes to the torch reader, whose
  // error says what is wrong.
  const std::string pt = SamplePt();
  fs::resize_file(pt, fs::file_size(pt) - 30);
  EXPECT_EQ(DetectFormat(pt), Format::kPt);
  ExpectError([&] { Open(pt); }, ErrorCode::kCorrupt, pt + ": ");
}

}  // namespace
}  // namespace trove::opstest
