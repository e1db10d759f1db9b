// One test per resource cap (docs/security.md lists them): an input just past the cap ends in a
// trove::Error that names the cap or states the bound, never in a crash or an unbounded
// allocation. The caps of wide tensordict trees (tensordict::kMaxLeaves, kMaxLevels, the
// listings of kMaxEntriesPerLevel, mapped leaf files) need inputs of hundreds of thousands of
// entries: tests/python/test_hostile_wide.py packs them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "formats/pskd/pskd_text.h"
#include "formats/pt/torch_resolver.h"
#include "formats/tensordict/level_reader.h"
#include "formats/tensordict/meta_json.h"
#include "trove/atomic_file.h"
#include "trove/document.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/pskd.h"
#include "trove/unpickler.h"
#include "trove/zip_reader.h"
#include "trove/zip_writer.h"

namespace trove {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

// Runs fn and returns the Error it must throw.
template <class F>
Error ErrorOf(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no trove::Error thrown";
  return Error(ErrorCode::kUsage, "");
}

Error UnpickleError(const std::string& pickle) {
  return ErrorOf([&] {
    ValueArena arena;
    DataResolver resolver(PicklePolicy::kStrict);
    Unpickler u(reinterpret_cast<const uint8_t*>(pickle.data()), pickle.size(), arena, resolver);
    Value* root = u.Load();
    CollectTensors(root);
  });
}

std::string Repeat(const std::string& s, uint64_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (uint64_t i = 0; i < n; ++i) out += s;
  return out;
}

void PutU32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void PutU64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void PutU16(std::string& s, uint16_t v) {
  s += static_cast<char>(v & 0xFF);
  s += static_cast<char>(v >> 8);
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/trove-caps-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteText(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

const char kTdLevel[] = R"({"shape":[],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})";

// ---- the unpickler ------------------------------------------------------------------------------

TEST(Caps, PickleMemoEntries) {
  // MEMOIZE stores the stack top again and again: one byte per memo entry.
  std::string p = "\x80\x04N" + std::string(kMaxPickleMemoEntries + 1, '\x94') + ".";
  Error e = UnpickleError(p);
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("kMaxPickleMemoEntries"), std::string::npos) << e.message();
}

TEST(Caps, PickleValues) {
  // An empty list filled with ints, one APPEND at a time: values grow, the stack does not.
  std::string p = "\x80\x02]" + Repeat("K\x01" "a", kMaxPickleValues + 1) + ".";
  Error e = UnpickleError(p);
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("kMaxPickleValues"), std::string::npos) << e.message();
}

TEST(Caps, PickleStackDepth) {
  // MARKs push nothing but still cost a slot each.
  std::string p = "\x80\x02" + std::string(kMaxPickleStackDepth + 1, '(') + ".";
  Error e = UnpickleError(p);
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("kMaxPickleStackDepth"), std::string::npos) << e.message();
}

TEST(Caps, PickleIntBytes) {
  std::string p = "\x80\x02\x8b";
  PutU32(p, static_cast<uint32_t>(kMaxPickleIntBytes + 1));
  p += std::string(kMaxPickleIntBytes + 1, '\x01') + ".";
  Error e = UnpickleError(p);
  EXPECT_NE(e.message().find("kMaxPickleIntBytes"), std::string::npos) << e.message();
}

TEST(Caps, PickleIntDigits) {
  std::string p = "L" + std::string(kMaxPickleIntDigits + 1, '7') + "L\n.";
  Error e = UnpickleError(p);
  EXPECT_NE(e.message().find("kMaxPickleIntDigits"), std::string::npos) << e.message();
}

TEST(Caps, PickleLexicalGlobals) {
  // Reading stops at a bad INT; the rest names one global per 10 bytes. The lexical pass lists
  // up to the cap, then says where it stopped instead of growing without bound.
  std::string p = "\x80\x02I12a\n0" + Repeat("cfoo\nBar\n0"s, kMaxPickleLexicalGlobals + 1) + "N.";
  ValueArena arena;
  DataResolver resolver(PicklePolicy::kPermissive);
  Unpickler u(reinterpret_cast<const uint8_t*>(p.data()), p.size(), arena, resolver);
  EXPECT_THROW(u.Load(), Error);
  EXPECT_EQ(u.globals().size(), kMaxPickleLexicalGlobals);
  EXPECT_NE(u.lexical_stop().find("kMaxPickleLexicalGlobals"), std::string::npos) << u.lexical_stop();
}

TEST(Caps, PickleReferences) {
  // A list of 4096 Nones, memoized, then list(L) over and over: each REDUCE copies 4096 slots for
  // 6 bytes of pickle, so a small file asks for more slots than the cap allows.
  std::string p = "\x80\x02]q\x00("s + std::string(4096, 'N') + "e" + "c__builtin__\nlist\nq\x01";
  const uint64_t copies = kMaxPickleReferences / 4096 + 2;
  p += Repeat("h\x01h\x00\x85R0"s, copies) + "N.";
  Error e = UnpickleError(p);
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("kMaxPickleReferences"), std::string::npos) << e.message();
}

// ---- the value tree -----------------------------------------------------------------------------

TEST(Caps, TreeVisits) {
  // A memo DAG: each list holds the previous one twice, 2^40 paths from 41 nodes.
  ValueArena arena;
  Value* v = arena.None();
  for (int i = 0; i < 40; ++i) {
    Value* l = arena.List();
    l->items = {v, v};
    v = l;
  }
  Error e = ErrorOf([&] { CollectTensors(v); });
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("RepeatedVisitsAllowed"), std::string::npos) << e.message();
}

std::string PickleStr(const std::string& text) {
  std::string s = "X";
  PutU32(s, static_cast<uint32_t>(text.size()));
  return s + text;
}

TEST(Caps, TensorRank) {
  // torch's _rebuild_tensor_v2 with kMaxTensorRank + 1 dimensions, through the torch resolver.
  std::string ones = Repeat("K\x01", kMaxTensorRank + 1);
  std::string p = "\x80\x02" "ctorch._utils\n_rebuild_tensor_v2\n((" + PickleStr("storage") +
                  "ctorch\nFloatStorage\n" + PickleStr("0") + PickleStr("cpu") + "K\x0atQK\x00("s + ones + "t(" + ones +
                  "t\x89" "ccollections\nOrderedDict\n)RtR.";
  Error e = ErrorOf([&] {
    ValueArena arena;
    TorchResolver resolver(PicklePolicy::kStrict);
    Unpickler u(reinterpret_cast<const uint8_t*>(p.data()), p.size(), arena, resolver);
    u.Load();
  });
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("kMaxTensorRank"), std::string::npos) << e.message();
}

// ---- zip ----------------------------------------------------------------------------------------

TEST(Caps, ZipEntries) {
  // A zip64 end record that declares kMaxZipEntries + 1 entries; the count is refused before any
  // index is allocated.
  std::string z;
  const uint64_t n = kMaxZipEntries + 1;
  PutU32(z, 0x06064b50);
  PutU64(z, 44);
  PutU16(z, 45);
  PutU16(z, 45);
  PutU32(z, 0);
  PutU32(z, 0);
  PutU64(z, n);
  PutU64(z, n);
  PutU64(z, 0);  // central directory size
  PutU64(z, 0);  // central directory offset
  PutU32(z, 0x07064b50);
  PutU32(z, 0);
  PutU64(z, 0);  // offset of the zip64 end record
  PutU32(z, 1);
  PutU32(z, 0x06054b50);
  PutU16(z, 0);
  PutU16(z, 0);
  PutU16(z, 0xFFFF);
  PutU16(z, 0xFFFF);
  PutU32(z, 0xFFFFFFFF);
  PutU32(z, 0xFFFFFFFF);
  PutU16(z, 0);
  Error e = ErrorOf([&] { ZipReader r(SharedBytes::CopyOf(z.data(), z.size())); });
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("kMaxZipEntries"), std::string::npos) << e.message();
}

TEST(Caps, PtFileVersion) {
  // kMaxPtFileVersion (10): the newest zip format version torch 1.13 reads; a newer one is refused
  // before the pickle is looked at.
  TempDir dir;
  const std::string path = dir.path() + "/v11.pt";
  {
    AtomicFile out(path);
    ZipWriter zip(out, ZipLayout::kPyTorch);
    const std::string pkl = "\x80\x02}q\x00.";
    zip.AddEntry("archive/data.pkl", pkl.data(), pkl.size());
    zip.AddEntry("archive/version", "11\n", 3);
    zip.Finish();
    out.Commit();
  }
  Error e = ErrorOf([&] { Open(path); });
  EXPECT_NE(e.message().find("10"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("version"), std::string::npos) << e.message();
}

// ---- meta.json and tensordict trees -------------------------------------------------------------

TEST(Caps, MetaJsonBytes) {
  std::string big = "\"" + std::string(tensordict::kMaxMetaJsonBytes, 'x') + "\"";
  Error e = ErrorOf([&] { tensordict::ParseMetaJson(big, "meta.json"); });
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("kMaxMetaJsonBytes"), std::string::npos) << e.message();
}

TEST(Caps, MetaJsonDepth) {
  std::string deep = std::string(tensordict::kMaxMetaJsonDepth + 1, '[') + std::string(tensordict::kMaxMetaJsonDepth + 1, ']');
  Error e = ErrorOf([&] { tensordict::ParseMetaJson(deep, "meta.json"); });
  EXPECT_NE(e.message().find("meta.json"), std::string::npos) << e.message();
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("kMaxMetaJsonDepth"), std::string::npos) << e.message();
}

TEST(Caps, MetaJsonIntDigits) {
  // At the cap an integer is read exactly (as Python's json would); one digit more is refused.
  const std::string at_cap = "[-" + std::string(tensordict::kMaxMetaJsonIntDigits, '7') + ", 1e300, 2.5]";
  tensordict::Json json = tensordict::ParseMetaJson(at_cap, "meta.json");
  ValueArena arena;
  const Value* v = tensordict::JsonToValue(json, arena);
  EXPECT_EQ(v->items[0]->IntToString(), "-" + std::string(tensordict::kMaxMetaJsonIntDigits, '7'));
  EXPECT_EQ(v->items[1]->kind, ValueKind::kFloat);  // nlohmann's inf: not an integer literal
  EXPECT_EQ(tensordict::DumpCompact(tensordict::Json::array({json[0], json[2]})),
            "[-" + std::string(tensordict::kMaxMetaJsonIntDigits, '7') + ",2.5]");
  // One digit more, as a number below a double's limit and as one beyond it.
  for (const char lead : {'1', '9'}) {
    const std::string over = "[" + std::string(tensordict::kMaxMetaJsonIntDigits + 1, lead) + "]";
    Error e = ErrorOf([&] { tensordict::ParseMetaJson(over, "meta.json"); });
    EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
    EXPECT_NE(e.message().find("kMaxMetaJsonIntDigits"), std::string::npos) << e.message();
  }
  // The writer refuses what the reader would.
  Error w = ErrorOf([&] {
    tensordict::ValueToJson(*arena.IntFromDecimal(std::string(tensordict::kMaxMetaJsonIntDigits + 1, '3'), false), "cfg");
  });
  EXPECT_EQ(w.code(), ErrorCode::kUnsupported) << w.message();
  EXPECT_NE(w.message().find("cfg"), std::string::npos) << w.message();
}

TEST(Caps, TensordictLevelDepth) {
  TempDir dir;
  fs::path p = dir.path();
  for (int i = 0; i <= tensordict::kMaxLevelDepth + 1; ++i) {
    // kTdLevel without its opening brace, after the child's entry (appended, not operator+: GCC 12
    // warns of a false array-bounds overflow on the temporary).
    std::string meta = R"({"n":{"type":"TensorDict"},)";
    meta.append(kTdLevel + 1);
    WriteText(p / "meta.json", meta);
    p /= "n";
    fs::create_directory(p);
  }
  WriteText(p / "meta.json", kTdLevel);
  Error e = ErrorOf([&] { Open(dir.path()); });
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("kMaxLevelDepth"), std::string::npos) << e.message();
}

TEST(Caps, TensordictEntriesPerLevel) {
  TempDir dir;
  std::string meta = "{";
  for (uint64_t i = 0; i <= tensordict::kMaxEntriesPerLevel; ++i) meta += "\"k" + std::to_string(i) + "\":1,";
  meta += std::string(kTdLevel + 1);
  WriteText(fs::path(dir.path()) / "meta.json", meta);
  Error e = ErrorOf([&] { Open(dir.path()); });
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("kMaxEntriesPerLevel"), std::string::npos) << e.message();
}

TEST(Caps, TensordictSidecarBytes) {
  // A sparse other.pickle just over the cap: refused by its size, never read.
  TempDir dir;
  WriteText(fs::path(dir.path()) / "meta.json",
            R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","_is_non_tensor":true})");
  fs::path sidecar = fs::path(dir.path()) / "other.pickle";
  WriteText(sidecar, "");
  fs::resize_file(sidecar, tensordict::kMaxSidecarBytes + 1);
  ReadOptions opts;
  opts.allow_pickle = true;
  Error e = ErrorOf([&] { Open(dir.path(), opts); });
  EXPECT_EQ(e.code(), ErrorCode::kLimit) << e.message();
  EXPECT_NE(e.message().find("other.pickle"), std::string::npos) << e.message();
}

// ---- .psk.d ---------------------------------------------------------------------------------------

TEST(Caps, PskdTypeTextBytes) {
  std::string h = "PSKD";
  PutU16(h, 1);
  PutU32(h, static_cast<uint32_t>(pskd::kMaxTypeTextBytes + 1));
  Error e = ErrorOf([&] { pskd::PskdFile::FromBytes(SharedBytes::CopyOf(h.data(), h.size()), "x.psk.d"); });
  EXPECT_NE(e.message().find("the cap is"), std::string::npos) << e.message();
}

TEST(Caps, PskdLeaves) {
  std::string t = "(" + Repeat("\xe2\x84\x9d[], ", pskd::kMaxLeaves) + "\xe2\x84\x9d[])";
  Error e = ErrorOf([&] { pskd::ParseSampleType(t); });
  EXPECT_NE(e.message().find("leaves"), std::string::npos) << e.message();
}

TEST(Caps, PskdTypeDepth) {
  std::string t = std::string(pskd::kMaxTypeDepth + 1, '(') + "\xe2\x84\x9d[]" + Repeat(",)", pskd::kMaxTypeDepth + 1);
  Error e = ErrorOf([&] { pskd::ParseSampleType(t); });
  EXPECT_NE(e.message().find("nested"), std::string::npos) << e.message();
}

TEST(Caps, PskdLeafRank) {
  std::string t = "\xe2\x84\x9d[" + Repeat("1, ", pskd::kMaxLeafRank) + "1]";
  Error e = ErrorOf([&] { pskd::ParseSampleType(t); });
  EXPECT_NE(e.message().find("dimensions"), std::string::npos) << e.message();
}

TEST(Caps, PskdSampleBytes) {
  std::string t = "\xe2\x84\x9d[" + std::to_string(pskd::kMaxSampleBytes) + "]";
  Error e = ErrorOf([&] { pskd::ParseSampleType(t); });
  EXPECT_NE(e.message().find("2^48"), std::string::npos) << e.message();
}

// ---- writer-side inputs (presk data) --------------------------------------------------------------

TEST(Caps, LmWindowTokens) {
  TempDir dir;
  WriteText(fs::path(dir.path()) / "t.txt", "1 2 3\n");
  Error e = ErrorOf([&] {
    pskd::WriteLmWindows({{dir.path() + "/t.txt"}, 10, std::nullopt, dir.path() + "/o.psk.d"}, pskd::kMaxWindowTokens + 1, 1);
  });
  EXPECT_NE(e.message().find("kMaxWindowTokens"), std::string::npos) << e.message();
  EXPECT_FALSE(fs::exists(dir.path() + "/o.psk.d"));
}

TEST(Caps, TokenBytes) {
  // A token of 21 digits (kMaxTokenBytes is 20: 2^64 has 20 digits) is not an index.
  TempDir dir;
  WriteText(fs::path(dir.path()) / "t.txt", "1 2 " + std::string(21, '1') + "\n");
  Error e = ErrorOf([&] { pskd::WriteLmWindows({{dir.path() + "/t.txt"}, 10, std::nullopt, dir.path() + "/o.psk.d"}, 2, 2); });
  EXPECT_NE(e.message().find(std::string(21, '1')), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("line 1"), std::string::npos) << e.message();
}

TEST(Caps, VocabFileBytes) {
  // A sparse vocabulary file just over kMaxVocabFileBytes is refused by its size.
  TempDir dir;
  WriteText(fs::path(dir.path()) / "in.txt", "abc\n");
  fs::path vocab = fs::path(dir.path()) / "vocab.json";
  WriteText(vocab, "");
  fs::resize_file(vocab, (uint64_t{64} << 20) + 1);
  Error e = ErrorOf([&] { pskd::EncodeText(dir.path() + "/in.txt", vocab.string(), dir.path() + "/o.txt"); });
  EXPECT_NE(e.message().find(std::to_string(uint64_t{64} << 20)), std::string::npos) << e.message();
}

}  // namespace
}  // namespace trove
