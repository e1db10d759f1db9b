// The three classes of globals under each PicklePolicy (docs/security.md), and numpy's arrays and
// scalars as CPython/numpy pickle them in every protocol, read as tensors and numbers.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "python_peer.h"
#include "trove/error.h"
#include "trove/unpickler.h"

namespace trove {
namespace {

using namespace std::string_literals;

struct Loaded {
  std::unique_ptr<ValueArena> arena = std::make_unique<ValueArena>();
  Value* value = nullptr;
  std::vector<PickleGlobal> globals;
};

Loaded Load(const std::string& p, PicklePolicy policy) {
  Loaded out;
  DataResolver resolver(policy);
  Unpickler u(reinterpret_cast<const uint8_t*>(p.data()), p.size(), *out.arena, resolver);
  try {
    out.value = u.Load();
  } catch (...) {
    out.globals = u.globals();
    throw;
  }
  out.globals = u.globals();
  return out;
}

Error LoadError(const std::string& p, PicklePolicy policy) {
  try {
    Load(p, policy);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "loaded";
  return Error(ErrorCode::kUsage, "");
}

// ---- the three classes ----

TEST(ReadPolicy, DangerousNamesAreRefusedByDefaultWithTheirClass) {
  // {'x': posix.system('true')}: refused wherever it appears, named, with what it does.
  const std::string call = "\x80\x02}X\x01\x00\x00\x00xcposix\nsystem\nX\x04\x00\x00\x00true\x85Rs."s;
  Error e = LoadError(call, PicklePolicy::kDefault);
  EXPECT_EQ(e.code(), ErrorCode::kRefused);
  EXPECT_EQ(e.refused_global(), "posix.system");
  EXPECT_EQ(e.reason(), "refused global 'posix.system': it resolves to posix.system (exec: runs commands or code)");
  // Referred to only, through an attribute chain: still its target's class.
  const std::string name = "\x80\x02}X\x01\x00\x00\x00xctorch.serialization.os\nsystem\ns."s;
  e = LoadError(name, PicklePolicy::kDefault);
  EXPECT_EQ(e.refused_global(), "torch.serialization.os.system");
  EXPECT_NE(e.reason().find("resolves to os.system (exec"), std::string::npos) << e.reason();
  for (const char* dotted : {"builtins\ngetattr", "importlib\nimport_module", "pickle\nloads", "socket\nsocket",
                             "builtins\nopen", "ctypes\nCDLL"}) {
    SCOPED_TRACE(dotted);
    EXPECT_EQ(LoadError("c"s + dotted + "\n.", PicklePolicy::kDefault).code(), ErrorCode::kRefused);
  }
  // --permissive: an inert object, never called.
  Loaded l = Load(call, PicklePolicy::kPermissive);
  const Value* x = l.value->Find("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->kind, ValueKind::kObject);
  EXPECT_EQ(x->type_name, "posix.system");
  EXPECT_TRUE(x->unknown_class);
}

TEST(ReadPolicy, UnknownClassesAreInertObjectsByDefault) {
  // NEWOBJ(mod.Cfg, ()) + BUILD({'lr': 1}); REDUCE(mod.Make, (3,)); a name only referred to.
  const std::string p =
      "\x80\x02}(X\x01\x00\x00\x00" "ccmod\nCfg\n)\x81}X\x02\x00\x00\x00lrK\x01sb"
      "X\x01\x00\x00\x00mcmod\nMake\nK\x03\x85R"
      "X\x01\x00\x00\x00ncmod\nOptim\nu."s;
  Loaded l = Load(p, PicklePolicy::kDefault);
  const Value* c = l.value->Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->kind, ValueKind::kObject);
  EXPECT_TRUE(c->unknown_class);
  EXPECT_TRUE(c->new_object);
  ASSERT_NE(c->state, nullptr);
  EXPECT_EQ(c->state->Find("lr")->integer, 1);
  const Value* m = l.value->Find("m");
  EXPECT_TRUE(m->unknown_class);
  EXPECT_FALSE(m->new_object);
  EXPECT_EQ(m->args->items[0]->integer, 3);
  const Value* n = l.value->Find("n");
  EXPECT_EQ(n->kind, ValueKind::kGlobal);
  EXPECT_EQ(n->type_name, "mod.Optim");
  ASSERT_EQ(l.globals.size(), 3u);
  for (const PickleGlobal& g : l.globals) EXPECT_FALSE(g.allowed) << g.name;
  // --strict: the first of them is the error.
  Error e = LoadError(p, PicklePolicy::kStrict);
  EXPECT_EQ(e.refused_global(), "mod.Cfg");
  EXPECT_EQ(e.reason(), "refused global 'mod.Cfg'");
  // Calling what the file made itself is refused unless permissive.
  const std::string chain = "\x80\x02" "cmod\nMake\n)R)R."s;
  EXPECT_EQ(LoadError(chain, PicklePolicy::kDefault).reason(),
            "refused call of object 'mod.Make' (made by the file itself: only a global can be called)");
  EXPECT_EQ(Load(chain, PicklePolicy::kPermissive).value->kind, ValueKind::kObject);
}

TEST(ReadPolicy, DictLikeClassesAreDicts) {
  // defaultdict(list, ...), Namespace() + BUILD, copyreg._reconstructor(mod.D, dict, {...})
  // (protocol 0/1's dict subclass), mod.D() + SETITEMS (protocol 2's).
  const std::string p =
      "\x80\x02}(X\x01\x00\x00\x00" "dccollections\ndefaultdict\nc__builtin__\nlist\n\x85RX\x01\x00\x00\x00kK\x01s"
      "X\x01\x00\x00\x00nc" "argparse\nNamespace\n)\x81}X\x02\x00\x00\x00lrK\x02sb"
      "X\x01\x00\x00\x00rccopyreg\n_reconstructor\ncmod\nD\nc__builtin__\ndict\n}X\x01\x00\x00\x00" "aK\x03s\x87R"
      "X\x01\x00\x00\x00scmod\nD\n)\x81X\x01\x00\x00\x00" "bK\x04su."s;
  for (PicklePolicy policy : {PicklePolicy::kDefault, PicklePolicy::kPermissive}) {
    Loaded l = Load(p, policy);
    const Value* d = l.value->Find("d");
    EXPECT_EQ(d->kind, ValueKind::kDict);
    EXPECT_EQ(d->type_name, "collections.defaultdict");
    ASSERT_NE(d->args, nullptr);
    EXPECT_EQ(d->args->items[0]->type_name, "builtins.list");
    EXPECT_EQ(d->Find("k")->integer, 1);
    const Value* n = l.value->Find("n");
    EXPECT_EQ(n->type_name, "argparse.Namespace");
    EXPECT_EQ(n->Find("lr")->integer, 2);  // its attributes are its entries
    for (const char* key : {"r", "s"}) {
      const Value* sub = l.value->Find(key);
      EXPECT_EQ(sub->kind, ValueKind::kDict) << key;
      EXPECT_EQ(sub->type_name, "mod.D") << key;
      EXPECT_TRUE(sub->new_object) << key;
      EXPECT_FALSE(sub->unknown_class) << key;
      EXPECT_EQ(sub->entries.size(), 1u) << key;
    }
  }
  // defaultdict and Namespace are data names: strict reads them too, and refuses the subclass.
  EXPECT_EQ(LoadError(p, PicklePolicy::kStrict).refused_global(), "mod.D");
}

// ---- numpy, as numpy pickles it ----

constexpr const char* kNumpyScript = R"PY(
import pickle, numpy as np
arrays = {
    'f32': np.arange(6, dtype=np.float32).reshape(2, 3), 'f64_be': np.arange(4, dtype='>f8'),
    'i8_fortran': np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)), 'u8': np.arange(5, dtype=np.uint8),
    'bool': np.array([True, False, True]), 'c64': np.array([1 + 2j, -3j], dtype=np.complex64),
    'f16': np.array([1.5, -2.0], dtype=np.float16), 'scalar0d': np.array(7, dtype=np.int32),
    'empty': np.zeros((0, 3), dtype=np.float32), 'u64': np.array([2**64 - 1], dtype=np.uint64),
}
for name, a in arrays.items():
    c = np.ascontiguousarray(a)
    c = c.astype(c.dtype.newbyteorder('<'))
    for proto in range(6):
        print('\t'.join([name, str(proto), pickle.dumps(a, protocol=proto).hex(), a.dtype.name, ','.join(map(str, a.shape)),
                         c.tobytes().hex()]))
)PY";

TEST(ReadPolicy, NumpyArraysInEveryProtocolAreTensors) {
  if (!testing::HavePython()) GTEST_SKIP() << "no /usr/bin/python3";
  std::istringstream lines(testing::RunPython(kNumpyScript));
  std::string line;
  size_t count = 0;
  while (std::getline(lines, line)) {
    auto f = testing::SplitFields(line);
    if (f.size() == 5) f.emplace_back();  // an empty array's bytes
    ASSERT_EQ(f.size(), 6u) << line;
    SCOPED_TRACE(f[0] + " protocol " + f[1]);
    const std::vector<uint8_t> bytes = testing::FromHex(f[2]);
    const std::vector<uint8_t> want = testing::FromHex(f[5]);
    for (PicklePolicy policy : {PicklePolicy::kStrict, PicklePolicy::kDefault}) {
      Loaded l = Load(std::string(bytes.begin(), bytes.end()), policy);
      ASSERT_EQ(l.value->kind, ValueKind::kTensor);
      // marked as numpy's, so that a reader can give back the array torch.load gives
      EXPECT_EQ(l.value->type_name, "numpy.ndarray");
      const TensorView& t = *l.value->tensor;
      EXPECT_EQ(std::string(Name(t.dtype)), f[3] == "bool" ? "bool" : f[3]);
      // in the byte order numpy unpickles it in: _frombuffer (protocol 5) keeps a big-endian
      // array's, ndarray.__setstate__ (protocols 0-4) gives the machine's
      const bool big = f[0] == "f64_be" && f[1] == "5";
      EXPECT_EQ(t.byte_order, big ? ByteOrder::kBig : ByteOrder::kLittle);
      std::string shape;
      for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
      EXPECT_EQ(shape, f[4]);
      const SharedBytes got = t.ContiguousLittleEndian();
      EXPECT_EQ(std::vector<uint8_t>(got.data(), got.data() + got.size()), want);
    }
    ++count;
  }
  EXPECT_EQ(count, 60u);
}

constexpr const char* kNumpyScalarScript = R"PY(
import pickle, numpy as np
for name, s in {'i64': np.int64(-7), 'u64': np.uint64(2**64 - 1), 'f64': np.float64(0.25), 'f16': np.float16(1.5),
                'f32_be': np.array([2.5], dtype='>f4')[0], 'bool': np.bool_(True), 'c128': np.complex128(1 - 2j)}.items():
    for proto in range(6):
        print('\t'.join([name, str(proto), pickle.dumps(s, protocol=proto).hex(), repr(s.item())]))
)PY";

TEST(ReadPolicy, NumpyScalarsAreNumbers) {
  if (!testing::HavePython()) GTEST_SKIP() << "no /usr/bin/python3";
  std::istringstream lines(testing::RunPython(kNumpyScalarScript));
  std::string line;
  size_t count = 0;
  while (std::getline(lines, line)) {
    const auto f = testing::SplitFields(line);
    ASSERT_EQ(f.size(), 4u) << line;
    SCOPED_TRACE(f[0] + " protocol " + f[1]);
    const std::vector<uint8_t> bytes = testing::FromHex(f[2]);
    Loaded l = Load(std::string(bytes.begin(), bytes.end()), PicklePolicy::kDefault);
    const Value& v = *l.value;
    std::string got;  // as Python's repr of .item() spells it
    switch (v.kind) {
      case ValueKind::kInt: got = v.IntToString(); break;
      case ValueKind::kFloat: got = std::to_string(v.real); break;
      case ValueKind::kBool: got = v.boolean ? "True" : "False"; break;
      case ValueKind::kComplex: got = "(" + std::to_string(v.real) + "," + std::to_string(v.imag) + ")"; break;
      default: got = std::string(KindName(v.kind));
    }
    const std::map<std::string, std::string> want = {
        {"i64", "-7"}, {"u64", "18446744073709551615"}, {"f64", std::to_string(0.25)}, {"f16", std::to_string(1.5)},
        {"f32_be", std::to_string(2.5)}, {"bool", "True"}, {"c128", "(" + std::to_string(1.0) + "," + std::to_string(-2.0) + ")"}};
    EXPECT_EQ(got, want.at(f[0])) << f[3];
    // numpy's scalar class and its little-endian bytes, for a reader that gives the scalar back
    const std::map<std::string, std::pair<std::string, std::string>> scalar = {
        {"i64", {"numpy.int64", "\xf9\xff\xff\xff\xff\xff\xff\xff"}}, {"u64", {"numpy.uint64", std::string(8, '\xff')}},
        {"f64", {"numpy.float64", std::string("\0\0\0\0\0\0\xd0\x3f", 8)}}, {"f16", {"numpy.float16", "\x00\x3e"s}},
        {"f32_be", {"numpy.float32", "\x00\x00\x20\x40"s}}, {"bool", {"numpy.bool_", "\x01"}},
        {"c128", {"numpy.complex128", std::string("\0\0\0\0\0\0\xf0\x3f\0\0\0\0\0\0\0\xc0", 16)}}};
    EXPECT_EQ(v.type_name, scalar.at(f[0]).first);
    EXPECT_EQ(v.text, scalar.at(f[0]).second);
    ++count;
  }
  EXPECT_EQ(count, 42u);
}

TEST(ReadPolicy, NumpyStatesThatLieAreRefused) {
  // _reconstruct(ndarray, (0,), b'b') + BUILD((1, shape, dtype('f4') + BUILD, False, data)).
  auto array = [](const std::string& shape, const std::string& type, const std::string& data) {
    return "\x80\x03" "cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" "C\x01" "b\x87R"
           "(K\x01"s + shape + "cnumpy\ndtype\nX" + std::string(1, static_cast<char>(type.size())) + "\x00\x00\x00"s + type +
           "\x89\x88\x87R(K\x03X\x01\x00\x00\x00<NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89"s + data + "tb.";
  };
  const std::string good = array("K\x02\x85", "f4", "C\x08"s + std::string(8, '\0'));
  Loaded l = Load(good, PicklePolicy::kDefault);
  ASSERT_EQ(l.value->kind, ValueKind::kTensor);
  EXPECT_EQ(l.value->tensor->shape, std::vector<int64_t>{2});
  // 7 bytes for 2 float32
  Error e = LoadError(array("K\x02\x85", "f4", "C\x07"s + std::string(7, '\0')), PicklePolicy::kDefault);
  EXPECT_EQ(e.code(), ErrorCode::kCorrupt);
  EXPECT_NE(e.reason().find("holds 7 bytes, not 8"), std::string::npos) << e.reason();
  // a shape whose product overflows
  e = LoadError(array("\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40\x86", "f4", "C\x00"s),
                PicklePolicy::kDefault);
  EXPECT_EQ(e.code(), ErrorCode::kCorrupt);
  // a rank beyond kMaxTensorRank
  std::string rank = "(";
  for (int i = 0; i < 65; ++i) rank += "K\x01";
  e = LoadError(array(rank + "t", "f4", "C\x04"s + std::string(4, '\0')), PicklePolicy::kDefault);
  EXPECT_EQ(e.code(), ErrorCode::kLimit);
  // a dtype without a tensor meaning stays an inert data object of numpy's
  l = Load(array("K\x01\x85", "U1", "C\x04"s + std::string(4, '\0')), PicklePolicy::kDefault);
  EXPECT_EQ(l.value->kind, ValueKind::kObject);
  EXPECT_EQ(l.value->type_name, "numpy.ndarray");
  EXPECT_FALSE(l.value->unknown_class);
}

}  // namespace
}  // namespace trove
