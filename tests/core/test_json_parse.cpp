// parse_ordered_json against nlohmann's own ordered parser, the reference for what a document
// must hold: the same values, the same key order, the same answer to a repeated key.
#include <gtest/gtest.h>

#include <string>

#include "core/json_parse.h"

namespace coda {
namespace {

using Json = nlohmann::ordered_json;

// Equal as documents and in the order of every object's keys (dump() writes them in order).
void expect_same_as_reference(const std::string& text) {
  const Json want = Json::parse(text, nullptr, false);
  const Json got = parse_ordered_json(text);
  ASSERT_EQ(got.is_discarded(), want.is_discarded()) << text;
  if (want.is_discarded()) return;
  EXPECT_EQ(got.dump(), want.dump()) << text;
}

TEST(JsonParse, MatchesNlohmannOnDocuments) {
  for (const char* text : {
           "null",
           "true",
           "false",
           "0",
           "-12",
           "18446744073709551615",
           "1.5e-3",
           "\"a\\u00e9\\ud83d\\ude00\\n\"",
           "[]",
           "{}",
           "[1, [2, [3, {}]], {\"a\": []}]",
           R"({"z": 1, "a": 2, "m": {"y": [true, null], "b": "x"}})",
           R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function",
               "function": {"name": "f", "parameters": {"type": "object",
               "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}}}]})",
           // Repeated keys: the first place, the last value, also when the values are containers.
           R"({"a": 1, "b": 2, "a": 3})",
           R"({"a": {"x": 1}, "b": 2, "a": [4, 5]})",
           R"({"a": [1], "a": {"k": {"a": 1, "a": 2}}})",
       })
    expect_same_as_reference(text);
}

TEST(JsonParse, InvalidTextIsDiscarded) {
  for (const char* text :
       {"", "{", "[1,]", "{\"a\" 1}", "{\"a\": 1} x", "nul", "\"\\x\"", "[1] [2]", "{1: 2}", "\"unterminated", "01"}) {
    expect_same_as_reference(text);
    EXPECT_TRUE(parse_ordered_json(text).is_discarded()) << text;
  }
}

// Past 16 keys an object finds repeated keys through its index; the answer must not change
// where the index takes over, nor for keys first seen before it was built.
TEST(JsonParse, LargeObjectsWithRepeatedKeysMatchTheReference) {
  for (int n : {15, 16, 17, 18, 40, 3000}) {
    std::string text = "{";
    for (int i = 0; i < n; ++i) text += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
    // Repeat an early key, the key at the index's threshold and the last one; then a new key.
    text += "\"k0\": \"first again\", \"k" + std::to_string(n / 2) + "\": [1], \"k" + std::to_string(n - 1) +
            "\": {\"k0\": 1, \"k0\": 2}, \"new\": null}";
    expect_same_as_reference(text);
    const Json got = parse_ordered_json(text);
    ASSERT_TRUE(got.is_object());
    EXPECT_EQ(got.size(), static_cast<size_t>(n + 1));
    EXPECT_EQ(got.begin().key(), "k0");
    EXPECT_EQ(got.at("k0"), "first again");
  }
}

TEST(JsonParse, NestedLargeObjectsKeepTheirOwnIndexes) {
  std::string text = "[";
  for (int o = 0; o < 3; ++o) {
    text += o ? ", {" : "{";
    for (int i = 0; i < 50; ++i) text += "\"k" + std::to_string(i) + "\": {\"inner\": " + std::to_string(o) + "}, ";
    text += "\"k7\": " + std::to_string(100 + o) + "}";
  }
  text += "]";
  expect_same_as_reference(text);
  const Json got = parse_ordered_json(text);
  EXPECT_EQ(got[2]["k7"], 102);
  EXPECT_EQ(got[1]["k8"]["inner"], 1);
}

}  // namespace
}  // namespace coda
