// A reply in the model's own words: the tool-call format each real chat template teaches, finished
// replies split into content and OpenAI tool calls (or left whole when they hold none), and a
// reasoning model's <think> block apart from its answer, whole and streamed.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/reasoning.h"
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
  // Fed token by token with what was sent as `from`: the same prefixes as from the start.
  for (ToolCallFormat f : {ToolCallFormat::Hermes, ToolCallFormat::Mistral, ToolCallFormat::Llama3Json}) {
    const std::string reply = "Sure, a <b>tag</b>. Now <tool_call>{\"name\": \"x\"}</tool_call> done [TOOL_CALLS]";
    size_t sent = 0;
    for (size_t n = 1; n <= reply.size(); ++n) {
      const std::string_view so_far = std::string_view(reply).substr(0, n);
      const size_t safe = std::max(sent, tool_call_safe_prefix(f, so_far, sent));
      ASSERT_EQ(safe, std::max(sent, tool_call_safe_prefix(f, so_far))) << tool_call_format_name(f) << " at " << n;
      sent = safe;
    }
  }
}

TEST(Reasoning, TemplatesThatKnowTheThinkBlock) {
  EXPECT_TRUE(template_thinks(read_template("deepseek-ai-DeepSeek-R1-Distill-Llama-8B")));
  EXPECT_TRUE(template_thinks(read_template("Qwen-Qwen3-0.6B")));
  EXPECT_FALSE(template_thinks(read_template("Qwen-Qwen2.5-7B-Instruct")));
  EXPECT_FALSE(template_thinks(read_template("meta-llama-Llama-3.1-8B-Instruct")));
}

TEST(Reasoning, WholeRepliesSplitAtTheBlock) {
  struct Case {
    const char* text;
    bool opened;
    const char* reasoning;
    const char* content;
  };
  const Case cases[] = {
      {"Two and two.\n</think>\n\nFour.", true, "Two and two.\n", "\n\nFour."},  // DeepSeek-R1: opened by the prompt
      {"\n<think>\nPlan.\n</think>\n\nDone.", false, "\nPlan.\n", "\n\nDone."},  // Qwen3: the model opens it
      {"Just an answer.", false, "", "Just an answer."},                         // no block
      {"Still thinking when max_tokens came", true, "Still thinking when max_tokens came", ""},
      {"<think>cut off", false, "cut off", ""},
      {"<thinking> is not the tag", false, "", "<thinking> is not the tag"},
      {"An answer that mentions </think> late", false, "", "An answer that mentions </think> late"},
      {"a</think>b</think>c", true, "a", "b</think>c"},  // the first close ends the block
      {"", true, "", ""},
  };
  for (const Case& c : cases) {
    const ReasoningSplit s = split_reasoning(c.text, c.opened);
    EXPECT_EQ(s.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(s.content, c.content) << c.text;
  }
}

TEST(Reasoning, AStreamInAnyPiecesSplitsAsTheWholeReply) {
  const std::string texts[] = {"Two and two.\n</think>\n\nFour.",
                               "  <think>x</think>y",
                               "<thi",
                               "</thin",
                               "a </ b",
                               "<think></think>",
                               "ok </think> </think>"};
  for (const std::string& t : texts)
    for (bool opened : {false, true}) {
      const ReasoningSplit whole = split_reasoning(t, opened);
      for (size_t step = 1; step <= 3; ++step) {
        ReasoningSplitter s(opened);
        std::string reasoning, content;
        for (size_t i = 0; i < t.size(); i += step) {
          const size_t before = reasoning.size() + content.size();
          s.feed(std::string_view(t).substr(i, step), reasoning, content);
          EXPECT_GE(reasoning.size() + content.size(), before);  // what went out stays out
        }
        s.finish(reasoning, content);
        EXPECT_EQ(reasoning, whole.reasoning) << t << " step " << step << " opened " << opened;
        EXPECT_EQ(content, whole.content) << t << " step " << step << " opened " << opened;
      }
    }
  // Held back only while the bytes may still be the tag: "</thi" waits, "</thx" goes out.
  ReasoningSplitter s(true);
  std::string reasoning, content;
  s.feed("abc </thi", reasoning, content);
  EXPECT_EQ(reasoning, "abc ");
  s.feed("x", reasoning, content);
  EXPECT_EQ(reasoning, "abc </thix");
}

}  // namespace
}  // namespace coda
