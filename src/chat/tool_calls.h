// Tool calls in a model's own words. With `tools` and tool_choice "auto", a model writes a call in
// the format its chat template taught it, and an OpenAI client expects `tool_calls`, not that text.
// vLLM does this with --enable-auto-tool-choice --tool-call-parser NAME; coda reads the format
// from the chat template (or the same flag) and splits a finished generation into content and calls.
//
// Formats (as the templates in tests/data/templates write them):
// - hermes (Qwen2.5, Qwen3, Hermes 3): <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
//   one block per call, any text before the first block is content.
// - llama3_json (Llama 3.1-3.3): the whole reply is {"name": ..., "parameters": {...}} (or
//   "arguments"), several separated by ";"; <|python_tag|> is a control token and never in the text.
// - mistral (Mistral, Mistral Nemo): [TOOL_CALLS] then a JSON array of {"name", "arguments"}.
//   [TOOL_CALLS] is a control token in Mistral's vocabularies, so a reply that is such an array
//   alone counts too.
// - granite (IBM Granite 3.x): <|tool_call|> then a JSON array, likewise.
// A reply that does not parse as calls in its format stays content, whole: a model that only
// mentions a format, or was cut off by max_tokens, has its text returned as it wrote it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coda {

enum class ToolCallFormat { None, Hermes, Llama3Json, Mistral, Granite };

// "hermes", "llama3_json", "mistral", "granite", "none"; nullopt for another name ("auto" is the caller's).
std::optional<ToolCallFormat> tool_call_format_named(std::string_view name);
const char* tool_call_format_name(ToolCallFormat f);
// The format a chat template teaches (None where it has no tool-call format coda knows).
ToolCallFormat tool_call_format_of_template(std::string_view source);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // compact JSON text of an object, as OpenAI sends "arguments"
};

struct ToolCallSplit {
  std::string content;                // with calls: the text outside them, trimmed; without: the text as it is
  std::vector<ParsedToolCall> calls;  // empty: the text is all content
};

ToolCallSplit split_tool_calls(ToolCallFormat f, std::string_view text);

// While streaming: how many leading bytes of the text generated so far are content for certain,
// so they can be sent now. The rest may start a call and waits for the end of the generation.
// `from`: a prefix already found safe (what the stream sent), where no marker is looked for again,
// so that a long reply is not searched from its start at every token.
size_t tool_call_safe_prefix(ToolCallFormat f, std::string_view text, size_t from = 0);

}  // namespace coda
