// The one JSON encoding (docs/json.md): tags where plain JSON is ambiguous, numbers through the
// one float formatter, integers beyond 2^53 tagged, and nlohmann's layout otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "cli/json_output.h"
#include "core/float_text.h"
#include "trove/value.h"

namespace trove::cli {
namespace {

std::string Compact(const Value* v) { return DumpJson(ValueJson(v), -1); }

TEST(FloatText, ShortestRoundTripThatReadsAsAFloat) {
  EXPECT_EQ(FloatText(0.1), "0.1");
  EXPECT_EQ(FloatText(1.0), "1.0");
  EXPECT_EQ(FloatText(-0.0), "-0.0");
  EXPECT_EQ(FloatText(1e20), "1e+20");
  EXPECT_EQ(FloatText(0.1f), "0.1");                         // the float32 as the float32 it is
  EXPECT_EQ(FloatText(static_cast<double>(0.1f)), "0.10000000149011612");  // as the double it is
  EXPECT_EQ(FloatText(std::nan("")), "nan");
  EXPECT_EQ(FloatText(-INFINITY), "-inf");
  for (double d : {0.3, 1.0 / 3, 5e-324, 1.7976931348623157e308, 123456789.125}) {
    EXPECT_EQ(std::strtod(FloatText(d).c_str(), nullptr), d);
  }
  // Python's repr: positional for exponents in [-4, 16), else scientific with two exponent digits.
  EXPECT_EQ(FloatText(0.0003), "0.0003");
  EXPECT_EQ(FloatText(0.00001), "1e-05");
  EXPECT_EQ(FloatText(1e16), "1e+16");
  EXPECT_EQ(FloatText(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(FloatText(-1.5e300), "-1.5e+300");
  EXPECT_EQ(FloatText(100.0), "100.0");
  EXPECT_EQ(FloatText(123.456), "123.456");
  EXPECT_EQ(FloatText(5e-324), "5e-324");
  EXPECT_EQ(RoundedFloatText(0.123456, 4), "0.1235");
  EXPECT_EQ(ComplexText(1, 2), "(1.0+2.0j)");
  EXPECT_EQ(ComplexText(1, -0.0), "(1.0-0.0j)");
  EXPECT_EQ(ComplexText(0, std::nan("")), "(0.0+nanj)");
}

TEST(JsonOutput, PlainWhereUnambiguous) {
  ValueArena a;
  Value* d = a.Dict("collections.OrderedDict");
  d->entries.emplace_back(a.Str("lr"), a.Float(0.001));
  d->entries.emplace_back(a.Str("epoch"), a.Int(3));
  d->entries.emplace_back(a.Str("one"), a.Float(1.0));
  Value* list = a.List();
  list->items = {a.Bool(true), a.None(), a.Str("x")};
  d->entries.emplace_back(a.Str("list"), list);
  EXPECT_EQ(Compact(d), R"({"lr":0.001,"epoch":3,"one":1.0,"list":[true,null,"x"]})");
}

TEST(JsonOutput, TagsWhatPlainJsonConfuses) {
  ValueArena a;
  Value* c = a.New(ValueKind::kComplex);
  c->real = 1;
  c->imag = 2;
  EXPECT_EQ(Compact(c), R"({"$complex":[1.0,2.0]})");
  EXPECT_EQ(Compact(a.Tuple({a.Int(1), a.Int(2)})), R"({"$tuple":[1,2]})");
  Value* set = a.New(ValueKind::kSet);
  set->items = {a.Int(1)};
  EXPECT_EQ(Compact(set), R"({"$set":[1]})");
  EXPECT_EQ(Compact(a.Bytes("hi!")), R"({"$bytes":"aGkh"})");
  EXPECT_EQ(Compact(a.Bytes("h")), R"({"$bytes":"aA=="})");
  EXPECT_EQ(Compact(a.Float(std::nan(""))), R"({"$float":"nan"})");
  EXPECT_EQ(Compact(a.Float(-INFINITY)), R"({"$float":"-inf"})");
  EXPECT_EQ(Compact(a.Int(int64_t{1} << 53)), R"({"$int":"9007199254740992"})");
  EXPECT_EQ(Compact(a.Int((int64_t{1} << 53) - 1)), "9007199254740991");
  EXPECT_EQ(Compact(a.BigInt({0, 0, 0, 0, 0, 0, 0, 0, 1})), R"({"$int":"18446744073709551616"})");
  EXPECT_EQ(Compact(a.Global("torch.float32")), R"({"$global":"torch.float32"})");
  // Keys that are not strings, or that look like tags, make the pairs form.
  Value* d = a.Dict();
  d->entries.emplace_back(a.Int(1), a.Str("a"));
  EXPECT_EQ(Compact(d), R"({"$dict":[[1,"a"]]})");
  Value* tagged = a.Dict("collections.Counter");
  tagged->entries.emplace_back(a.Str("$int"), a.Int(1));
  EXPECT_EQ(Compact(tagged), R"({"$dict":[["$int",1]],"$class":"collections.Counter"})");
  EXPECT_EQ(Compact(a.Object("posix.system", a.Tuple({a.Str("id")}))), R"({"$object":"posix.system","$args":{"$tuple":["id"]}})");
}

TEST(JsonOutput, BoundedBytesAndNodes) {
  ValueArena a;
  const std::string big(1000, 'x');
  const std::string bounded = Compact(a.Bytes(big));
  EXPECT_NE(bounded.find(R"("$length":1000)"), std::string::npos);
  EXPECT_EQ(DumpJson(ValueJson(a.Bytes(big), {SIZE_MAX, SIZE_MAX}), -1).find("$length"), std::string::npos);
  Value* list = a.List();
  for (int i = 0; i < 10; ++i) list->items.push_back(a.Int(i));
  EXPECT_EQ(DumpJson(ValueJson(list, {4, 0}), -1), R"([0,1,2,{"$elided":true}])");
}

TEST(JsonOutput, EveryFieldFollowsTheNumberRules) {
  Json j{{"size", std::numeric_limits<uint64_t>::max()}, {"x", std::numeric_limits<double>::infinity()},
         {"neg", std::numeric_limits<int64_t>::min()}, {"f", 2.5}};
  EXPECT_EQ(DumpJson(j, -1),
            R"({"size":{"$int":"18446744073709551615"},"x":{"$float":"inf"},"neg":{"$int":"-9223372036854775808"},"f":2.5})");
}

TEST(JsonOutput, PrettyLayoutIsNlohmanns) {
  Json j{{"a", Json::array({1, "s\n", nullptr, Json::object(), Json::array()})}, {"b", {{"c", true}}}};
  EXPECT_EQ(DumpJson(j, 2), j.dump(2));
  EXPECT_EQ(DumpJson(j, -1), j.dump());
  EXPECT_EQ(DumpJson(Json("\xff"), -1), "\"\xEF\xBF\xBD\"");  // invalid UTF-8: U+FFFD, not an exception
}

}  // namespace
}  // namespace trove::cli
