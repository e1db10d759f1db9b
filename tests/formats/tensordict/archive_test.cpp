// .tdz archives: what we write (entry order, alignment, extra blocks, CRCs) checked byte by byte
// and by Python's zipfile and unzip; foreign archives read; pack/unpack; in-place edits.
#include "formats/tensordict/tensordict_reader.h"
#include "td_fixtures.h"
#include "trove/zip_reader.h"

namespace trove::tdtest {
namespace {

const std::string kTd = "<class 'tensordict._td.TensorDict'>";

class ArchiveTest : public TdTest {
 protected:
  // A directory as tensordict 0.14 writes it, with leaves of several sizes and a nested level.
  void WriteSourceDir(const std::string& rel) {
    Write(rel + "/meta.json",
          R"({"obs":{"device":"cpu","shape":[3,5],"dtype":"torch.float32","is_nested":false},"a":{"device":"cpu","shape":[7],"dtype":"torch.uint8","is_nested":false},"é":{"device":"cpu","shape":[1],"dtype":"torch.float64","is_nested":false},"next":{"type":"TensorDict"},"s":{"type":"NonTensorData"},"shape":[],"device":"cpu","_type":")" + kTd + "\"}");
    std::vector<float> obs(15);
    for (int i = 0; i < 15; ++i) obs[i] = static_cast<float>(i) - 3.25f;
    WriteArray(rel + "/obs.memmap", obs);
    Write(rel + "/a.memmap", "abcdefg");
    WriteArray<double>(rel + "/é.memmap", {6.5});
    Write(rel + "/next/meta.json",
          R"({"r":{"device":"cpu","shape":[2],"dtype":"torch.int64","is_nested":false},"shape":[],"device":"cpu","_type":")" + kTd + "\"}");
    WriteArray<int64_t>(rel + "/next/r.memmap", {-1, 1LL << 40});
    Write(rel + "/s/meta.json",
          R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","data":"hi","_metadata":null,"_is_non_tensor":true})");
  }
  // Python's view of an archive: entry names in order, and for each the payload offset, the
  // compression, and the ids of the local extra blocks.
  std::string PyListing(const std::string& archive) {
    std::string out;
    int rc = Python(
        "import zipfile, struct\n"
        "z = zipfile.ZipFile('" + archive + "')\n"
        "assert z.testzip() is None\n"
        "f = open('" + archive + "', 'rb')\n"
        "for i in z.infolist():\n"
        "    f.seek(i.header_offset)\n"
        "    h = f.read(30)\n"
        "    sig, ver, flag, meth, t, d, crc, cs, us, nl, el = struct.unpack('<IHHHHHIIIHH', h)\n"
        "    f.read(nl)\n"
        "    extra = f.read(el)\n"
        "    ids = []\n"
        "    k = 0\n"
        "    while k < len(extra):\n"
        "        bid, blen = struct.unpack('<HH', extra[k:k+4])\n"
        "        ids.append('%04x:%d' % (bid, blen))\n"
        "        k += 4 + blen\n"
        "    off = i.header_offset + 30 + nl + el\n"
        "    print(i.filename, off % 64, i.compress_type, flag & 0x800, ','.join(ids), (crc == i.CRC))\n",
        &out);
    EXPECT_EQ(rc, 0) << out;
    return out;
  }
};

TEST_F(ArchiveTest, WrittenArchiveIsExactlyTheSpecsLayout) {
  WriteSourceDir("src");
  Document doc = ReadTensordictDir(P("src"), {});
  WriteTdz(doc, P("out.tdz"));
  std::string listing = PyListing(P("out.tdz"));
  // meta.json first, then the files by name, then sub-directories by name; .memmap payloads at
  // multiples of 64 behind a 0x6474 padding block that precedes the zip64 block; real CRCs in
  // the local headers; the UTF-8 flag on the non-ASCII name.
  std::istringstream lines(listing);
  std::vector<std::string> names;
  std::string name, ids, crc_ok;
  int mod = 0, method = 0, utf8 = 0;
  while (lines >> name >> mod >> method >> utf8 >> ids >> crc_ok) {
    names.push_back(name);
    EXPECT_EQ(crc_ok, "True") << name;
    EXPECT_EQ(method, 0) << name;
    EXPECT_EQ(utf8 != 0, name.find("é") != std::string::npos) << name;
    if (name.size() > 7 && name.substr(name.size() - 7) == ".memmap") {
      EXPECT_EQ(mod, 0) << name;
      EXPECT_EQ(ids.substr(0, 5), "6474:") << name << " " << ids;
      EXPECT_NE(ids.find(",0001:16"), std::string::npos) << name << " " << ids;
    } else {
      EXPECT_EQ(ids, "0001:16") << name;
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"meta.json", "a.memmap", "obs.memmap", "é.memmap", "next/meta.json",
                                             "next/r.memmap", "s/meta.json"}));
  std::string out;
  EXPECT_EQ(Run("unzip -t " + P("out.tdz"), &out), 0) << out;
}

TEST_F(ArchiveTest, ArchiveLeavesAreViewsOfTheOneMapping) {
  WriteSourceDir("src");
  WriteTdz(ReadTensordictDir(P("src"), {}), P("out.tdz"));
  auto file = MappedFile::Open(P("out.tdz"));
  Document doc = ReadTdz(file, {});
  EXPECT_EQ(doc.format, "tdz");
  EXPECT_EQ(*doc.Property("leaves_copied"), "0");
  ASSERT_EQ(doc.tensors.size(), 4u);
  for (const auto& t : doc.tensors) {
    EXPECT_GE(t.view->storage.data(), file->data());
    EXPECT_LT(t.view->storage.data(), file->data() + file->size());
    EXPECT_EQ((t.view->storage.data() - file->data()) % 64, 0) << t.key;
  }
  EXPECT_EQ(Get(Get(doc.root, "s"), "data")->text, "hi");
}

TEST_F(ArchiveTest, DirectoryToTdzToDirectoryKeepsLeavesByteForByte) {
  WriteSourceDir("src");
  Document dir = ReadTensordictDir(P("src"), {});
  WriteTdz(dir, P("a.tdz"));
  Document tdz = ReadTdz(MappedFile::Open(P("a.tdz")), {});
  WriteTensordictDir(tdz, P("back"));
  for (const char* f : {"obs.memmap", "a.memmap", "é.memmap", "next/r.memmap"})
    EXPECT_EQ(Slurp(P(std::string("src/") + f)), Slurp(P(std::string("back/") + f))) << f;
  UnpackTdz(P("a.tdz"), P("unpacked"));
  for (const char* f : {"meta.json", "obs.memmap", "next/meta.json", "next/r.memmap", "s/meta.json"})
    EXPECT_EQ(Slurp(P(std::string("back/") + f)), Slurp(P(std::string("unpacked/") + f))) << f;
}

TEST_F(ArchiveTest, PackKeepsFilesAndCompressesLeavesOnly) {
  WriteSourceDir("src");
  Write("src/s/other.pickle", "\x80\x04}\x94.");
  for (auto [method, code] : {std::pair{ZipMethod::kStored, 0}, {ZipMethod::kDeflate, 8}, {ZipMethod::kBzip2, 12},
                              {ZipMethod::kLzma, 14}}) {
    TensordictWriteOptions o;
    o.compression = method;
    PackTdz(P("src"), P("p.tdz"), o);
    std::string listing = PyListing(P("p.tdz"));
    std::istringstream lines(listing);
    std::string name, ids, crc_ok;
    int mod = 0, m = 0, utf8 = 0;
    std::vector<std::string> names;
    while (lines >> name >> mod >> m >> utf8 >> ids >> crc_ok) {
      names.push_back(name);
      bool leaf = name.size() > 7 && name.substr(name.size() - 7) == ".memmap";
      EXPECT_EQ(m, leaf ? code : 0) << name;
    }
    EXPECT_EQ(names.front(), "meta.json");
    EXPECT_EQ(names.back(), "s/other.pickle");
    ZipReader zip(MappedFile::Open(P("p.tdz")));
    EXPECT_EQ(std::string(zip.Read(*zip.Find("meta.json")).view()), Slurp(P("src/meta.json")));  // copied as is
    Document doc = ReadTdz(MappedFile::Open(P("p.tdz")), {});
    ASSERT_EQ(doc.tensors.size(), 4u);
    EXPECT_EQ(TensorBytes(*doc.FindTensor("obs")->view), Slurp(P("src/obs.memmap")));
    EXPECT_EQ(*doc.Property("leaves_copied"), method == ZipMethod::kStored ? "0" : "4");
  }
}

TEST_F(ArchiveTest, ForeignPythonArchivesDeflateAndUnaligned) {
  WriteSourceDir("src");
  for (const char* mode : {"deflate", "stored"}) {
    std::string out;
    int rc = Python(
        "import zipfile, os\n"
        "src = '" + P("src") + "'\n"
        "mode = '" + mode + "'\n"
        "z = zipfile.ZipFile('" + P("foreign.tdz") + "', 'w')\n"
        "for d, dirs, files in sorted(os.walk(src)):\n"
        "    for f in sorted(files, key=lambda n: (n != 'meta.json', n)):\n"
        "        p = os.path.join(d, f)\n"
        "        arc = os.path.relpath(p, src)\n"
        "        c = zipfile.ZIP_DEFLATED if (mode == 'deflate' and f.endswith('.memmap')) else zipfile.ZIP_STORED\n"
        "        z.write(p, arc, compress_type=c)\n"
        "z.close()\n",
        &out);
    ASSERT_EQ(rc, 0) << out;
    Document doc = ReadTdz(MappedFile::Open(P("foreign.tdz")), {});
    ASSERT_EQ(doc.tensors.size(), 4u) << mode;
    for (const auto& t : doc.tensors) {
      // Copies (when needed) are aligned to the element size.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.view->first_element()) % ElementSize(t.view->dtype), 0u) << t.key;
    }
    EXPECT_EQ(TensorBytes(*doc.FindTensor("next/r")->view), Slurp(P("src/next/r.memmap")));
    EXPECT_EQ(TensorBytes(*doc.FindTensor("é")->view),
              Slurp(P("src/é.memmap")));
  }
}

TEST_F(ArchiveTest, LeafBytesMatchNumpy) {
  WriteSourceDir("src");
  WriteTdz(ReadTensordictDir(P("src"), {}), P("out.tdz"));
  std::string out;
  int rc = Python(
      "import zipfile, json, numpy as np\n"
      "z = zipfile.ZipFile('" + P("out.tdz") + "')\n"
      "m = json.loads(z.read('meta.json'))\n"
      "o = np.frombuffer(z.read('obs.memmap'), dtype=np.float32).reshape(m['obs']['shape'])\n"
      "assert (o == np.arange(15, dtype=np.float32).reshape(3, 5) - 3.25).all()\n"
      "z.extractall('" + P("x") + "')\n"
      "r = np.fromfile('" + P("x/next/r.memmap") + "', dtype=np.int64)\n"
      "assert list(r) == [-1, 1 << 40]\n",
      &out);
  EXPECT_EQ(rc, 0) << out;
}

TEST_F(ArchiveTest, InPlaceEditThenRefreshChecksums) {
  WriteSourceDir("src");
  WriteTdz(ReadTensordictDir(P("src"), {}), P("out.tdz"));
  const int64_t v = 99;
  WriteTdzLeafInPlace(P("out.tdz"), "next/r", 8, &v, 8);
  EXPECT_EQ(CheckTdzChecksums(P("out.tdz")), (std::vector<std::string>{"next/r.memmap"}));
  Document doc = ReadTdz(MappedFile::Open(P("out.tdz")), {});
  EXPECT_EQ(reinterpret_cast<const int64_t*>(doc.FindTensor("next/r")->view->first_element())[1], 99);
  EXPECT_EQ(RefreshTdzChecksums(P("out.tdz")), (std::vector<std::string>{"next/r.memmap"}));
  EXPECT_TRUE(CheckTdzChecksums(P("out.tdz")).empty());
  PyListing(P("out.tdz"));  // testzip passes again
  ExpectError([&] { WriteTdzLeafInPlace(P("out.tdz"), "next/r", 9, &v, 8); }, ErrorCode::kUsage, "outside leaf");
  ExpectError([&] { WriteTdzLeafInPlace(P("out.tdz"), "nope", 0, &v, 1); }, ErrorCode::kNotFound, "no leaf");
}

TEST_F(ArchiveTest, HostileArchives) {
  std::string out;
  int rc = Python(
      "import zipfile\n"
      "z = zipfile.ZipFile('" + P("evil.tdz") + "', 'w')\n"
      "z.writestr('meta.json', '''{\"shape\":[],\"device\":\"cpu\",\"_type\":\"" + kTd + "\"}''')\n"
      "z.writestr(zipfile.ZipInfo('../evil.memmap'), 'x')\n"
      "z.close()\n"
      "z = zipfile.ZipFile('" + P("short.tdz") + "', 'w')\n"
      "z.writestr('meta.json', '''{\"x\":{\"device\":\"cpu\",\"shape\":[4],\"dtype\":\"torch.float32\"},\"shape\":[],\"device\":\"cpu\",\"_type\":\"" + kTd + "\"}''')\n"
      "z.writestr('x.memmap', 'abc')\n"
      "z.close()\n",
      &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THROW(ReadTdz(MappedFile::Open(P("evil.tdz")), {}), Error);
  EXPECT_THROW(UnpackTdz(P("evil.tdz"), P("dest")), Error);
  EXPECT_FALSE(fs::exists(P("evil.memmap")));
  EXPECT_FALSE(fs::exists(P("dest")));
  ExpectError([&] { ReadTdz(MappedFile::Open(P("short.tdz")), {}); }, ErrorCode::kCorrupt, "the leaf needs 16");
  Write("junk.tdz", "PK\x03\x04 not really a zip");
  EXPECT_THROW(ReadTdz(MappedFile::Open(P("junk.tdz")), {}), Error);
  // A zip without a top-level meta.json is not a tensordict archive.
  ASSERT_EQ(Python("import zipfile\nz = zipfile.ZipFile('" + P("other.zip") + "', 'w')\nz.writestr('a/meta.json', '{}')\nz.close()\n"), 0);
  ExpectError([&] { ReadTdz(MappedFile::Open(P("other.zip")), {}); }, ErrorCode::kCorrupt, "no top-level meta.json");
}

TEST_F(ArchiveTest, PackRefusesSymlinksAndNonTensordictFolders) {
  WriteSourceDir("src");
  ASSERT_EQ(::symlink("/etc/passwd", P("src/leak.memmap").c_str()), 0);
  ExpectError([&] { PackTdz(P("src"), P("p.tdz")); }, ErrorCode::kRefused, "symlink");
  EXPECT_FALSE(fs::exists(P("p.tdz")));
  fs::create_directories(P("empty"));
  ExpectError([&] { PackTdz(P("empty"), P("p.tdz")); }, ErrorCode::kNotFound, "no meta.json");
}

}  // namespace
}  // namespace trove::tdtest
