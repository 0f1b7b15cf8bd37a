// The prompts a load test or a study sends: from a JSONL file (one object per line with `prompt`
// or `messages`, and an optional `group` label) or from the built-in sets, in English, Italian and
// French: long exam answers (the task of the study behind `coda tune`), numbered narratives (where
// loops appear in the field) and short technical questions (which should end quickly).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace coda::lab {

struct BenchPrompt {
  std::string prompt;       // for /v1/completions
  nlohmann::json messages;  // for /v1/chat/completions; null when the prompt is plain text
  std::string group;        // a label results are grouped by ("exam-en", or the file's `group`)
  bool chat() const { return !messages.is_null(); }
};

// Reads FILE.jsonl (one prompt object per line), or a JSON array of them, or a ShareGPT dump (the
// array of {"conversations": [{"from", "value"}]} that vLLM's benchmarks read; each
// conversation's first human turn becomes a chat prompt of group "sharegpt"). Keeps at most
// kMaxPrompts, a uniform sample with a fixed seed, in file order. Errors name the line or element.
constexpr size_t kMaxPrompts = 10000;
Expected<std::vector<BenchPrompt>> load_prompts(const std::string& path);

// Built-in sets by name: "exam", "narrative", "technical", or "all"; languages "en", "it", "fr"
// (comma-separated lists). The prompts are plain text (completions), so a base model continues them;
// with `chat` (--api chat) each is a user message without its completion cue ("Answer:", "R:",
// "1."), for an instruct model behind /v1/chat/completions.
Expected<std::vector<BenchPrompt>> builtin_prompts(const std::string& sets, const std::string& languages,
                                                   bool chat = false);
// The chat form of a built-in completion prompt: its last line dropped when it is a cue.
BenchPrompt as_chat_prompt(const BenchPrompt& completion);

}  // namespace coda::lab
