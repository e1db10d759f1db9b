// Hostile pickles: code-execution attempts, container-type confusion, resource abuse and
// malformed bytes. Each must end in a trove::Error with the expected code and a message naming
// the opcode offset (or load as inert data), never a crash, a hang or an unbounded allocation.
#include <gtest/gtest.h>

#include <optional>

#include <random>
#include <sstream>

#include "canonical_form.h"
#include "python_peer.h"
#include "trove/error.h"
#include "trove/unpickler.h"
#include "pickle/pickle_scan.h"
#include "trove/findings.h"

namespace trove {
namespace {

using namespace std::string_literals;

struct Outcome {
  bool ok = false;
  ErrorCode code = ErrorCode::kUsage;
  std::string message;
  std::optional<uint64_t> offset;  // the error's fields
  std::string reason;
  std::string refused_global;
  std::optional<Error> error;
  Value* value = nullptr;
  std::vector<PickleGlobal> globals;
};

class Hostile : public ::testing::Test {
 protected:
  Outcome Run(const std::string& p, PickleResolver& resolver, uint64_t base = 0) {
    Outcome o;
    Unpickler u(reinterpret_cast<const uint8_t*>(p.data()), p.size(), arena_, resolver, base);
    try {
      o.value = u.Load();
      o.ok = true;
    } catch (const Error& e) {
      o.code = e.code();
      o.message = e.message();
      o.offset = e.offset();
      o.reason = e.reason();
      o.refused_global = e.refused_global();
      o.error = e;
    }
    o.globals = u.globals();
    return o;
  }
  Outcome Strict(const std::string& p, uint64_t base = 0) {
    DataResolver r(PicklePolicy::kStrict);
    return Run(p, r, base);
  }
  Outcome Permissive(const std::string& p) {
    DataResolver r(PicklePolicy::kPermissive);
    return Run(p, r);
  }
  // The error's code, offset and reason fields, and the text users see ("@ offset: reason").
  void ExpectError(const std::string& p, ErrorCode code, uint64_t offset, const std::string& reason) {
    Outcome o = Strict(p);
    EXPECT_FALSE(o.ok);
    EXPECT_EQ(ErrorCodeName(o.code), ErrorCodeName(code)) << o.message;
    EXPECT_EQ(o.offset, offset) << o.message;
    EXPECT_EQ(o.reason, reason);
    EXPECT_EQ(o.message, "@ " + std::to_string(offset) + ": " + reason);
  }

  ValueArena arena_;
};

// ---- code execution ----

TEST_F(Hostile, DangerousGlobalsAreRefusedByNameAndOffset) {
  const char* names[][2] = {{"os", "system"},           {"posix", "system"},  {"nt", "system"},
                            {"builtins", "eval"},       {"builtins", "exec"}, {"subprocess", "Popen"},
                            {"builtins", "getattr"},    {"importlib", "import_module"},
                            {"marshal", "loads"},       {"pickle", "loads"},  {"builtins", "__import__"},
                            {"torch", "load"},          {"numpy", "load"},    {"collections", "UserDict"}};
  for (auto& n : names) {
    std::string dotted = std::string(n[0]) + "." + n[1];
    SCOPED_TRACE(dotted);
    // GLOBAL at offset 2 (after PROTO 4).
    std::string g = "\x80\x04"s + "c" + n[0] + "\n" + n[1] + "\n" + "\x8c\x02ls\x85R."s;
    Outcome o = Strict(g);
    EXPECT_EQ(o.code, ErrorCode::kRefused);
    EXPECT_EQ(o.message, "@ 2: refused global '" + dotted + "'");
    EXPECT_EQ(o.offset, 2u);
    EXPECT_EQ(o.refused_global, dotted);
    ASSERT_EQ(o.globals.size(), 1u);
    EXPECT_EQ(o.globals[0].module, n[0]);
    EXPECT_FALSE(o.globals[0].allowed);
    // STACK_GLOBAL at offset 2 + 2 + len(module) + 2 + len(name).
    std::string sg = "\x80\x04"s + "\x8c" + char(strlen(n[0])) + n[0] + "\x8c" + char(strlen(n[1])) + n[1] + "\x93\x8c\x02ls\x85R."s;
    o = Strict(sg);
    EXPECT_EQ(o.code, ErrorCode::kRefused);
    EXPECT_EQ(o.message, "@ " + std::to_string(6 + strlen(n[0]) + strlen(n[1])) + ": refused global '" + dotted + "'");
    EXPECT_EQ(o.offset, 6 + strlen(n[0]) + strlen(n[1]));
    EXPECT_EQ(o.refused_global, dotted);
    // INST at offset 7 (after MARK and STRING 'ls').
    std::string inst = "(S'ls'\ni"s + n[0] + "\n" + n[1] + "\n.";
    o = Strict(inst);
    EXPECT_EQ(o.code, ErrorCode::kRefused);
    EXPECT_EQ(o.message, "@ 7: refused global '" + dotted + "'");
    EXPECT_EQ(o.offset, 7u);
    EXPECT_EQ(o.refused_global, dotted);
    // OBJ: the class comes from a GLOBAL at offset 1.
    std::string obj = "(c"s + n[0] + "\n" + n[1] + "\nS'ls'\no.";
    o = Strict(obj);
    EXPECT_EQ(o.code, ErrorCode::kRefused);
    EXPECT_EQ(o.message, "@ 1: refused global '" + dotted + "'");
    EXPECT_EQ(o.offset, 1u);
    EXPECT_EQ(o.refused_global, dotted);
  }
}

TEST_F(Hostile, Python2BuiltinNamesAreRenamedBeforeTheCheck) {
  Outcome o = Strict("c__builtin__\neval\n(S'1'\ntR.");
  EXPECT_EQ(o.code, ErrorCode::kRefused);
  EXPECT_EQ(o.message, "@ 0: refused global 'builtins.eval'");
  EXPECT_EQ(o.refused_global, "builtins.eval");
  ASSERT_EQ(o.globals.size(), 1u);
  EXPECT_EQ(o.globals[0].module, "builtins");
  // Protocol 3+ does not rename (CPython does not either).
  o = Strict("\x80\x03" "c__builtin__\nset\n)R."s);
  EXPECT_EQ(o.message, "@ 2: refused global '__builtin__.set'");
  EXPECT_EQ(o.refused_global, "__builtin__.set");
}

TEST_F(Hostile, RealMaliciousPicklesFromPythonAreRefusedInEveryProtocol) {
  if (!testing::HavePython()) GTEST_SKIP() << "no /usr/bin/python3";
  std::string out = testing::RunPython(R"PY(
import pickle, os, builtins, subprocess, importlib, marshal
class R:
    def __init__(self, f, a): self.f, self.a = f, a
    def __reduce__(self): return (self.f, self.a)
payloads = {'posix.system': R(os.system, ('echo pwned',)), 'builtins.eval': R(builtins.eval, ('1+1',)),
            'builtins.exec': R(builtins.exec, ('x=1',)), 'subprocess.Popen': R(subprocess.Popen, (['true'],)),
            'builtins.getattr': R(builtins.getattr, (1, 'real')),
            'importlib.import_module': R(importlib.import_module, ('os',)),
            'marshal.loads': R(marshal.loads, (b'',))}
for name, obj in payloads.items():
    for proto in range(6):
        print(name, proto, pickle.dumps({'weights': [1.0], 'x': obj}, protocol=proto).hex(), sep='\t')
)PY");
  std::stringstream ss(out);
  std::string line;
  int n = 0;
  while (std::getline(ss, line)) {
    auto f = testing::SplitFields(line);
    ASSERT_EQ(f.size(), 3u);
    SCOPED_TRACE(f[0] + " protocol " + f[1]);
    auto bytes = testing::FromHex(f[2]);
    std::string p(bytes.begin(), bytes.end());
    Outcome o = Strict(p);
    EXPECT_EQ(o.code, ErrorCode::kRefused);
    EXPECT_NE(o.message.find("refused global '" + f[0] + "'"), std::string::npos) << o.message;
    EXPECT_TRUE(o.offset.has_value()) << o.message;
    // Permissive: the same file is inert data; the name is reported, nothing is allowed.
    Outcome q = Permissive(p);
    ASSERT_TRUE(q.ok) << q.message;
    const Value* x = q.value->Find("x");
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(x->kind, ValueKind::kObject);
    EXPECT_EQ(x->type_name, f[0]);
    bool reported = false;
    for (const auto& g : q.globals) {
      if (g.module + "." + g.name == f[0]) reported = !g.allowed;
    }
    EXPECT_TRUE(reported);
    ++n;
  }
  EXPECT_EQ(n, 42);
}

TEST_F(Hostile, MemoConfusionResolvesTheActualStackGlobalOperands) {
  // memo[0] = 'torch', then PUT 0 is overwritten with 'os'; 'system' goes through MEMOIZE
  // (index len(memo) == 1). A scanner that ignored PUT would see 'torch.system'.
  std::string p = "\x80\x04\x8c\x05torch\x94" "0\x8c\x02os" "q\x00" "0\x8c\x06system\x94" "0h\x00h\x01\x93."s;
  Outcome o = Strict(p);
  EXPECT_EQ(o.code, ErrorCode::kRefused);
  EXPECT_EQ(o.message, "@ " + std::to_string(p.size() - 2) + ": refused global 'os.system'");
  EXPECT_EQ(o.refused_global, "os.system");
  EXPECT_EQ(o.offset, p.size() - 2);
}

TEST_F(Hostile, StackGlobalNeedsStrings) {
  ExpectError("\x80\x04K\x01K\x02\x93."s, ErrorCode::kCorrupt, 6, "STACK_GLOBAL needs two str operands, got int and int");
}

TEST_F(Hostile, BuildOnAllowedGlobalsIsRefused) {
  // The modelscan#85 trick: BUILD sets attributes on an allowed callable.
  std::string p = "ccollections\nOrderedDict\n}S'__call__'\ncos\nsystem\nsb.";
  Outcome o = Permissive(p);  // even the permissive resolver refuses
  EXPECT_EQ(o.code, ErrorCode::kRefused);
  EXPECT_EQ(o.message, "@ " + std::to_string(p.size() - 2) + ": refused BUILD on global 'collections.OrderedDict'");
  EXPECT_EQ(o.offset, p.size() - 2);
  EXPECT_EQ(o.refused_global, "");  // a BUILD refusal, not a refused name
  o = Strict("ccollections\nOrderedDict\n}S'x'\nI1\nsb.");
  EXPECT_EQ(o.code, ErrorCode::kRefused);
  EXPECT_NE(o.message.find("refused BUILD on global 'collections.OrderedDict'"), std::string::npos);
  // BUILD with a non-dict state on data.
  ExpectError("]K\x01" "b."s, ErrorCode::kRefused, 3, "refused BUILD on list with a int state");
}

TEST_F(Hostile, NestedPickleStaysBytes) {
  std::string inner = "cos\nsystem\n(S'ls'\ntR.";
  std::string p = "\x80\x03" "C"s + char(inner.size()) + inner + "\x85.";
  Outcome o = Strict(p);
  ASSERT_TRUE(o.ok) << o.message;
  ASSERT_EQ(o.value->kind, ValueKind::kTuple);
  EXPECT_EQ(o.value->items[0]->kind, ValueKind::kBytes);
  EXPECT_EQ(o.value->items[0]->text, inner);
  EXPECT_TRUE(o.globals.empty());
}

TEST_F(Hostile, ExtensionRegistryAndOutOfBandBuffersAreRefused) {
  ExpectError("\x80\x02\x82\x05."s, ErrorCode::kRefused,
              2, "refused EXT1 5: a name from copyreg's extension registry (not in the file)");
  ExpectError("\x80\x02\x84\x01\x02\x03\x04."s, ErrorCode::kRefused,
              2, "refused EXT4 67305985: a name from copyreg's extension registry (not in the file)");
  ExpectError("\x80\x05\x97."s, ErrorCode::kRefused, 2, "NEXT_BUFFER: no out-of-band buffers are supplied");
}

TEST_F(Hostile, PersistentIdsAreRefusedInPlainPickles) {
  ExpectError("N" "Q."s, ErrorCode::kRefused, 1, "refused persistent id (a None): plain pickles have none");
  ExpectError("Pstorage0\n."s, ErrorCode::kRefused, 0, "refused persistent id (a str): plain pickles have none");
}

TEST_F(Hostile, KnownNamesWithArgumentsThatAreNotDataAreRefused) {
  // bytearray(10**9) would allocate on the file's say-so.
  ExpectError("c__builtin__\nbytearray\nJ\x00\xca\x9a;\x85R."s, ErrorCode::kRefused,
              29, "refused call of 'builtins.bytearray' with arguments (int)");
  ExpectError("\x80\x02" "c_codecs\nencode\nX\x02\x00\x00\x00\xc4\x81X\x06\x00\x00\x00latin1\x86R."s, ErrorCode::kRefused,
              37, "refused call of '_codecs.encode' with arguments (str, str)");
  ExpectError("\x80\x02" "c_codecs\nencode\nX\x01\x00\x00\x00" "aX\x05\x00\x00\x00rot13\x86R."s, ErrorCode::kRefused,
              35, "refused call of '_codecs.encode' with arguments (str, str)");
  ExpectError("K\x01K\x02\x85R."s, ErrorCode::kRefused, 5, "refused call of a int (only a global can be called)");
  ExpectError("c__builtin__\nset\nK\x01R."s, ErrorCode::kCorrupt, 19, "REDUCE arguments must be a tuple, not int");
}

// ---- container type confusion (CVE-2026-24747's class) ----

TEST_F(Hostile, ContainerOpcodesCheckTheirTarget) {
  ExpectError("](K\x01K\x02u."s, ErrorCode::kRefused, 6, "SETITEMS onto a list: the index is not an int within the list");
  ExpectError("]K\x01K\x02s."s, ErrorCode::kRefused, 5, "SETITEM onto a list: the index is not an int within the list");
  ExpectError("}K\x01" "a."s, ErrorCode::kRefused, 3, "APPEND onto a dict: it has no append/extend for data");
  ExpectError("}(K\x01" "e."s, ErrorCode::kRefused, 4, "APPENDS onto a dict: it has no append/extend for data");
  ExpectError("](K\x01\x90."s, ErrorCode::kRefused, 4, "ADDITEMS onto a list: it has no add for data");
  ExpectError(")K\x01K\x02s."s, ErrorCode::kRefused, 5, "SETITEM onto a tuple: it has no __setitem__ for data");
  ExpectError("\x8f(K\x01" "e."s, ErrorCode::kRefused, 4, "APPENDS onto a set: it has no append/extend for data");
  ExpectError("X\x01\x00\x00\x00" "aK\x01K\x02s."s, ErrorCode::kRefused, 10, "SETITEM onto a str: it has no __setitem__ for data");
  ExpectError("\x80\x04\x8f(K\x01\x91(K\x02\x90."s, ErrorCode::kRefused,
              10, "ADDITEMS onto a frozenset: it has no add for data");
}

TEST_F(Hostile, ObjectTargetsAreFilledOnlyWhenPermissive) {
  // An object made with arguments keeps what SETITEMS and APPENDS give it.
  std::string p = "cfoo\nBar\n(K\x07tR(K\x01K\x02u(K\x03" "e."s;
  Outcome o = Strict(p);
  EXPECT_EQ(o.message, "@ 0: refused global 'foo.Bar'");
  EXPECT_EQ(o.refused_global, "foo.Bar");
  o = Permissive(p);
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(o.value->kind, ValueKind::kObject);
  EXPECT_TRUE(o.value->unknown_class);
  ASSERT_EQ(o.value->entries.size(), 1u);
  EXPECT_EQ(o.value->entries[0].second->integer, 2);
  ASSERT_EQ(o.value->items.size(), 1u);
  // One made without arguments and filled by SETITEMS at once is a dict subclass: a dict
  // keeping its class name (the default policy reads it so too).
  for (PicklePolicy policy : {PicklePolicy::kDefault, PicklePolicy::kPermissive}) {
    DataResolver r(policy);
    o = Run("cfoo\nBar\n)R(K\x01K\x02u."s, r);
    ASSERT_TRUE(o.ok) << o.message;
    EXPECT_EQ(o.value->kind, ValueKind::kDict);
    EXPECT_EQ(o.value->type_name, "foo.Bar");
    EXPECT_FALSE(o.value->unknown_class);
    ASSERT_EQ(o.value->entries.size(), 1u);
  }
  // A strict resolver that itself makes objects (as a format resolver may) does not let the
  // file fill them.
  struct ObjectMaker : DataResolver {
    Value* Global(const std::string& m, const std::string& n, bool& allowed, ValueArena& a) override {
      if (m == "foo") return a.Global(m + "." + n);
      return DataResolver::Global(m, n, allowed, a);
    }
    Value* Call(Value* c, Value* args, ValueArena& a) override {
      if (c->type_name == "foo.Bar") return a.Object(c->type_name, args);
      return DataResolver::Call(c, args, a);
    }
  } maker;
  o = Run(p, maker);
  EXPECT_EQ(o.code, ErrorCode::kRefused);
  EXPECT_EQ(o.message, "@ 19: SETITEMS onto a object 'foo.Bar': it has no __setitem__ for data");
}

// ---- structure ----

TEST_F(Hostile, StructuralErrorsAreCorrupt) {
  ExpectError("", ErrorCode::kCorrupt, 0, "empty pickle");
  ExpectError("K\x01", ErrorCode::kCorrupt, 2, "pickle ends without STOP");
  ExpectError(".", ErrorCode::kCorrupt, 0, "STOP with an empty stack");
  ExpectError("(K\x01.", ErrorCode::kCorrupt, 3, "STOP with 1 open MARKs");
  ExpectError("a.", ErrorCode::kCorrupt, 0, "stack underflow in APPEND");
  ExpectError("K\x01(R.", ErrorCode::kCorrupt, 3, "stack underflow in REDUCE");  // the mark fences the stack
  ExpectError("K\x01t.", ErrorCode::kCorrupt, 2, "TUPLE without a MARK");
  ExpectError("0.", ErrorCode::kCorrupt, 0, "stack underflow in POP");
  ExpectError("\x85.", ErrorCode::kCorrupt, 0, "stack underflow in TUPLE1");
  ExpectError("(K\x01K\x02K\x03" "d.", ErrorCode::kCorrupt, 7, "DICT with an odd number of items");
  ExpectError("h\x05.", ErrorCode::kCorrupt, 0, "BINGET of memo index 5, which is not set");
  ExpectError("j\x00\x00\x00\x01."s, ErrorCode::kCorrupt, 0, "LONG_BINGET of memo index 16777216, which is not set");
  ExpectError("g-1\n.", ErrorCode::kCorrupt, 0, "GET of a negative memo index");
  ExpectError("q\x00."s, ErrorCode::kCorrupt, 0, "stack underflow in BINPUT");
  ExpectError("\xff", ErrorCode::kCorrupt, 0, "unknown opcode 0xff");
  ExpectError("N\x99.", ErrorCode::kCorrupt, 1, "unknown opcode 0x99");
  ExpectError("\x80\x06N.", ErrorCode::kUnsupported, 0, "unsupported pickle protocol 6");
  ExpectError("o.", ErrorCode::kCorrupt, 0, "OBJ without a MARK");
  ExpectError("(o.", ErrorCode::kCorrupt, 1, "OBJ without a class");
  ExpectError("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N."s, ErrorCode::kCorrupt, 2, "FRAME of 255 bytes, but 2 remain");
  ExpectError("S'abc\n.", ErrorCode::kCorrupt, 0, "STRING argument must be quoted");
  ExpectError("S'\\x4'\n.", ErrorCode::kCorrupt, 0, "STRING has an invalid \\x escape");
  ExpectError("Vab\\u12\n.", ErrorCode::kCorrupt, 0, "UNICODE has a truncated \\u escape");
  ExpectError("V\\U00110000\n.", ErrorCode::kCorrupt, 0, "UNICODE escape \\U out of range");
  ExpectError("I12a\n.", ErrorCode::kCorrupt, 0, "INT has a bad literal '12a'");
  ExpectError("L\n.", ErrorCode::kCorrupt, 0, "LONG has an empty line");
  ExpectError("F1e999\n.", ErrorCode::kCorrupt, 0, "FLOAT literal '1e999' is out of range");
  ExpectError("Fabc\n.", ErrorCode::kCorrupt, 0, "FLOAT has a bad literal 'abc'");
  ExpectError("cos\nsystem", ErrorCode::kCorrupt, 0, "unterminated line at offset 4");
  ExpectError("\x80\x04))\x8c\x00\x92."s, ErrorCode::kCorrupt, 6, "NEWOBJ_EX keyword arguments must be a dict, not str");
  Outcome o = Strict("\x80\x04" "ccollections\nOrderedDict\n)}K\x01K\x02s\x92."s);
  EXPECT_EQ(o.code, ErrorCode::kUnsupported);
  EXPECT_EQ(o.message, "@ 34: NEWOBJ_EX with keyword arguments (calling global 'collections.OrderedDict')");
}

TEST_F(Hostile, InvalidUtf8IsCorrupt) {
  ExpectError("X\x02\x00\x00\x00\xc3\x28."s, ErrorCode::kCorrupt, 0, "BINUNICODE is not valid UTF-8 (byte 0 of 2)");
  ExpectError("\x8c\x02\xc0\x80."s, ErrorCode::kCorrupt, 0, "SHORT_BINUNICODE is not valid UTF-8 (byte 0 of 2)");
  ExpectError("\x8c\x04\xf4\x90\x80\x80."s, ErrorCode::kCorrupt, 0, "SHORT_BINUNICODE is not valid UTF-8 (byte 0 of 4)");
  ExpectError("\x8c\x03" "ab\xff."s, ErrorCode::kCorrupt, 0, "SHORT_BINUNICODE is not valid UTF-8 (byte 2 of 3)");
  ExpectError("\x8c\x02\xe0\x80."s, ErrorCode::kCorrupt, 0, "SHORT_BINUNICODE is not valid UTF-8 (byte 0 of 2)");
  ExpectError("cos\xff\nsystem\n."s, ErrorCode::kCorrupt, 0, "GLOBAL module is not valid UTF-8");
  ExpectError("P\xc3\xa9\n."s, ErrorCode::kCorrupt, 0, "PERSID is not ASCII");
  // Surrogates written by surrogatepass are accepted.
  Outcome o = Strict("\x8c\x03\xed\xb0\x80."s);
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(o.value->text, "\xed\xb0\x80");
  // Python 2 STRING bytes that are not UTF-8 stay bytes.
  o = Strict("U\x02\xff\xfe."s);
  ASSERT_TRUE(o.ok);
  EXPECT_EQ(o.value->kind, ValueKind::kBytes);
}

// ---- resources ----

TEST_F(Hostile, LengthsBeyondTheDataAreCorruptBeforeAnyAllocation) {
  ExpectError("X\xff\xff\xff\xff" "abc"s, ErrorCode::kCorrupt, 0, "truncated at offset 5: need 4294967295 bytes, 3 remain");
  ExpectError("\x8d\xff\xff\xff\xff\xff\xff\xff\xff" "abc"s, ErrorCode::kCorrupt,
              0, "truncated at offset 9: need 18446744073709551615 bytes, 3 remain");
  ExpectError("\x8e\x00\x00\x00\x00\x00\x00\x00\x80" "abc"s, ErrorCode::kCorrupt,
              0, "truncated at offset 9: need 9223372036854775808 bytes, 3 remain");
  ExpectError("\x96\x00\x00\x00\x00\x01\x00\x00\x00"s, ErrorCode::kCorrupt,
              0, "truncated at offset 9: need 4294967296 bytes, 0 remain");
  ExpectError("T\xff\xff\xff\x7f" "a"s, ErrorCode::kCorrupt, 0, "truncated at offset 5: need 2147483647 bytes, 1 remain");
  ExpectError("T\xff\xff\xff\xff" "a"s, ErrorCode::kCorrupt, 0, "BINSTRING has a negative byte count");
  ExpectError("B\x00\x00\x00\x80"s, ErrorCode::kCorrupt, 0, "truncated at offset 5: need 2147483648 bytes, 0 remain");
}

TEST_F(Hostile, HugeIntegersHitTheirCaps) {
  ExpectError("\x8b\x00\x00\x00\x80"s, ErrorCode::kCorrupt, 0, "LONG4 has a negative byte count");  // 2^31
  ExpectError("\x8b\xff\xff\xff\x7f"s, ErrorCode::kLimit,
              0, "LONG4 of 2147483647 bytes, more than 65536 (kMaxPickleIntBytes)");
  ExpectError("I" + std::string(5000, '9') + "\n.", ErrorCode::kLimit,
              0, "INT has 5000 digits, more than 4300 (kMaxPickleIntDigits)");
  // Within the caps, big ints load exactly.
  std::string digits = "-" + std::string(4300, '7');
  Outcome o = Strict("L" + digits + "L\n.");
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(o.value->IntToString(), digits);
  std::string long4 = "\x8b\x00\x00\x01\x00"s + std::string(65536, '\xff') + ".";
  o = Strict(long4);
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(o.value->integer, -1);
}

TEST_F(Hostile, MemoIndicesAreHashedNotAllocated) {
  Outcome o = Strict("Nr\xff\xff\xff\xff" "0j\xff\xff\xff\xff" "p9223372036854775807\n0g9223372036854775807\n."s);
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(o.value->kind, ValueKind::kNone);
  ExpectError("Ng9223372036854775808\n.", ErrorCode::kCorrupt, 1, "GET memo index '9223372036854775808' is too large");
}

TEST_F(Hostile, MemoEntriesAreCapped) {
  std::string p = "N";
  for (uint32_t i = 0; i <= kMaxPickleMemoEntries; ++i) {
    p += 'r';
    for (int s = 0; s < 32; s += 8) p += static_cast<char>(i >> s);
  }
  p += ".";
  Outcome o = Strict(p);
  EXPECT_EQ(o.code, ErrorCode::kLimit);
  EXPECT_EQ(o.message, "@ " + std::to_string(1 + 5 * kMaxPickleMemoEntries) +
                           ": more than 4194304 memo entries (kMaxPickleMemoEntries)");
}

TEST_F(Hostile, ValuesStackAndReferencesAreCapped) {
  std::string many = "]";
  for (uint64_t i = 0; i <= kMaxPickleValues; ++i) many += "Na";
  many += ".";
  Outcome o = Strict(many);
  EXPECT_EQ(o.code, ErrorCode::kLimit);
  EXPECT_NE(o.message.find("(kMaxPickleValues)"), std::string::npos) << o.message;

  std::string dups = "N" + std::string(kMaxPickleStackDepth, '2') + ".";
  o = Strict(dups);
  EXPECT_EQ(o.code, ErrorCode::kLimit);
  EXPECT_EQ(o.message, "@ " + std::to_string(kMaxPickleStackDepth) + ": more than " +
                           std::to_string(kMaxPickleStackDepth) + " stack entries and marks (kMaxPickleStackDepth)");

  // A 10,000-item list copied by list(x) thousands of times: a few bytes each, 80 KB of
  // pointers each; the slot budget stops it.
  std::string copies = "]q\x00("s + std::string(10000, 'N') + "e" + "c__builtin__\nlist\nq\x01" "0";
  for (int i = 0; i < 4000; ++i) copies += "h\x01h\x00\x85R0"s;
  copies += "N.";
  o = Strict(copies);
  EXPECT_EQ(o.code, ErrorCode::kLimit);
  EXPECT_NE(o.message.find("container slots (kMaxPickleReferences)"), std::string::npos) << o.message;
}

// Depth of the first-item chain, iteratively.
size_t ChainDepth(const Value* v) {
  size_t depth = 0;
  while (v != nullptr && !v->items.empty()) {
    v = v->items[0];
    ++depth;
  }
  return depth;
}

TEST_F(Hostile, MillionDeepNestingLoadsWithoutRecursion) {
  constexpr size_t kDepth = 1'000'000;
  Outcome o = Strict(std::string(kDepth, ']') + std::string(kDepth - 1, 'a') + ".");
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(ChainDepth(o.value), kDepth - 1);

  std::string marks = "]";
  for (size_t i = 0; i < kDepth; ++i) marks += "(]";
  marks += std::string(kDepth, 'e') + ".";
  o = Strict(marks);
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(ChainDepth(o.value), kDepth);

  o = Strict("N" + std::string(kDepth, '\x85') + ".");  // TUPLE1 around TUPLE1 ...
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(ChainDepth(o.value), kDepth);

  o = Strict(std::string(kDepth, '(') + "N.");
  EXPECT_EQ(o.code, ErrorCode::kCorrupt);
  EXPECT_EQ(o.message, "@ 1000001: STOP with 1000000 open MARKs");
  o = Strict(std::string(kDepth, '(') + std::string(kDepth, '1') + "N.");  // POP_MARK them all
  EXPECT_TRUE(o.ok) << o.message;
}

TEST_F(Hostile, MemoDagBillionLaughsLoadsAsADag) {
  // level 0 = []; level k = [level k-1] * 1000 via BINGET; 30 levels = 1000^30 leaves as a tree.
  std::string p = "\x80\x02]q\x00"s;
  for (int level = 1; level <= 30; ++level) {
    p += "](";
    for (int i = 0; i < 1000; ++i) p += "h" + std::string(1, char(level - 1));
    p += "eq" + std::string(1, char(level));
  }
  p += ".";
  Outcome o = Strict(p);
  ASSERT_TRUE(o.ok) << o.message;
  const Value* v = o.value;
  for (int level = 30; level > 0; --level) {
    ASSERT_EQ(v->items.size(), 1000u);
    EXPECT_EQ(v->items.front(), v->items.back());  // shared, not copied
    v = v->items.front();
  }
  EXPECT_TRUE(v->items.empty());
  EXPECT_LT(arena_.size(), 100u);
}

TEST_F(Hostile, RecursiveStructuresAreCycles) {
  Outcome o = Strict("]q\x00h\x00" "a."s);
  ASSERT_TRUE(o.ok);
  EXPECT_EQ(o.value->items[0], o.value);
  o = Strict("}q\x00K\x01h\x00s."s);
  ASSERT_TRUE(o.ok);
  EXPECT_EQ(o.value->entries[0].second, o.value);
}

TEST_F(Hostile, EveryTruncationOfValidPicklesIsCorrupt) {
  if (!testing::HavePython()) GTEST_SKIP() << "no /usr/bin/python3";
  std::string out = testing::RunPython(R"PY(
import pickle, collections
sd = collections.OrderedDict([('w', [1.5, -2, 2**70]), ('b', (b'\x00x', 'h\u00e9', None, True))])
sd._metadata = {'': {'version': 1}}
obj = {'sd': sd, 's': {1, 2}, 'f': frozenset({3}), 'c': 1+2j, 'ba': bytearray(b'z'), 'big': list(range(300))}
for proto in range(6):
    print(pickle.dumps(obj, protocol=proto).hex())
)PY");
  std::stringstream ss(out);
  std::string line;
  int pickles = 0;
  while (std::getline(ss, line)) {
    auto bytes = testing::FromHex(line);
    std::string full(bytes.begin(), bytes.end());
    ASSERT_TRUE(Strict(full).ok) << Strict(full).message;
    for (size_t cut = 0; cut < full.size(); ++cut) {
      Outcome o = Strict(full.substr(0, cut));
      ASSERT_FALSE(o.ok) << "cut " << cut;
      EXPECT_EQ(o.code, ErrorCode::kCorrupt) << "cut " << cut << ": " << o.message;
      EXPECT_TRUE(o.offset.has_value()) << o.message;
    }
    ++pickles;
  }
  EXPECT_EQ(pickles, 6);
}

TEST_F(Hostile, RandomBytesAndMutationsNeverCrash) {
  std::mt19937_64 rng(12345);
  const std::string seed =
      "\x80\x02" "ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00" "aq\x02]q\x03(K\x01G?\xf8\x00\x00\x00\x00\x00\x00"
      "\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01" "eX\x01\x00\x00\x00" "bh\x03u}q\x04h\x02h\x00)Rsb."s;
  ASSERT_TRUE(Strict(seed).ok) << Strict(seed).message;
  const std::string alphabet = "(.0125FIJKLMNPQRSTUVXabcdeghijlopqrstu}])G\x80\x81\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96\x97\x98\n"s;
  for (int round = 0; round < 20000; ++round) {
    std::string p;
    if (round % 2 == 0) {
      size_t n = rng() % 64;
      for (size_t i = 0; i < n; ++i) p += (rng() % 3 == 0) ? char(rng()) : alphabet[rng() % alphabet.size()];
    } else {
      p = seed;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        size_t at = rng() % p.size();
        switch (rng() % 3) {
          case 0: p[at] = char(rng()); break;
          case 1: p.erase(at, 1 + rng() % 3); break;
          default: p.insert(at, 1, alphabet[rng() % alphabet.size()]);
        }
        if (p.empty()) p = "N";
      }
    }
    for (bool permissive : {false, true}) {
      DataResolver r(permissive ? PicklePolicy::kPermissive : PicklePolicy::kStrict);
      ValueArena arena;
      Unpickler u(reinterpret_cast<const uint8_t*>(p.data()), p.size(), arena, r);
      try {
        u.Load();
      } catch (const Error& e) {
        ASSERT_TRUE(e.offset().has_value()) << e.message();
        ASSERT_EQ(e.message().rfind("@ " + std::to_string(*e.offset()) + ": ", 0), 0u) << e.message();
      }
    }
  }
}

TEST_F(Hostile, ErrorsCarryTheBaseOffsetAndJoinWithContext) {
  Outcome o = Strict("\x80\x02" "cposix\nsystem\n."s, 55);
  ASSERT_EQ(o.code, ErrorCode::kRefused);
  ASSERT_TRUE(o.error.has_value());
  Error e = *o.error;
  EXPECT_EQ(e.offset(), 57u);
  e.SetEntry("archive/data.pkl").SetFile("model.pt");
  EXPECT_EQ(e.message(), "model.pt: archive/data.pkl @ 57: refused global 'posix.system'");
  EXPECT_EQ(e.entry(), "archive/data.pkl");
  EXPECT_EQ(e.file(), "model.pt");
  ASSERT_EQ(o.globals.size(), 1u);
  EXPECT_EQ(o.globals[0].offset, 57u);
}

// A format resolver in the shape the torch reader uses: extends DataResolver with its own names
// and persistent ids, and falls back to the base for everything else.
TEST_F(Hostile, DerivedResolversExtendTheDataNames) {
  struct StorageResolver : DataResolver {
    Value* Global(const std::string& m, const std::string& n, bool& allowed, ValueArena& a) override {
      if (m == "torch" && n == "FloatStorage") return a.Global("torch.FloatStorage");
      return DataResolver::Global(m, n, allowed, a);
    }
    Value* PersistentLoad(Value* pid, ValueArena& a) override {
      if (pid->kind == ValueKind::kTuple && pid->items.size() == 5) return a.Str("storage:" + pid->items[2]->text);
      return DataResolver::PersistentLoad(pid, a);
    }
  } r;
  std::string p = "\x80\x02}(X\x01\x00\x00\x00" "a(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"
                  "0X\x03\x00\x00\x00" "cpuK\x04tQX\x01\x00\x00\x00" "bccollections\nOrderedDict\n)Ru."s;
  Outcome o = Run(p, r);
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(o.value->Find("a")->text, "storage:0");
  EXPECT_EQ(o.value->Find("b")->type_name, "collections.OrderedDict");
  ASSERT_EQ(o.globals.size(), 2u);
  EXPECT_TRUE(o.globals[0].allowed);
  p = "\x80\x02" "ctorch\nload\n."s;
  o = Run(p, r);
  EXPECT_EQ(o.message, "@ 2: refused global 'torch.load'");
}

TEST_F(Hostile, ScanFindingsCarryTheErrorsOffset) {
  CheckReport report;
  DataResolver r(PicklePolicy::kPermissive);
  const std::string p = "K\x01t.";  // TUPLE without a MARK, @ 2
  ScanPickle(report, "data.pkl", reinterpret_cast<const uint8_t*>(p.data()), p.size(), r);
  int found = 0;
  for (const auto& f : report.findings) {
    if (f.message.find("pickle not fully readable") == std::string::npos) continue;
    ++found;
    EXPECT_EQ(f.entry, "data.pkl");
    EXPECT_EQ(f.offset, 2u);
    EXPECT_EQ(f.message, "pickle not fully readable: TUPLE without a MARK");
  }
  EXPECT_EQ(found, 1);
}

}  // namespace
}  // namespace trove
