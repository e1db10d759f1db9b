// The .npy/.npz readers, writers and scan on files built here byte by byte (hostile headers
// included); tests/python/test_npy.py checks them against numpy itself.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "formats/npy/npy_format.h"
#include "formats/npy/npy_header.h"
#include "trove/zip_writer.h"

namespace trove {
namespace {

// Per test: ctest runs each test as its own process, in parallel, and a file one maps must not be
// rewritten by another.
std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/npy_test_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// An .npy file of `dict` (padded as numpy pads it) and `data`, in `version`.
std::string Npy(const std::string& dict, const std::string& data, int version = 1) {
  const size_t prefix = version == 1 ? 10 : 12;
  std::string header = dict;
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.resize(total - prefix - 1, ' ');
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(version);
  out += '\0';
  const uint32_t n = static_cast<uint32_t>(header.size());
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (version != 1) {
    out += static_cast<char>((n >> 16) & 0xff);
    out += static_cast<char>(n >> 24);
  }
  return out + header + data;
}

std::string Floats(std::initializer_list<float> values) {
  std::string out;
  for (float f : values) out.append(reinterpret_cast<const char*>(&f), 4);
  return out;
}

Document ReadNpyBytes(const std::string& name, const std::string& bytes, const ReadOptions& options = {}) {
  const std::string path = TempPath(name);
  WriteBytes(path, bytes);
  return ReadNpy(MappedFile::Open(path), options);
}

void ExpectNpyError(const std::string& bytes, ErrorCode code, const std::string& needle) {
  ExpectError([&] { ReadNpyBytes("hostile.npy", bytes); }, code, needle);
}

TEST(NpyReadTest, FloatArrayIsAViewOfTheMappingUnderKeyArray) {
  const std::string bytes = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", Floats({1, 2, 3, 4, 5, 6}));
  const Document doc = ReadNpyBytes("f4.npy", bytes);
  EXPECT_EQ(doc.format, "npy");
  ASSERT_EQ(doc.tensors.size(), 1u);
  EXPECT_EQ(doc.tensors[0].key, "array");
  const TensorView& v = *doc.tensors[0].view;
  EXPECT_EQ(v.dtype, DType::kFloat32);
  EXPECT_EQ(v.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(v.strides, (std::vector<int64_t>{3, 1}));
  EXPECT_TRUE(v.storage.mapped());
  EXPECT_EQ(v.At<float>(1, 2), 6.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.first_element()) % 64, 0u);  // numpy aligns the data to 64
  EXPECT_EQ(*doc.Property("descr"), "<f4");
}

TEST(NpyReadTest, FortranOrderIsAViewWithFortranStrides) {
  // Column-major bytes of [[1, 2, 3], [4, 5, 6]].
  const Document doc = ReadNpyBytes("fortran.npy", Npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                                                       Floats({1, 4, 2, 5, 3, 6})));
  const TensorView& v = *doc.tensors[0].view;
  EXPECT_EQ(v.strides, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(v.At<float>(0, 1), 2.0f);
  EXPECT_EQ(v.At<float>(1, 0), 4.0f);
  const SharedBytes c = v.ContiguousLittleEndian();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(c.data()), c.size()), Floats({1, 2, 3, 4, 5, 6}));
}

TEST(NpyReadTest, BigEndianIsReadWithoutACopyAtOpen) {
  const std::string be("\x3f\x80\x00\x00\x40\x00\x00\x00", 8);  // 1.0f, 2.0f big-endian
  const Document doc = ReadNpyBytes("be.npy", Npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be));
  const TensorView& v = *doc.tensors[0].view;
  EXPECT_EQ(v.byte_order, ByteOrder::kBig);
  EXPECT_TRUE(v.storage.mapped());
  EXPECT_EQ(v.At<float>(1), 2.0f);
}

TEST(NpyReadTest, ZeroDimensionalEmptyVersionsAndPython2Longs) {
  const Document scalar = ReadNpyBytes("0d.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", Floats({7})));
  EXPECT_TRUE(scalar.tensors[0].view->shape.empty());
  EXPECT_EQ(TensorView::As<float>(scalar.tensors[0].view->Element({})), 7.0f);
  const Document empty = ReadNpyBytes("empty.npy", Npy("{'descr': '<i8', 'fortran_order': False, 'shape': (0, 5), }", ""));
  EXPECT_EQ(empty.tensors[0].view->numel(), 0);
  for (int version : {2, 3}) {
    const Document d = ReadNpyBytes("v.npy", Npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", "\x01\x02", version));
    EXPECT_EQ(*d.Property("version"), std::to_string(version) + ".0");
    EXPECT_EQ(d.tensors[0].view->At<int>(1), 2);
  }
  // Python 2's numpy wrote longs as "2L" (numpy reads them in versions 1.0 and 2.0 only).
  const Document py2 = ReadNpyBytes("py2.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2L,), }", Floats({1, 2})));
  EXPECT_EQ(py2.tensors[0].view->shape, (std::vector<int64_t>{2}));
  ExpectNpyError(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2L,), }", Floats({1, 2}), 3), ErrorCode::kCorrupt,
                 "not a decimal integer");
}

TEST(NpyReadTest, EveryNumericDescr) {
  const std::pair<const char*, DType> cases[] = {
      {"|b1", DType::kBool},     {"|i1", DType::kInt8},       {"<i2", DType::kInt16},  {"<i4", DType::kInt32},
      {"<i8", DType::kInt64},    {"|u1", DType::kUInt8},      {"<u2", DType::kUInt16}, {"<u4", DType::kUInt32},
      {"<u8", DType::kUInt64},   {"<f2", DType::kFloat16},    {"<f8", DType::kFloat64}, {"<c8", DType::kComplex64},
      {"<c16", DType::kComplex128},
  };
  for (const auto& [descr, dtype] : cases) {
    SCOPED_TRACE(descr);
    const std::string data(ElementSize(dtype) * 3, '\0');
    const Document d = ReadNpyBytes("dt.npy", Npy(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (3,), }", data));
    EXPECT_EQ(d.tensors[0].view->dtype, dtype);
  }
}

TEST(NpyReadTest, HostileHeadersAreClearErrors) {
  const std::string f4 = "'descr': '<f4', 'fortran_order': False, ";
  // A huge shape: the file cannot hold it (named with expected and actual sizes).
  ExpectNpyError(Npy("{" + f4 + "'shape': (1000000, 1000000), }", Floats({1})), ErrorCode::kCorrupt, "truncated");
  ExpectNpyError(Npy("{" + f4 + "'shape': (3,), }", Floats({1, 2})), ErrorCode::kCorrupt, "needs 12 bytes after the 128-byte header, 8 are there (140 expected, 136 actual)");
  // Element count and byte size overflow.
  ExpectNpyError(Npy("{" + f4 + "'shape': (4294967296, 4294967296), }", ""), ErrorCode::kCorrupt, "overflows 63 bits");
  ExpectNpyError(Npy("{" + f4 + "'shape': (4611686018427387904, 1), }", ""), ErrorCode::kCorrupt, "overflows 64 bits");
  ExpectNpyError(Npy("{" + f4 + "'shape': (99999999999999999999,), }", ""), ErrorCode::kCorrupt, "exceeds 2^63 - 1");
  ExpectNpyError(Npy("{" + f4 + "'shape': (-1,), }", ""), ErrorCode::kCorrupt, "negative dimension");
  // Bad dict literals.
  ExpectNpyError(Npy("{" + f4 + "'shape': (2,) ", ""), ErrorCode::kCorrupt, "expected ',' or '}'");
  ExpectNpyError(Npy("{" + f4 + "'shape': (2,), ", ""), ErrorCode::kCorrupt, "unterminated");
  ExpectNpyError(Npy("{'descr': '<f4, 'fortran_order': False, 'shape': (), }", ""), ErrorCode::kCorrupt, "header @ 27: expected ','");
  ExpectNpyError(Npy("{'descr' '<f4', 'fortran_order': False, 'shape': (), }", ""), ErrorCode::kCorrupt, "expected ':'");
  ExpectNpyError(Npy("{'descr': '<f4", ""), ErrorCode::kCorrupt, "a line break inside a string");
  ExpectNpyError(Npy("{" + f4 + "'shape': __import__('os'), }", ""), ErrorCode::kCorrupt, "not a literal numpy writes");
  ExpectNpyError(Npy("[" + f4 + "]", ""), ErrorCode::kCorrupt, "expected ',' or ']'");
  ExpectNpyError(Npy("('a',)", ""), ErrorCode::kCorrupt, "not a dict");
  ExpectNpyError(Npy("{" + f4 + "'shape': (), 'x': 1}", ""), ErrorCode::kCorrupt, "unknown header key 'x'");
  ExpectNpyError(Npy("{" + f4 + "'shape': (), 'shape': (1,)}", Floats({1})), ErrorCode::kCorrupt, "appears twice");
  ExpectNpyError(Npy("{'descr': '<f4', 'shape': ()}", ""), ErrorCode::kCorrupt, "'fortran_order' is missing");
  ExpectNpyError(Npy("{" + f4 + "'shape': [2], }", ""), ErrorCode::kCorrupt, "not a tuple");
  ExpectNpyError(Npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (), }", ""), ErrorCode::kCorrupt, "not True or False");
  ExpectNpyError(Npy("{" + f4 + "'shape': (01,), }", ""), ErrorCode::kCorrupt, "leading zero");
  // Nesting beyond the cap.
  ExpectNpyError(Npy("{" + f4 + "'shape': " + std::string(100, '(') + "), }", ""), ErrorCode::kCorrupt, "kMaxNpyLiteralDepth");
  // Versions, lengths and magic.
  std::string wrong_version = Npy("{" + f4 + "'shape': (), }", Floats({1}));
  wrong_version[6] = 4;
  ExpectNpyError(wrong_version, ErrorCode::kUnsupported, "format version 4.0");
  std::string past_end = Npy("{" + f4 + "'shape': (), }", "");
  past_end[8] = static_cast<char>(0xff);
  past_end[9] = 0x0f;  // 4095 bytes of header in a 64-byte file
  ExpectNpyError(past_end, ErrorCode::kCorrupt, "runs past the end");
  std::string over_cap = Npy("{" + f4 + "'shape': (), }", std::string(70000, ' '), 2);
  over_cap[8] = 0x70;
  over_cap[9] = 0x11;
  over_cap[10] = 0x01;  // 70000
  ExpectNpyError(over_cap, ErrorCode::kLimit, "kMaxNpyHeaderBytes");
  ExpectNpyError(std::string("\x93NUMPY\x01", 7), ErrorCode::kCorrupt, "too short");
  ExpectNpyError(std::string("\x93NUMPY\x01\x00\x05", 9), ErrorCode::kCorrupt, "truncated in the header length");
  ExpectNpyError("PK\x03\x04 not numpy at all", ErrorCode::kCorrupt, "no \\x93NUMPY magic");
}

TEST(NpyReadTest, UnsupportedDtypesAreNamed) {
  ExpectNpyError(Npy("{'descr': [('x', '<f4'), ('y', '<i8')], 'fortran_order': False, 'shape': (2,), }", std::string(24, '\0')),
                 ErrorCode::kUnsupported, "structured dtype (fields 'x', 'y')");
  ExpectNpyError(Npy("{'descr': '<M8[s]', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')),
                 ErrorCode::kUnsupported, "'<M8[s]' has no trove type");
  ExpectNpyError(Npy("{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }", std::string(16, '\0')), ErrorCode::kUnsupported,
                 "'<f16'");
  ExpectNpyError(Npy("{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }", std::string(4, '\0')), ErrorCode::kUnsupported,
                 "byte order '|'");
}

TEST(NpyReadTest, StringArraysAreValues) {
  // '<U2' [["ab", "c"]] in Fortran order (one row: the same bytes), and a 0-d '|S3' with a NUL.
  std::string ucs4;
  for (char c : std::string("abc\0", 4)) ucs4 += std::string(1, c) + std::string(3, '\0');
  const Document doc = ReadNpyBytes("u.npy", Npy("{'descr': '<U2', 'fortran_order': True, 'shape': (1, 2), }", ucs4));
  EXPECT_TRUE(doc.tensors.empty());
  ASSERT_TRUE(doc.FindValue("array/0/1"));
  EXPECT_EQ(doc.FindValue("array/0/0")->text, "ab");
  EXPECT_EQ(doc.FindValue("array/0/1")->text, "c");
  const Document s = ReadNpyBytes("s.npy", Npy("{'descr': '|S3', 'fortran_order': False, 'shape': (), }", std::string("x\0y", 3)));
  EXPECT_EQ(s.root->Find("array")->kind, ValueKind::kBytes);
  EXPECT_EQ(s.root->Find("array")->text, std::string("x\0y", 3));
  ExpectNpyError(Npy("{'descr': '<U1', 'fortran_order': False, 'shape': (1000000000000, 0), }", ""), ErrorCode::kLimit,
                 "kMaxNpyTextElements");
  ExpectNpyError(Npy("{'descr': '<U1', 'fortran_order': False, 'shape': (1,), }", std::string("\0\0\x11\0", 4)),
                 ErrorCode::kUnsupported, "code point 1114112");
}

// numpy.save(np.array([1, 'a'], dtype=object)) holds pickle.dumps of the array; this one names
// posix.system instead, which numpy.load(allow_pickle=True) would call.
std::string ObjectArray() {
  using namespace std::string_literals;
  const std::string pickle = "\x80\x02" "cposix\nsystem\n" "X\x05\x00\x00\x00" "echo!" "\x85R."s;
  return Npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", pickle);
}

TEST(NpyReadTest, ObjectArraysAreRefusedUnlessPermissiveThenReadInert) {
  ExpectError([&] { ReadNpyBytes("obj.npy", ObjectArray()); }, ErrorCode::kRefused, "allow_pickle=True");
  ReadOptions permissive;
  permissive.pickle_policy = PicklePolicy::kPermissive;
  const Document doc = ReadNpyBytes("obj.npy", ObjectArray(), permissive);
  EXPECT_TRUE(doc.tensors.empty());
  const Value* array = doc.root->Find("array");
  ASSERT_TRUE(array);
  EXPECT_EQ(array->kind, ValueKind::kObject);
  EXPECT_EQ(array->type_name, "posix.system");
}

TEST(NpyScanTest, ObjectArrayPickleIsScannedPlainArraysAreNot) {
  WriteBytes(TempPath("scan_obj.npy"), ObjectArray());
  CheckReport report;
  ScanNpy(*MappedFile::Open(TempPath("scan_obj.npy")), report);
  bool object_finding = false, system_global = false;
  for (const Finding& f : report.findings) object_finding |= f.message.find("object array") != std::string::npos;
  for (const auto& g : report.globals) system_global |= g.name == "posix.system" && g.policy_class == "dangerous";
  EXPECT_TRUE(object_finding);
  EXPECT_TRUE(system_global);

  WriteBytes(TempPath("scan_plain.npy"), Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", Floats({1})));
  CheckReport plain;
  ScanNpy(*MappedFile::Open(TempPath("scan_plain.npy")), plain);
  EXPECT_TRUE(plain.findings.empty());
  EXPECT_EQ(plain.entries_checked, 1u);
}

// An .npz of (name, .npy bytes) members.
std::string MakeNpz(const std::string& name, const std::vector<std::pair<std::string, std::string>>& members, ZipMethod method) {
  const std::string path = TempPath(name);
  AtomicFile file(path);
  ZipWriter zip(file, ZipLayout::kTensordict);
  for (const auto& [member, bytes] : members) zip.AddEntry(member, bytes.data(), bytes.size(), method);
  zip.Finish();
  file.Commit();
  return path;
}

Document ReadNpzFile(const std::string& path, const ReadOptions& options = {}) {
  return ReadNpz(std::make_shared<const ZipReader>(MappedFile::Open(path)), options);
}

TEST(NpzReadTest, MembersAreKeysAndSlashesArePaths) {
  const std::string a = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", Floats({1, 2}));
  const std::string b = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", Floats({3}));
  const std::string path = MakeNpz("paths.npz", {{"w.npy", a}, {"enc/layer/b.npy", b}, {"enc/c.npy", a}}, ZipMethod::kStored);
  auto zip = std::make_shared<const ZipReader>(MappedFile::Open(path));
  EXPECT_TRUE(IsNpzArchive(*zip));
  const Document doc = ReadNpz(zip, {});
  EXPECT_EQ(doc.format, "npz");
  ASSERT_EQ(doc.tensors.size(), 3u);
  EXPECT_EQ(doc.tensors[0].key, "w");
  EXPECT_EQ(doc.tensors[1].key, "enc/layer/b");
  EXPECT_EQ(doc.tensors[2].key, "enc/c");
  // `trove cat FILE enc/layer/b` reaches the member by its own name.
  const Value* b_value = doc.FindValue("enc/layer/b");
  ASSERT_TRUE(b_value);
  EXPECT_EQ(b_value->tensor->At<float>(0), 3.0f);
  EXPECT_TRUE(b_value->tensor->storage.mapped());  // a stored member: a view of the mapping
  EXPECT_TRUE(doc.warnings.empty());
}

TEST(NpzReadTest, AMemberUnderAnotherArraysNameIsOneKey) {
  const std::string a = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", Floats({1}));
  const std::string path = MakeNpz("clash.npz", {{"a.npy", a}, {"a/b.npy", a}, {"x//y.npy", a}}, ZipMethod::kStored);
  const Document doc = ReadNpzFile(path);
  ASSERT_EQ(doc.tensors.size(), 3u);
  EXPECT_EQ(doc.tensors[0].key, "a");
  EXPECT_EQ(doc.tensors[1].key, "a%2Fb");
  EXPECT_EQ(doc.tensors[2].key, "x%2F%2Fy");
  EXPECT_EQ(doc.warnings.size(), 2u);
}

TEST(NpzReadTest, DeflatedMembersInflateOnlyWhenValuesAreRead) {
  std::string big;
  for (int i = 0; i < 100000; ++i) big += Floats({static_cast<float>(i % 7)});
  const std::string m = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (100000,), }", big);
  const std::string path = MakeNpz("deflated.npz", {{"x.npy", m}}, ZipMethod::kDeflate);
  const Document doc = ReadNpzFile(path);
  const TensorView& v = *doc.tensors[0].view;
  EXPECT_TRUE(v.storage.deferred());
  EXPECT_EQ(v.shape, (std::vector<int64_t>{100000}));
  EXPECT_TRUE(v.storage.deferred());  // metadata read nothing
  std::string streamed;
  v.ForEachChunk([&](const uint8_t* p, size_t n) { streamed.append(reinterpret_cast<const char*>(p), n); });
  EXPECT_EQ(streamed, big);
}

TEST(NpzReadTest, ArchivesThatAreNotNpz) {
  const std::string a = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", Floats({1}));
  const std::string path = MakeNpz("mixed.npz", {{"a.npy", a}, {"notes.txt", "hi"}}, ZipMethod::kStored);
  EXPECT_FALSE(IsNpzArchive(ZipReader(MappedFile::Open(path))));
  ExpectError([&] { ReadNpzFile(path); }, ErrorCode::kCorrupt, "'notes.txt' is not an .npy array");
  const std::string bad = MakeNpz("bad.npz", {{"a.npy", a}, {"b.npy", a.substr(0, a.size() - 2)}}, ZipMethod::kDeflate);
  try {
    ReadNpzFile(bad);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(e.entry(), "b.npy");
    EXPECT_EQ(e.file(), bad);
    EXPECT_NE(e.message().find("truncated"), std::string::npos) << e.message();
  }
}

TEST(NpyWriteTest, RoundTripsAndRefusesWhatItCannotHold) {
  const Document doc = ReadNpyBytes("src.npy", Npy("{'descr': '>f4', 'fortran_order': True, 'shape': (2, 2), }",
                                                   std::string("\x3f\x80\0\0\x40\x40\0\0\x40\0\0\0\x40\x80\0\0", 16)));
  const std::string out = TempPath("out.npy");
  WriteNpy(doc, out);
  const Document again = ReadNpy(MappedFile::Open(out), {});
  const TensorView& v = *again.tensors[0].view;
  EXPECT_EQ(v.byte_order, ByteOrder::kLittle);
  EXPECT_EQ(v.strides, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(v.At<float>(0, 1), 2.0f);
  EXPECT_EQ(v.At<float>(1, 0), 3.0f);

  const std::string npz = TempPath("out.npz");
  const std::string a = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", Floats({1}));
  const Document two = ReadNpzFile(MakeNpz("two.npz", {{"a.npy", a}, {"d/b.npy", a}}, ZipMethod::kDeflate));
  ExpectError([&] { WriteNpy(two, TempPath("two.npy")); }, ErrorCode::kUnsupported, "holds 2 tensor(s) ('a', 'd/b')");
  WriteNpz(two, npz);
  const Document back = ReadNpzFile(npz);
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.tensors[1].key, "d/b");
  EXPECT_TRUE(back.tensors[1].view->storage.mapped());  // written stored

  ReadOptions permissive;
  permissive.pickle_policy = PicklePolicy::kPermissive;
  const Document object = ReadNpyBytes("obj2.npy", ObjectArray(), permissive);
  ExpectError([&] { WriteNpz(object, TempPath("obj.npz")); }, ErrorCode::kUnsupported, "cannot be held in .npz: 'array");
  Document bf16 = doc;
  TensorView cast = CastView(*doc.tensors[0].view, DType::kBFloat16);
  bf16.tensors[0].view = &cast;
  ExpectError([&] { WriteNpy(bf16, TempPath("bf16.npy")); }, ErrorCode::kUnsupported, "no dtype for bfloat16");
}

TEST(NpyDetectTest, LooksLikeNpy) {
  EXPECT_TRUE(LooksLikeNpy(std::string("\x93NUMPY\x01\x00", 8)));
  EXPECT_TRUE(LooksLikeNpy(std::string("\x93NUMPY\x03\x00", 8)));
  EXPECT_FALSE(LooksLikeNpy(std::string("\x93NUMPY\x04\x00", 8)));
  EXPECT_FALSE(LooksLikeNpy(std::string("\x93NUMPY\x01", 7)));
  EXPECT_FALSE(LooksLikeNpy("PK\x03\x04xxxx"));
}

}  // namespace
}  // namespace trove
