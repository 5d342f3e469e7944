#include "api/json_input.h"

#include <gtest/gtest.h>

namespace deskbox::api {
namespace {

using nlohmann::json;

TEST(JsonInputTest, RejectsDeepNestingBeforeParsing) {
  std::string deep(100000, '[');
  auto r = ParseJson(deep);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("nests deeper"), std::string::npos);
  // Brackets inside strings do not count.
  auto ok = ParseJson(R"({"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})");
  ASSERT_TRUE(ok) << ok.error();
}

TEST(JsonInputTest, MalformedJsonHasAMessage) {
  auto r = ParseJson("{\"a\": tru}");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(ParseJson("\"\xff\xfe\""));  // invalid UTF-8
}

// nlohmann throws out_of_range, not parse_error, for a number a double cannot hold; it escaped
// ParseJson, and such a body had its connection dropped instead of a 400 (found by
// api_json_input_fuzz).
TEST(JsonInputTest, NumberOverflowIsMalformed) {
  for (const char* body : {R"({"timeout_s": 1e400})", "422222E444", "[-1E99999]"}) {
    auto r = ParseJson(body);
    ASSERT_FALSE(r) << body;
    EXPECT_NE(r.error().find("number overflow"), std::string::npos) << r.error();
  }
}

TEST(JsonInputTest, TypesRangesAndUnknownFields) {
  json j = json::parse(R"({"n": 5, "s": "abc", "e": "pause", "b": true, "x": 1})");
  ObjectReader in(j);
  EXPECT_EQ(in.Integer("n", 1, 10), 5);
  EXPECT_EQ(in.String("s", 1, 10), "abc");
  EXPECT_EQ(in.Enum("e", {"pause", "stop"}), "pause");
  EXPECT_EQ(in.Bool("b"), true);
  auto err = in.Finish();
  ASSERT_TRUE(err);
  EXPECT_EQ(*err, "unknown field 'x'");

  json bad = json::parse(R"({"n": "5"})");
  ObjectReader b(bad);
  EXPECT_FALSE(b.Integer("n", 1, 10));
  EXPECT_EQ(b.Finish().value_or(""), "n must be an integer");

  json range = json::parse(R"({"n": 11})");
  ObjectReader r(range);
  r.Integer("n", 1, 10);
  EXPECT_NE(r.Finish().value_or("").find("between 1 and 10"), std::string::npos);

  json fl = json::parse(R"({"n": 1.5})");
  ObjectReader f(fl);
  f.Integer("n", 1, 10);
  EXPECT_TRUE(f.Finish());

  json huge = json::parse(R"({"n": 18446744073709551615})");
  ObjectReader h(huge);
  h.Integer("n", 1, 10);
  EXPECT_TRUE(h.Finish());
}

TEST(JsonInputTest, NumbersTakeIntegersAndFractionsWithinRange) {
  json j = json::parse(R"({"a": 2, "b": 0.25, "c": 18446744073709551615})");
  ObjectReader in(j);
  EXPECT_EQ(in.Number("a", 0.01, 2), 2.0);
  EXPECT_EQ(in.Number("b", 0.01, 2), 0.25);
  EXPECT_FALSE(in.Number("c", 0.01, 2));
  EXPECT_NE(in.Finish().value_or("").find("c must be between 0.01 and 2"), std::string::npos);
  for (const char* bad : {R"({"a": "1"})", R"({"a": true})", R"({"a": null})", R"({"a": 0.001})"}) {
    json b = json::parse(bad);
    ObjectReader r(b);
    auto v = r.Number("a", 0.01, 2);
    EXPECT_FALSE(v) << bad;
    EXPECT_EQ(!r.Finish(), std::string(bad).find("null") != std::string::npos) << bad << ": null is absent";
  }
}

TEST(JsonInputTest, NestedNamesAndNotAnObject) {
  json j = json::parse(R"({"width": -1})");
  ObjectReader in(j, "resolution");
  in.Integer("width", 1, 100);
  EXPECT_NE(in.Finish().value_or("").find("resolution.width"), std::string::npos);
  json arr = json::parse("[1]");
  ObjectReader a(arr);
  EXPECT_EQ(a.Finish().value_or(""), "body must be a JSON object");
}

TEST(JsonInputTest, DumpReplacesInvalidUtf8) {
  json j = {{"out", std::string("ok\xff")}};
  std::string s = Dump(j);
  EXPECT_NE(s.find("ok\xef\xbf\xbd"), std::string::npos);
}

}  // namespace
}  // namespace deskbox::api
