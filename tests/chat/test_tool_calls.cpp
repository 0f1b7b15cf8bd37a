// Tool calls in a model's own words: the format each real chat template teaches, and finished
// replies split into content and OpenAI tool calls (or left whole when they hold none).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/tool_calls.h"

namespace coda {
namespace {

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(CODA_TEST_DATA) + "/templates/" + name + ".jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

TEST(ToolCalls, TheFormatComesFromTheChatTemplate) {
  const std::pair<const char*, ToolCallFormat> cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolCallFormat::Hermes},
      {"Qwen-Qwen3-0.6B", ToolCallFormat::Hermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolCallFormat::Hermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFormat::Llama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolCallFormat::Llama3Json},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFormat::Mistral},
      {"ibm-granite-granite-3.3-2B-Instruct", ToolCallFormat::Granite},
      {"google-gemma-2-2b-it", ToolCallFormat::None},
      {"microsoft-Phi-3.5-mini-instruct", ToolCallFormat::None},
  };
  for (const auto& [name, want] : cases) EXPECT_EQ(tool_call_format_of_template(read_template(name)), want) << name;
  EXPECT_EQ(tool_call_format_named("hermes"), ToolCallFormat::Hermes);
  EXPECT_EQ(tool_call_format_named("llama3_json"), ToolCallFormat::Llama3Json);
  EXPECT_EQ(tool_call_format_named("none"), ToolCallFormat::None);
  EXPECT_FALSE(tool_call_format_named("pythonic").has_value());
}

TEST(ToolCalls, HermesBlocksBecomeCallsAndTheRestContent) {
  const auto s = split_tool_calls(ToolCallFormat::Hermes,
                                  "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                  "{\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": "
                                  "\"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}\n</tool_call>");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.content, "Let me check.");
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, "{\"city\":\"Paris\",\"days\":2}");
  EXPECT_EQ(s.calls[1].name, "get_time");
  EXPECT_EQ(s.calls[1].arguments, "{\"tz\":\"CET\"}");  // arguments given as JSON text
  // No arguments at all: an empty object, as OpenAI sends for a function without parameters.
  const auto bare = split_tool_calls(ToolCallFormat::Hermes, "<tool_call>{\"name\": \"now\"}</tool_call>");
  ASSERT_EQ(bare.calls.size(), 1u);
  EXPECT_EQ(bare.calls[0].arguments, "{}");
  EXPECT_EQ(bare.content, "");
}

TEST(ToolCalls, WhatIsNotACallStaysContentWhole) {
  const std::string texts[] = {
      "  Plain text, with a trailing space ",
      "cut off <tool_call>\n{\"name\": \"get_weather\", \"argu",                // max_tokens inside a call
      "<tool_call>{\"name\": \"x\", \"arguments\": {\"a\": 1}</tool_call>",     // unbalanced JSON
      "<tool_call>{\"arguments\": {}}</tool_call>",                             // no name
      "<tool_call>{\"name\": \"x\", \"arguments\": \"not json\"}</tool_call>",  // arguments not an object
      "<tool_call>{\"name\": \"x\", \"arguments\": [1, 2]}</tool_call>",        // arguments not an object
  };
  for (const std::string& t : texts) {
    const auto s = split_tool_calls(ToolCallFormat::Hermes, t);
    EXPECT_TRUE(s.calls.empty()) << t;
    EXPECT_EQ(s.content, t);
  }
  const auto none = split_tool_calls(ToolCallFormat::None, "<tool_call>{\"name\": \"x\"}</tool_call>");
  EXPECT_TRUE(none.calls.empty());
}

TEST(ToolCalls, Llama3JsonIsTheWholeReply) {
  const auto one = split_tool_calls(ToolCallFormat::Llama3Json,
                                    " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}\n");
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.calls[0].name, "get_weather");
  EXPECT_EQ(one.calls[0].arguments, "{\"city\":\"Rome\"}");
  EXPECT_EQ(one.content, "");
  const auto two =
      split_tool_calls(ToolCallFormat::Llama3Json,
                       "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"s\": \"};{\"}}");
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].name, "b");
  EXPECT_EQ(two.calls[1].arguments, "{\"s\":\"};{\"}");  // brackets inside strings do not count
  // A JSON answer that is not a call, and a call followed by prose, stay content.
  for (const std::string t :
       {"{\"answer\": 42}", "{\"name\": \"a\", \"parameters\": {}} and then", "Sure: {\"name\": \"a\"}"}) {
    const auto s = split_tool_calls(ToolCallFormat::Llama3Json, t);
    EXPECT_TRUE(s.calls.empty()) << t;
    EXPECT_EQ(s.content, t);
  }
}

TEST(ToolCalls, MistralAndGraniteArraysWithOrWithoutTheMarker) {
  const auto m = split_tool_calls(
      ToolCallFormat::Mistral,
      "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]");
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.calls[0].arguments, "{\"x\":1}");
  EXPECT_EQ(m.calls[1].name, "b");
  // The marker is a control token in Mistral's vocabularies, so the text may hold the array alone.
  EXPECT_EQ(split_tool_calls(ToolCallFormat::Mistral, "[{\"name\": \"a\", \"arguments\": {}}]").calls.size(), 1u);
  const auto g = split_tool_calls(ToolCallFormat::Granite, "<|tool_call|>[{\"name\": \"a\", \"arguments\": {}}]");
  ASSERT_EQ(g.calls.size(), 1u);
  EXPECT_EQ(g.content, "");
  const auto text = split_tool_calls(ToolCallFormat::Mistral, "[1, 2, 3] are the first numbers");
  EXPECT_TRUE(text.calls.empty());
  // Hostile nesting is text, not a parse: 200,000 brackets, and calls nested 65 deep.
  const std::string deep(200000, '[');
  EXPECT_EQ(split_tool_calls(ToolCallFormat::Mistral, deep).content, deep);
  std::string nested = "[{\"name\": \"a\", \"arguments\": ";
  for (int i = 0; i < 63; ++i) nested += "{\"x\": ";
  nested += "1" + std::string(63, '}') + "}]";
  EXPECT_TRUE(split_tool_calls(ToolCallFormat::Mistral, nested).calls.empty());
  EXPECT_EQ(
      split_tool_calls(ToolCallFormat::Mistral, "[{\"name\": \"a\", \"arguments\": {\"x\": {\"y\": 1}}}]").calls.size(),
      1u);
}

TEST(ToolCalls, StreamingHoldsBackOnlyWhatMayStartACall) {
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::Hermes, "Hello"), 5u);
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::Hermes, "Hello <tool"), 6u);  // "<tool" may be the marker
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::Hermes, "Hello <tool_call>{"), 6u);
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::Hermes, "a < b"), 5u);  // "<" then " ": not the marker
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::Hermes, "a <"), 2u);
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::Llama3Json, " \n"), 0u);  // undecided
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::Llama3Json, " {\"na"), 0u);
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::Llama3Json, "The answer"), 10u);
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::Mistral, "[{"), 0u);
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::Mistral, "Sure [TOOL_"), 5u);
  EXPECT_EQ(tool_call_safe_prefix(ToolCallFormat::None, "<tool_call>"), 11u);
}

}  // namespace
}  // namespace coda
