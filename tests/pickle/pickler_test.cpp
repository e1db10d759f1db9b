// The protocol-2 pickler against CPython: for data, the bytes trove writes for a tree equal
// `pickle.dumps(obj, protocol=2)` of the Python object the tree was read from, and they load back
// to the same tree. With a hook, it reproduces torch 1.13's data.pkl of an nn.Parameter.
#include <gtest/gtest.h>

#include <sstream>
#include <unordered_map>

#include "canonical_form.h"
#include "python_peer.h"
#include "trove/error.h"
#include "trove/pickler.h"
#include "trove/unpickler.h"

namespace trove {
namespace {

using namespace std::string_literals;
using testing::CanonicalForm;

constexpr const char* kProtocol2Script = R"PY(
import pickle, collections
class Point:
    def __init__(self, x, y): self.x, self.y = x, y
    def __reduce__(self): return (Point, (self.x, self.y))
def cases():
    c = {}
    c['ints'] = [0, 1, 255, 256, 65535, 65536, -1, -128, -129, -256, 2**31 - 1, 2**31, -2**31, -2**31 - 1,
                 2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**64, 2**200, -(2**200), 2**2039, 2**2040, -(2**2040),
                 2**2050]
    c['floats'] = [0.0, -0.0, 1.5, 1e100, 5e-324, float('inf'), float('-inf'), float('nan')]
    c['scalars'] = [None, True, False, 'x', '', 'h\u00e9llo \U0001F600', '\ud800 lone', 'x' * 70000]
    sb = b'shared'
    c['bytes'] = [b'', b'\x00\x01\xff', bytes(range(256)), sb, sb, b'', bytearray(), bytearray(b'ab\x80'), b'z']
    c['complex'] = [1 + 2j, 0j, complex(-0.0, float('inf'))]
    c['tuples'] = [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), ((), ((),)), tuple(range(1500))]
    for n in (0, 1, 2, 999, 1000, 1001, 2000, 2001):
        c['list%d' % n] = list(range(n))
        c['dict%d' % n] = {'k%d' % i: i for i in range(n)}
        c['odict%d' % n] = collections.OrderedDict(('k%d' % i, [i]) for i in range(n))
        c['set%d' % n] = set(range(n))
        c['frozenset%d' % n] = frozenset(range(n))
    c['counter'] = [collections.Counter(), collections.Counter('abracadabra')]
    sd = collections.OrderedDict([('w', 1.0), ('b', 2)])
    sd._metadata = collections.OrderedDict([('', {'version': 1}), ('lin', {'version': 1})])
    c['state_dict_like'] = sd
    shared = [1, 2]
    c['shared'] = [shared, shared, {'k': shared}, (shared,), (shared,)]
    t = (shared,)
    c['shared_tuple'] = [t, t, {'k': t}]
    rec = [1]
    rec.append(rec)
    c['recursive_list'] = rec
    rd = {}
    rd['self'] = rd
    c['recursive_dict'] = rd
    x = []
    t1 = (x,)
    x.append(t1)
    c['recursive_tuple1'] = t1
    y = []
    t4 = (y, 1, 2, 3)
    y.append(t4)
    c['recursive_tuple4'] = t4
    od = collections.OrderedDict()
    od['me'] = od
    c['recursive_odict'] = od
    c['memo_many'] = ['s%d' % i for i in range(700)] + [('t', i) for i in range(300)]
    c['globals'] = [str, int, range, set, collections.OrderedDict, pickle.loads, len]
    c['reduce_objects'] = [Point(1, 2), Point('a', [3]), {'p': Point(None, (1,))}]
    c['nested'] = {'a': {'b': [1, (2, 3), {'c': None}]}, 'e': [[], {}, (), set(), frozenset()]}
    return c
for name, obj in cases().items():
    print(name, pickle.dumps(obj, protocol=2).hex(), sep='\t')
)PY";

using testing::ToHex;

Value* Load(const std::string& bytes, ValueArena& arena) {
  DataResolver resolver(PicklePolicy::kPermissive);
  Unpickler u(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), arena, resolver);
  return u.Load();
}

// The index of the first differing byte, for readable failures.
size_t FirstDifference(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

TEST(Pickler, DataMatchesCPythonProtocol2ByteForByte) {
  if (!testing::HavePython()) GTEST_SKIP() << "no /usr/bin/python3";
  std::stringstream out(testing::RunPython(kProtocol2Script));
  std::string line;
  int cases = 0;
  while (std::getline(out, line)) {
    auto f = testing::SplitFields(line);
    ASSERT_EQ(f.size(), 2u);
    SCOPED_TRACE(f[0]);
    auto raw = testing::FromHex(f[1]);
    std::string expected(raw.begin(), raw.end());
    try {
      ValueArena arena;
      Value* tree = Load(expected, arena);
      std::string ours = PickleValue(tree);
      if (ours != expected) {
        size_t at = FirstDifference(ours, expected);
        ADD_FAILURE() << "differs at byte " << at << " of " << expected.size() << "\n ours:   "
                      << ToHex(ours.substr(at > 16 ? at - 16 : 0, 48)) << "\n python: "
                      << ToHex(expected.substr(at > 16 ? at - 16 : 0, 48));
      }
      // And back: our bytes load to the same tree.
      ValueArena again;
      EXPECT_EQ(CanonicalForm().Of(Load(ours, again)), CanonicalForm().Of(tree));
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
    ++cases;
  }
  EXPECT_GE(cases, 50);
}

// torch.save(nn.Parameter(torch.ones(2, 2))) with torch 1.13.
TEST(Pickler, HooksReproduceTorchParameterPickle) {
  const std::string expected = [] {
    auto b = testing::FromHex(
        "800263746f7263682e5f7574696c730a5f72656275696c645f706172616d657465720a710063746f7263682e5f7574696c730a5f72"
        "656275696c645f74656e736f725f76320a71012828580700000073746f72616765710263746f7263680a466c6f617453746f7261"
        "67650a71035801000000307104580300000063707571054b04747106514b004b024b028671074b024b018671088963636f6c6c65"
        "6374696f6e730a4f726465726564446963740a71092952710a74710b52710c8868092952710d87710e52710f2e");
    return std::string(b.begin(), b.end());
  }();

  // The tree a torch writer would build: a parameter node, a tensor node and a storage node that
  // the hook turns into torch's calls and persistent id. Strings torch shares are shared nodes.
  ValueArena a;
  Value* storage = a.Object("trove.storage", nullptr);
  Value* tensor = a.Object("trove.tensor", nullptr);
  Value* parameter = a.Object("trove.parameter", nullptr);
  auto int_tuple = [&](std::vector<int64_t> v) {
    std::vector<Value*> items;
    for (int64_t i : v) items.push_back(a.Int(i));
    return a.Tuple(items);
  };
  Value* pid = a.Tuple({a.Str("storage"), a.Global("torch.FloatStorage"), a.Str("0"), a.Str("cpu"), a.Int(4)});
  Value* tensor_args = a.Tuple({storage, a.Int(0), int_tuple({2, 2}), int_tuple({2, 1}), a.Bool(false),
                                a.Dict("collections.OrderedDict")});
  Value* parameter_args = a.Tuple({tensor, a.Bool(true), a.Dict("collections.OrderedDict")});

  Pickler pickler([&](const Value& node) -> std::optional<PickleOverride> {
    PickleOverride o;
    if (&node == storage) {
      o.persistent_id = pid;
    } else if (&node == tensor) {
      o.module = "torch._utils";
      o.name = "_rebuild_tensor_v2";
      o.args = tensor_args;
    } else if (&node == parameter) {
      o.module = "torch._utils";
      o.name = "_rebuild_parameter";
      o.args = parameter_args;
    } else {
      return std::nullopt;
    }
    return o;
  });
  std::string ours = pickler.Dump(parameter);
  EXPECT_EQ(ToHex(ours), ToHex(expected));

  // A node the hook replaces by a call is memoized: the same tensor twice is one REDUCE + BINGET.
  Value* both = a.Tuple({tensor, tensor});
  std::string twice = pickler.Dump(both);
  const std::string tail = "Rq\x0bh\x0b\x86q\x0c."s;
  ASSERT_GE(twice.size(), tail.size());
  EXPECT_EQ(ToHex(twice.substr(twice.size() - tail.size())), ToHex(tail));
}

TEST(Pickler, DeepTreesArePickledWithoutRecursion) {
  ValueArena a;
  Value* root = a.List();
  Value* cur = root;
  for (int i = 0; i < 1'000'000; ++i) {
    Value* next = a.List();
    cur->items.push_back(next);
    cur = next;
  }
  std::string bytes = PickleValue(root);
  ValueArena b;
  DataResolver resolver;
  Unpickler u(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), b, resolver);
  const Value* v = u.Load();
  size_t depth = 0;
  while (!v->items.empty()) {
    v = v->items[0];
    ++depth;
  }
  EXPECT_EQ(depth, 1'000'000u);
}

TEST(Pickler, DagsStayDags) {
  ValueArena a;
  Value* level = a.List();
  for (int i = 0; i < 30; ++i) {
    Value* next = a.List();
    next->items.assign(1000, level);
    level = next;
  }
  std::string bytes = PickleValue(level);
  EXPECT_LT(bytes.size(), 100'000u);
}

TEST(Pickler, NodesItCannotEncodeAreErrors) {
  ValueArena a;
  Value* t = a.New(ValueKind::kTensor);
  try {
    PickleValue(a.Tuple({t}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_EQ(e.message(), "cannot pickle a tensor without a hook");
  }
  try {
    PickleValue(a.Dict("tensordict:TensorDict"));  // a dict of another class: its class, by name
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUsage);
    EXPECT_EQ(e.message(), "global name 'tensordict:TensorDict' is not module.name");
  }
  try {
    PickleValue(a.Global("nodot"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUsage);
    EXPECT_EQ(e.message(), "global name 'nodot' is not module.name");
  }
  try {
    PickleValue(a.Global("os.sys\ntem"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUsage);
  }
}

}  // namespace
}  // namespace trove
