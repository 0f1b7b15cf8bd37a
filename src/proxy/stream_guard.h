// The guard over an upstream's stream. The proxy sees text deltas and, when the upstream sends
// them, each token's text with its logprob and top-k alternatives. The guard's detectors work on
// token ids, so each token's text gets a stable id for this request; loops show as the same ids
// coming back, whatever the upstream's vocabulary. Without logprobs (an upstream that refuses
// them), the text is cut into word-sized pieces (a word with its leading space, up to three digits
// of a number, one punctuation mark, a run of whitespace) and the pieces stand in for tokens: the loop detectors
// still see the repetition, and the detectors that need a distribution stay quiet.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/openai_client.h"
#include "guard/guard.h"

namespace coda::proxy {

// Cuts text into pieces as it streams in; the last piece is held until the text after it shows it
// is complete (or finish()).
class TextPieces {
 public:
  void feed(const std::string& text, std::vector<std::string>& out);
  void finish(std::vector<std::string>& out);
  void clear() { pending_.clear(); }
  const std::string& pending() const { return pending_; }

 private:
  std::string pending_;
};

// One generation seen by the guard: accepted text, its units (tokens or pieces) and what the guard
// asked for. Units are counted from the start of the generation across repairs.
class StreamGuard {
 public:
  // `client_top_logprobs`: how many alternatives per token the client asked for, kept to hand back
  // with the text; < 0 when it asked for no logprobs. The upstream is asked for more (the guard's
  // signals), and those are used as they arrive and not kept: at 20 alternatives a token they cost
  // about 2 KB a token, 250 MB for one 128k-token generation.
  StreamGuard(const GuardConfig& config, const std::string& prompt_text, int client_top_logprobs = -1);

  // Feeds one streamed delta. `logprobs` are the delta's tokens when the upstream sent them. Stops
  // at the first step whose verdict asks for something (stop or repair) and returns it; what came
  // after that step in this delta is dropped (the caller cancels the upstream anyway).
  StepVerdict feed(const std::string& text, const std::vector<client::TokenLogprob>& logprobs);
  // The end of the upstream's stream: the held piece becomes a unit.
  StepVerdict finish();
  // Back to the first `keep` units (never fewer than `floor`); a held piece is dropped. Returns the
  // units kept.
  size_t rollback(size_t keep, size_t floor);

  // Accepted text: the units' text, then the piece not yet complete (text mode).
  std::string text() const { return text_ + pieces_.pending(); }
  size_t text_size() const { return text_.size() + pieces_.pending().size(); }
  // Bytes [from, to) of text() without copying the rest.
  std::string slice(size_t from, size_t to) const;
  size_t units() const { return ends_.size(); }
  size_t text_end(size_t units) const { return units == 0 ? 0 : ends_[units - 1]; }
  // The logprobs of the units in [from, to) that came with them (tokens, not pieces), for the client,
  // with at most client_top_logprobs alternatives each; none when the client asked for none.
  std::vector<client::TokenLogprob> logprobs(size_t from, size_t to) const;
  bool text_only() const { return text_only_; }  // some units were pieces, not tokens
  // The generation's length in the upstream's tokens: a token unit counts 1, a text piece
  // kTokensPerPiece, and the upstream's own count replaces the estimate whenever it reports one
  // (vLLM's continuous_usage_stats, llama.cpp's timings). `runaway` measures this.
  int64_t tokens() const;
  // A new upstream request begins (a repair's or a hot stretch's continuation): its counts start
  // from the units accepted so far.
  void begin_segment() { segment_units_ = units(); }
  // The upstream's count of tokens generated in this request so far.
  void upstream_count(int64_t completion_tokens);
  // Llama 3's tokenizer on Debian's texts (bench/guard_realtext.py): 0.78 (tables) to 1.0 (prose)
  // tokens per piece. The low side, so that an estimate never cuts a legitimate answer early.
  static constexpr double kTokensPerPiece = 0.85;
  GuardReport report() const { return guard_.report(); }
  const std::vector<nlohmann::ordered_json>& trace() const { return guard_.trace(); }  // with config.trace
  void stop_instead_of_repair() { guard_.stop_instead_of_repair(); }
  // Where the upstream's reasoning is (its own field): the next units are thinking or answer.
  void set_thinking(bool inside) { guard_.set_thinking(inside); }
  // Units to hold from the client now (while thinking, when a loop there may still be dropped).
  size_t hold_back() const { return static_cast<size_t>(std::max<int64_t>(0, guard_.hold_back())); }

 private:
  StepVerdict step(const std::string& unit, const StepSignals* signals, const client::TokenLogprob* lp);
  int32_t id_of(const std::string& unit);

  Guard guard_;
  std::unordered_map<std::string, int32_t> ids_;
  std::string text_;
  std::vector<size_t> ends_;     // byte offset after each unit
  std::vector<double> lengths_;  // tokens up to and including each unit
  size_t segment_units_ = 0;
  int client_top_ = -1;
  std::vector<client::TokenLogprob> logprobs_;  // per unit, only when client_top_ >= 0
  std::vector<bool> has_logprob_;               // false for text pieces
  TextPieces pieces_;
  bool text_only_ = false;
};

// The EOS strings the Llama family's servers show in top logprobs.
bool is_eos_text(const std::string& token);

}  // namespace coda::proxy
