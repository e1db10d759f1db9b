// The data-only unpickler against CPython: Python writes pickles of rich data in protocols 0-5
// (and loads hand-written protocol 0/1 pickles of the Python 2 era); trove must load each to the
// same canonical form Python computes for the object it loads itself.
#include <gtest/gtest.h>

#include <sstream>

#include "canonical_form.h"
#include "python_peer.h"
#include "trove/error.h"
#include "trove/unpickler.h"

namespace trove {
namespace {

using testing::CanonicalForm;
using namespace std::string_literals;

constexpr const char* kCasesScript = R"PY(
import pickle, collections
def cases():
    c = {}
    c['scalars'] = [None, True, False, 0, 1, -1, 127, 128, 255, 256, 65535, 65536, -2**31, 2**31 - 1, 2**31,
                    -2**31 - 1, 2**63 - 1, -2**63, 2**64, -2**64 - 1, 2**200, -(2**200), 2**1000 + 7,
                    1.5, -0.0, 0.0, 1e100, 1e-5, float('inf'), float('-inf'), float('nan'), 1e308, 5e-324]
    c['strings'] = ['', 'a', 'h\u00e9llo', '\U0001F600 non-BMP \U00010348', 'new\nline', 'back\\slash',
                    'quote\'"', '\x00\x1a\r\t', 'x' * 300, '\u00ff\u0100', '\\u0041 not an escape']
    c['bytes'] = [b'', b'\x00\x01\xff', bytes(range(256)), bytearray(b'abc'), bytearray(), b'\\u0041']
    c['complex'] = [1 + 2j, complex(-0.0, float('inf')), 0j, complex(1e300, -1e-300)]
    c['nested'] = {'a': {'b': [1, (2, 3), {'c': None}]}, 'tup': (1, (2, (3, ()))), 'empty': [[], {}, (), set()]}
    c['sets'] = [set(), {1, 2, 3}, frozenset(), frozenset({'a', 'b'}), {(1, 2), frozenset({3}), 'x', None}]
    c['ordered'] = collections.OrderedDict([('z', 1), ('a', 2), ('m', [3])])
    sd = collections.OrderedDict([('w', 1.0), ('b', 2)])
    sd._metadata = collections.OrderedDict([('', {'version': 1}), ('lin', {'version': 1})])
    c['state_dict_like'] = sd
    c['counter'] = collections.Counter('abracadabra')
    shared = [1, 2]
    c['shared'] = [shared, shared, {'k': shared}, (shared,)]
    rec = [1]
    rec.append(rec)
    c['recursive_list'] = rec
    rd = {}
    rd['self'] = rd
    rd['list'] = [rd]
    c['recursive_dict'] = rd
    ss = {1, 2}
    c['shared_set_bytearray'] = [ss, ss, bytearray(b'q'), frozenset({4})]
    ba = bytearray(b'shared')
    c['shared_bytearray'] = [ba, ba]
    c['big_list'] = list(range(2500))
    c['big_dict'] = {'k%d' % i: i for i in range(2500)}
    c['big_set'] = set(range(1500))
    c['big_tuple'] = tuple(range(1200))
    c['memo_many'] = ['s%d' % i for i in range(700)] + [('t', i) for i in range(300)]
    c['dict_keys'] = {1: 'int', 'a': 'str', (1, 2): 'tuple', None: 'none', 2.5: 'float', b'b': 'bytes',
                      -3: 'neg', 2**70: 'big', frozenset({1}): 'fs'}
    c['deepish'] = [[[[[[[[[[['deep']]]]]]]]]]]
    return c
for name, obj in cases().items():
    for proto in range(6):
        blob = pickle.dumps(obj, protocol=proto)
        print(name, proto, blob.hex(), canon(pickle.loads(blob)), sep='\t')
)PY";

// Hand-written pickles of the Python 2 / protocol 0-1 era and rarer opcodes, loaded by Python
// with encoding='utf-8' (what torch uses) to get the expected form.
constexpr const char* kHandScript = R"PY(
import pickle, warnings
warnings.simplefilter('ignore')  # S'\q' is deprecated, still valid
cases = {
  'int_bools': b"(I01\nI00\nI42\nI-7\nI12345678901234567890\nl.",
  'long_text': b"(L5L\nL-123456789012345678901234567890L\nL0\nl.",
  'float_text': b"(F1.5\nF-0.0\nFinf\nF-inf\nFnan\nF1e+100\nF1e-400\nF-1e-400\nl.",
  'string_escapes': b"(S'abc'\nS\"it's\"\nS'\\x41\\101\\n\\t\\\\\\''\nS'\\q'\nU\x03xyzT\x02\x00\x00\x00hil.",
  'unicode_raw': b"(Va\\u00e9\\U0001f600\xe9\nV\\\\u0041\nl.",
  'text_memo': b"(lp0\nI1\nag0\nap7\ng7\na.",
  'dict_tuple_mark': b"(S'a'\nI1\nS'b'\n(I2\nI3\ntd.",
  'pop_dup': b"(I1\nI2\n0I3\n2I4\n(I5\n1l.",
  'pop_takes_mark': b"](0I1\na.",
  'py2_set': b"c__builtin__\nset\n((lI1\naI2\natR.",
  'py2_reconstructor_list': b"ccopy_reg\n_reconstructor\n(c__builtin__\nlist\nc__builtin__\nlist\n(lI1\natR.",
  'py2_reconstructor_dict': b"ccopy_reg\n_reconstructor\n(c__builtin__\ndict\nc__builtin__\ndict\n(dS'k'\nI1\nstR.",
  'py2_unicode_name': b"c__builtin__\nunicode\n(Vabc\ntR.",
  'ordered_dict_newobj': b"\x80\x02ccollections\nOrderedDict\n)\x81(K\x01K\x02u.",
  'stack_global_memo': b"\x80\x04\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94h\x00h\x01\x93)R}\x94b.",
  'memoize_confusion': b"\x80\x04K\x01p1\nK\x02\x94(h\x01l.",
  'frame': b"\x80\x04\x95\x08\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K\x02e.",
  'readonly_buffer': b"\x80\x05\x96\x02\x00\x00\x00\x00\x00\x00\x00ab\x98.",
  'binbytes8': b"\x80\x04\x8e\x01\x00\x00\x00\x00\x00\x00\x00z.",
  'binunicode8': b"\x80\x04\x8d\x02\x00\x00\x00\x00\x00\x00\x00\xc3\xa9.",
  'additems_frozenset': b"\x80\x04\x8f(K\x01K\x02K\x01\x90(K\x03K\x03\x91\x86.",
  'long4_zero': b"\x80\x02\x8b\x00\x00\x00\x00\x8a\x00\x86.",
  'obj_and_inst': b"(c__builtin__\nset\n]o(i__builtin__\nlist\n\x86.",
  'surrogate_utf8': b"X\x03\x00\x00\x00\xed\xa0\x80.",
  'dup_key_dict': b"}(K\x01K\x0aG?\xf0\x00\x00\x00\x00\x00\x00K\x0b\x88K\x0cK\x02K\x0du.",
  'dup_set': b"\x80\x04\x8f(K\x01\x88G?\xf0\x00\x00\x00\x00\x00\x00\x90.",
  'bytes_proto2': b"\x80\x02c_codecs\nencode\nX\x04\x00\x00\x00\xc3\xbf\x00aX\x06\x00\x00\x00latin1\x86R.",
  'empty_bytes_proto2': b"\x80\x02c__builtin__\nbytes\n)R.",
  'bytearray_proto2': b"\x80\x02c__builtin__\nbytearray\nc_codecs\nencode\nX\x02\x00\x00\x00abX\x06\x00\x00\x00latin1\x86R\x85R.",
  'complex_proto2': b"\x80\x02c__builtin__\ncomplex\nG?\xf0\x00\x00\x00\x00\x00\x00K\x02\x86R.",
  'counter_dict': b"\x80\x02ccollections\nCounter\n}X\x01\x00\x00\x00aK\x02s\x85R.",
}
for name, blob in cases.items():
    print(name, 0, blob.hex(), canon(pickle.loads(blob, encoding='utf-8')), sep='\t')
)PY";

struct Case {
  std::string name;
  int protocol;
  std::vector<uint8_t> bytes;
  std::string canonical;
};

std::vector<Case> Generate(const char* script) {
  std::vector<Case> cases;
  std::stringstream out(testing::RunPython(std::string(testing::kPythonCanonical) + script));
  std::string line;
  while (std::getline(out, line)) {
    auto f = testing::SplitFields(line);
    if (f.size() != 4) {
      ADD_FAILURE() << "bad line from python: " << line.substr(0, 200);
      continue;
    }
    cases.push_back({f[0], std::stoi(f[1]), testing::FromHex(f[2]), f[3]});
  }
  return cases;
}

std::string LoadCanonical(const std::vector<uint8_t>& bytes, uint64_t* consumed = nullptr) {
  ValueArena arena;
  DataResolver resolver;
  Unpickler u(bytes.data(), bytes.size(), arena, resolver);
  Value* v = u.Load();
  if (consumed) *consumed = u.consumed();
  return CanonicalForm().Of(v);
}

TEST(UnpicklerPython, RichDataInEveryProtocolMatchesCPython) {
  if (!testing::HavePython()) GTEST_SKIP() << "no /usr/bin/python3";
  auto cases = Generate(kCasesScript);
  ASSERT_GE(cases.size(), 6u * 20);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name + " protocol " + std::to_string(c.protocol));
    try {
      uint64_t consumed = 0;
      EXPECT_EQ(LoadCanonical(c.bytes, &consumed), c.canonical);
      EXPECT_EQ(consumed, c.bytes.size());
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(UnpicklerPython, HandWrittenOldProtocolPicklesMatchCPython) {
  if (!testing::HavePython()) GTEST_SKIP() << "no /usr/bin/python3";
  auto cases = Generate(kHandScript);
  ASSERT_GE(cases.size(), 25u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    try {
      EXPECT_EQ(LoadCanonical(c.bytes), c.canonical);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(UnpicklerPython, ProtocolAndGlobalsAreReported) {
  // The shape of a torch 1.13 state_dict pickle (an OrderedDict with _metadata), minus tensors.
  const std::string p =
      "\x80\x02" "ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00" "aq\x02K\x01u}q\x03X\x09\x00\x00\x00"
      "_metadataq\x04" "h\x00)Rq\x05X\x00\x00\x00\x00}q\x06X\x07\x00\x00\x00" "versionq\x07K\x01sssb."s;
  ValueArena arena;
  DataResolver resolver;
  Unpickler u(reinterpret_cast<const uint8_t*>(p.data()), p.size(), arena, resolver, 100);
  Value* v = u.Load();
  EXPECT_EQ(u.protocol(), 2);
  EXPECT_EQ(u.consumed(), p.size());
  ASSERT_EQ(u.globals().size(), 1u);
  EXPECT_EQ(u.globals()[0].module, "collections");
  EXPECT_EQ(u.globals()[0].name, "OrderedDict");
  EXPECT_EQ(u.globals()[0].offset, 102u);
  EXPECT_TRUE(u.globals()[0].allowed);
  ASSERT_EQ(v->kind, ValueKind::kDict);
  EXPECT_EQ(v->type_name, "collections.OrderedDict");
  ASSERT_NE(v->state, nullptr);
  const Value* meta = v->state->Find("_metadata");
  ASSERT_NE(meta, nullptr);
  EXPECT_EQ(meta->type_name, "collections.OrderedDict");
  ASSERT_NE(meta->Find(""), nullptr);
  EXPECT_EQ(meta->Find("")->Find("version")->integer, 1);
}

TEST(UnpicklerPython, ConsumedStopsAtTheFirstStop) {
  const std::string p = "K\x05.K\x06."s;
  ValueArena arena;
  DataResolver resolver;
  Unpickler u(reinterpret_cast<const uint8_t*>(p.data()), p.size(), arena, resolver);
  EXPECT_EQ(u.Load()->integer, 5);
  EXPECT_EQ(u.consumed(), 3u);
  Unpickler second(reinterpret_cast<const uint8_t*>(p.data()) + 3, p.size() - 3, arena, resolver, 3);
  EXPECT_EQ(second.Load()->integer, 6);
}

}  // namespace
}  // namespace trove
