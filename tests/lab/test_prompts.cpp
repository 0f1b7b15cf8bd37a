// Prompt files for the lab: JSONL, a JSON array, and ShareGPT dumps as vLLM's benchmarks read them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "lab/prompts.h"

namespace coda::lab {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / ("coda-prompts-" + name)).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(Prompts, JsonlObjectsWithGroups) {
  const auto path = write_file("a.jsonl",
                               "{\"prompt\": \"Once\"}\n\n{\"messages\": [{\"role\": \"user\", \"content\": "
                               "\"Hi\"}], \"group\": \"chat\"}\n");
  auto p = load_prompts(path);
  ASSERT_TRUE(p) << p.error().message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].prompt, "Once");
  EXPECT_EQ((*p)[0].group, "default");
  EXPECT_TRUE((*p)[1].chat());
  EXPECT_EQ((*p)[1].group, "chat");
}

// ShareGPT: the first human turn (after a system turn, if any) is the prompt; conversations that
// open with the model, or have no human turn, are skipped; whitespace before the array is fine.
TEST(Prompts, ShareGptConversationsGiveTheirFirstQuestion) {
  const auto path = write_file("sharegpt.json", R"(
  [
    {"id": "a", "conversations": [{"from": "human", "value": "What is 2+2?"}, {"from": "gpt", "value": "4"},
                                  {"from": "human", "value": "And 3+3?"}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "Hello, I start."}, {"from": "human", "value": "x"}]},
    {"id": "c", "conversations": []},
    {"id": "d", "conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Why?"}]},
    {"prompt": "plain text", "group": "mine"}
  ])");
  auto p = load_prompts(path);
  ASSERT_TRUE(p) << p.error().message();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0].messages, nlohmann::json::parse(R"([{"role": "user", "content": "What is 2+2?"}])"));
  EXPECT_EQ((*p)[0].group, "sharegpt");
  EXPECT_EQ(
      (*p)[1].messages,
      nlohmann::json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}])"));
  EXPECT_EQ((*p)[2].prompt, "plain text");
  EXPECT_EQ((*p)[2].group, "mine");
}

// A dump larger than the cap keeps kMaxPrompts of it, in file order, the same ones every time,
// spread over the whole file (not only its start).
TEST(Prompts, LargeFilesAreSampledToTheCap) {
  std::string text = "[";
  const size_t n = kMaxPrompts * 3;
  for (size_t i = 0; i < n; ++i)
    text += (i ? "," : "") + std::string("{\"conversations\": [{\"from\": \"human\", \"value\": \"q") +
            std::to_string(i) + "\"}]}";
  text += "]";
  const auto path = write_file("big.json", text);
  auto a = load_prompts(path), b = load_prompts(path);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->size(), kMaxPrompts);
  size_t last = 0, beyond_first_third = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    const std::string q = (*a)[i].messages[0]["content"];
    EXPECT_EQ(q, (*b)[i].messages[0]["content"].get<std::string>());
    const size_t idx = std::stoul(q.substr(1));
    if (i > 0) {
      EXPECT_GT(idx, last);
    }
    last = idx;
    if (idx >= kMaxPrompts) ++beyond_first_third;
  }
  // Each kept prompt comes from the last two thirds with probability 2/3.
  EXPECT_GT(beyond_first_third, kMaxPrompts / 2);
  EXPECT_LT(beyond_first_third, kMaxPrompts * 5 / 6);
}

TEST(Prompts, ErrorsNameTheLineOrElement) {
  auto bad_turn = load_prompts(write_file("bad-turn.json", R"([{"conversations": [{"from": "human"}]}])"));
  ASSERT_FALSE(bad_turn);
  EXPECT_NE(bad_turn.error().message().find("element 0"), std::string::npos) << bad_turn.error().message();
  auto bad_json = load_prompts(write_file("bad.json", "[{\"prompt\": \"a\"}, {\"prompt\": "));
  ASSERT_FALSE(bad_json);
  EXPECT_NE(bad_json.error().message().find("not valid JSON"), std::string::npos) << bad_json.error().message();
  auto not_obj = load_prompts(write_file("numbers.json", "[1, 2]"));
  ASSERT_FALSE(not_obj);
  EXPECT_NE(not_obj.error().message().find("element 0: not a JSON object"), std::string::npos)
      << not_obj.error().message();
  auto jsonl = load_prompts(write_file("bad.jsonl", "{\"prompt\": \"a\"}\n{\"text\": 1}\n"));
  ASSERT_FALSE(jsonl);
  EXPECT_NE(jsonl.error().message().find(":2: "), std::string::npos) << jsonl.error().message();
  auto none = load_prompts(write_file("none.json", R"([{"conversations": [{"from": "gpt", "value": "hi"}]}])"));
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message().find("1 conversations without a human turn"), std::string::npos)
      << none.error().message();
  EXPECT_FALSE(load_prompts(write_file("empty.json", "[]")));
  EXPECT_FALSE(load_prompts("/nonexistent/prompts.jsonl"));
}

}  // namespace
}  // namespace coda::lab
