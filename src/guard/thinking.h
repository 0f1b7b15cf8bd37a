// A reasoning model's thinking under the guard: where the <think> block is in the generation, and
// when to close it so that the model answers.
//
// A loop inside the thinking used to be stopped (the answer never started) or resampled inside
// the thinking. Closing costs far less: the degenerate part is dropped (rolled back to the loop's
// onset), the block is ended the way the model's format ends it ("</think>" and the template's
// separator), and the model writes its answer, which is guarded like any content. A budget of
// reasoning tokens closes the block the same way, at the first sentence end within a grace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace coda {

struct ThinkingConfig {
  bool watch = false;   // the reply may think (the request splits reasoning from content)
  bool opened = false;  // the prompt opened the block: the reply starts inside it
  // The caller says where the block is and writes the close itself (the proxy: the upstream sends
  // the thinking in its own field, and a close is a continuation request).
  bool external = false;
  // A loop (any detector of the loop family, or any detector the policy acts on) inside the block
  // closes it and the model answers; false: the policy acts as on any text (stop or repair).
  bool answer_on_loop = true;
  int64_t budget = -1;     // reasoning tokens before the block is closed; -1: unlimited
  int64_t grace = 32;      // tokens past the budget within which a sentence end closes it
  int64_t min_answer = 4;  // tokens of answer the model must write after a forced close
  // Tokens held from the client while thinking (when a loop may close the block), so that the loop
  // a close drops has not reached it.
  int64_t hold = 256;
  std::string close_text = "</think>\n\n";  // what ends the block (a line break goes before it)
  // close_text tokenized: after a line break first (mid-line), and as it is (at a line's start).
  std::vector<int32_t> close, close_after_newline;
};

// Follows the block through the generation's text, token by token, rollbacks included.
class ThinkingTracker {
 public:
  explicit ThinkingTracker(const ThinkingConfig& config) : cfg_(config) {}
  // Token `i` was generated; `text` is the completion so far, `text_ends` its bytes after each token.
  void see(int64_t i, const std::string& text, const std::vector<size_t>& text_ends);
  void on_rollback(int64_t keep, const std::vector<size_t>& text_ends);
  // With `external`: the tokens from `n` on are thinking (true) or answer (false).
  void set_inside(bool inside, int64_t n);
  // Inside the block after the newest token (its close not yet written).
  bool inside() const { return state_ == State::Thinking; }
  // Whether the reply thinks at all (known once its first characters are in).
  bool thinks() const { return state_ == State::Thinking || state_ == State::Closed; }
  // Reasoning tokens: from the block's start to the token where its close begins (the close's own
  // tokens are not reasoning), or all tokens so far while inside.
  int64_t reasoning_tokens(int64_t n) const;
  // The first token after the block (-1 while it is open or there is none).
  int64_t closed_at() const { return closed_at_; }

 private:
  enum class State { Undecided, Thinking, Closed, NoThinking };
  ThinkingConfig cfg_;
  State state_ = cfg_.opened ? State::Thinking : State::Undecided;
  int64_t start_ = 0;        // first token inside the block
  int64_t closed_at_ = -1;   // first token after "</think>"
  int64_t close_from_ = -1;  // the token where "</think>" begins
  size_t scanned_ = 0;       // bytes of text searched for "</think>"
};

}  // namespace coda
