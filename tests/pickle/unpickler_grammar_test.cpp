// The argument forms CPython's unpickler accepts (Modules/_pickle.c), value for value, and the
// lexical pass that lists names past where reading stopped. The Python differential test
// (tests/python/test_pickle_parity.py) checks the same against CPython itself; these pin the
// values and messages.
#include <gtest/gtest.h>

#include "trove/error.h"
#include "trove/unpickler.h"

namespace trove {
namespace {

using namespace std::string_literals;

struct Read {
  Value* value = nullptr;
  std::string error;
  ErrorCode code = ErrorCode::kUsage;
  std::vector<PickleGlobal> globals;
  std::string lexical_stop;
};

Read Load(ValueArena& arena, const std::string& p, bool permissive) {
  DataResolver resolver(permissive ? PicklePolicy::kPermissive : PicklePolicy::kStrict);
  Unpickler u(reinterpret_cast<const uint8_t*>(p.data()), p.size(), arena, resolver);
  Read r;
  try {
    r.value = u.Load();
  } catch (const Error& e) {
    r.error = e.message();
    r.code = e.code();
  }
  r.globals = u.globals();
  r.lexical_stop = u.lexical_stop();
  return r;
}

int64_t IntOf(ValueArena& arena, const std::string& op_line) {
  Read r = Load(arena, op_line + ".", false);
  EXPECT_EQ(r.error, "") << op_line;
  if (r.value == nullptr) return -999;
  if (r.value->kind == ValueKind::kBool) return r.value->boolean ? 1 : 0;
  EXPECT_EQ(r.value->kind, ValueKind::kInt) << op_line;
  if (!r.value->big_int.empty()) {
    int64_t v = 0;  // small values only in these tests
    for (size_t i = r.value->big_int.size(); i-- > 0;) v = v * 256 + r.value->big_int[i];
    if (r.value->big_int.back() & 0x80) v -= int64_t{1} << (8 * r.value->big_int.size());
    return v;
  }
  return r.value->integer;
}

TEST(Grammar, IntTextIsBaseZeroLikeCPython) {
  ValueArena a;
  EXPECT_EQ(IntOf(a, "I0x10\n"), 16);
  EXPECT_EQ(IntOf(a, "I0X1f\n"), 31);
  EXPECT_EQ(IntOf(a, "I010\n"), 8);  // strtol's octal
  EXPECT_EQ(IntOf(a, "I0b101\n"), 5);
  EXPECT_EQ(IntOf(a, "I0o17\n"), 15);
  EXPECT_EQ(IntOf(a, "I1_000\n"), 1000);
  EXPECT_EQ(IntOf(a, "I0x_ff\n"), 255);
  EXPECT_EQ(IntOf(a, "I 7 \n"), 7);
  EXPECT_EQ(IntOf(a, "I5\0junk\n"s), 5);
  EXPECT_EQ(IntOf(a, "I\0\n"s), 0);
  EXPECT_EQ(IntOf(a, "I-0x10\n"), -16);
  EXPECT_EQ(IntOf(a, "L0x10L\n"), 16);
  EXPECT_EQ(IntOf(a, "L5 L\n"), 5);
  EXPECT_EQ(IntOf(a, "L-1_0\n"), -10);
  Read r = Load(a, "I+1\n.", false);
  ASSERT_EQ(r.value->kind, ValueKind::kBool);  // a 2-character line of 0 or 1 is Python 2's bool
  EXPECT_TRUE(r.value->boolean);
  r = Load(a, "I-0\n.", false);
  ASSERT_EQ(r.value->kind, ValueKind::kBool);
  for (const char* bad : {"I0_1\n.", "I1__0\n.", "I \n.", "I010_0\n.", "L010\n.", "LL\n."}) {
    EXPECT_EQ(Load(a, bad, false).code, ErrorCode::kCorrupt) << bad;
  }
}

TEST(Grammar, MemoIndicesAreIntTextInBaseTen) {
  ValueArena a;
  for (const char* p : {"Np+5\n0g5\n.", "Np1_0\n0g10\n.", "Np 3 \n0g3\n.", "Np007\n0g7\n.", "Np-0\n0g0\n.", "Np5\n0g+5\n."}) {
    Read r = Load(a, p, false);
    EXPECT_EQ(r.error, "") << p;
  }
  EXPECT_EQ(Load(a, "Np-1\n.", false).error, "@ 1: negative PUT index");
  EXPECT_EQ(Load(a, "Np0x1\n.", false).error, "@ 1: PUT has a bad memo index '0x1'");
}

TEST(Grammar, ContainerOperationsPythonAcceptsOnAnyObject) {
  ValueArena a;
  Read r = Load(a, "](NNeJ\xff\xff\xff\xffK\x07s."s, false);  // list[-1] = 7
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.value->items.size(), 2u);
  EXPECT_EQ(r.value->items[1]->integer, 7);
  r = Load(a, "\x96\x01\x00\x00\x00\x00\x00\x00\x00" "a(KbKce\x88" "aK\x00KAs."s, false);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.value->text, "Abc\x01");
  EXPECT_EQ(Load(a, "\x96\x00\x00\x00\x00\x00\x00\x00\x00" "M\x00\x01" "a."s, false).code, ErrorCode::kRefused);
  // Where Python would refuse too, a permissive reader leaves the target and reads on.
  r = Load(a, "]K\x05K\x01s" "cposix\nsystem\n0."s, true);
  EXPECT_EQ(r.error, "");
  ASSERT_EQ(r.globals.size(), 1u);
  EXPECT_EQ(r.globals[0].module, "posix");
}

TEST(Grammar, BuildSplitsStateAndSlotState) {
  ValueArena a;
  EXPECT_EQ(Load(a, "]N}\x86" "b."s, false).error, "");
  Read r = Load(a, "ccollections\nOrderedDict\n)RN}X\x01\x00\x00\x00" "aK\x01s\x86" "b."s, false);
  ASSERT_EQ(r.error, "");
  ASSERT_NE(r.value->state, nullptr);
  EXPECT_EQ(r.value->state->entries.size(), 1u);
  EXPECT_EQ(Load(a, "]NK\x01\x86" "b."s, false).error, "@ 5: BUILD slot state is a int, not a dict");
}

TEST(Grammar, ExtensionCodesAreListedAndRefusedWhenStrict) {
  ValueArena a;
  Read r = Load(a, "\x80\x02\x83\x01\x02)R."s, true);
  EXPECT_EQ(r.error, "");
  ASSERT_EQ(r.globals.size(), 1u);
  EXPECT_EQ(r.globals[0].via, PickleGlobalVia::kExtension);
  EXPECT_EQ(r.globals[0].extension_code, 0x0201u);
  EXPECT_EQ(Load(a, "\x80\x02\x83\x01\x02)R."s, false).code, ErrorCode::kRefused);
}

TEST(Grammar, LexicalPassListsWhatFollowsAStop) {
  ValueArena a;
  const std::string p = "\x80\x04I12a\n0cposix\nsystem\n0\x8c\x02os\x94\x8c\x06system\x94\x93" "0"
                        "h\x00h\x01\x93" "0" "\x82\x09" "0" "]\x93" "0N."s;
  Read r = Load(a, p, true);
  EXPECT_EQ(r.code, ErrorCode::kCorrupt);
  EXPECT_EQ(r.lexical_stop, "");
  ASSERT_EQ(r.globals.size(), 5u);
  for (const auto& g : r.globals) EXPECT_TRUE(g.after_stop);
  EXPECT_EQ(r.globals[0].module + "." + r.globals[0].name, "posix.system");
  EXPECT_EQ(r.globals[1].module + "." + r.globals[1].name, "os.system");
  EXPECT_EQ(r.globals[2].module + "." + r.globals[2].name, "os.system");  // through the memo
  EXPECT_EQ(r.globals[3].via, PickleGlobalVia::kExtension);
  EXPECT_EQ(r.globals[4].via, PickleGlobalVia::kComputed);
  // A strict reader names the refused global, not only the construct in front of it.
  r = Load(a, p, false);
  EXPECT_EQ(r.code, ErrorCode::kRefused);
  EXPECT_EQ(r.error, "@ 8: refused global 'posix.system' (found past where reading stopped, @ 2: INT has a bad literal '12a')");
}

TEST(Grammar, LexicalPassSaysWhereItStopped) {
  ValueArena a;
  Read r = Load(a, "I12a\n0\xff" "cposix\nsystem\n."s, true);
  EXPECT_EQ(r.lexical_stop, "@ 6: unknown opcode 0xff");
  EXPECT_TRUE(r.globals.empty());
  r = Load(a, "I12a\n0X\xff\x00\x00\x00" "ab"s, true);
  EXPECT_EQ(r.lexical_stop.rfind("@ 6: truncated", 0), 0u) << r.lexical_stop;
}

}  // namespace
}  // namespace trove
