// A reasoning model's thinking, apart from its answer. DeepSeek-R1 (and its Llama and Qwen
// distillations) and Qwen3 write <think> ... </think> before the answer; vLLM's reasoning parsers
// (--reasoning-parser deepseek_r1, qwen3) send that part as `reasoning_content` and the rest as
// `content`, and so does `coda serve` when the chat template speaks of </think>.
//
// Some templates open the block themselves (DeepSeek-R1's generation prompt ends with "<think>\n"),
// so the reply starts inside it; otherwise a reply thinks only if it begins with <think>. Text
// after </think> is the answer; a reply cut off before </think> is all thinking.
#pragma once

#include <string>
#include <string_view>

namespace coda {

// Whether a chat template knows the <think> block.
bool template_thinks(std::string_view source);

// Splits a reply as it streams in: feed() hands out what is certain, holding back bytes that may
// still turn out to be "<think>" or "</think>"; finish() hands out the rest.
class ReasoningSplitter {
 public:
  // `opened`: the prompt already opened the block, so the reply starts inside it.
  explicit ReasoningSplitter(bool opened) : state_(opened ? State::Thinking : State::Undecided) {}
  void feed(std::string_view text, std::string& reasoning, std::string& content);
  void finish(std::string& reasoning, std::string& content);

 private:
  enum class State { Undecided, Thinking, Answering };
  State state_;
  std::string held_;
};

struct ReasoningSplit {
  std::string reasoning, content;
};
ReasoningSplit split_reasoning(std::string_view text, bool opened);

}  // namespace coda
