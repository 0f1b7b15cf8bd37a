// One generation as a resumable state machine, so a scheduler can run many of them through
// batched forward passes. A Sequence never calls the model: it says which tokens must run next
// (`pending()`: a prefill chunk, the last sampled token, or the token before a rollback point),
// and `advance()` continues once the caller has run them into `kv()` with logits in `logits()`.
//
//   auto seq = Sequence::create(gen, request, on_chunk, observer);
//   while (!seq->done()) { run seq->pending() into seq->kv(), logits to seq->logits(); seq->advance(); }
//   auto result = seq->finish();
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/timer.h"
#include "engine/prefix_cache.h"
#include "engine/prompt.h"
#include "engine/request.h"
#include "engine/stop_matcher.h"
#include "model/kv_cache.h"
#include "sampling/chain.h"
#include "tokenizer/vocab.h"

namespace coda {

class Generator;

class Sequence {
 public:
  // Checks the request, renders and tokenizes the prompt, allocates the KV cache (prompt +
  // max_tokens). `prefill_chunk` bounds how many prompt tokens pending() asks for at once.
  // With a prefix cache, the longest cached prefix of the prompt is copied in instead of prefilled.
  static Expected<std::unique_ptr<Sequence>> create(const Generator& gen, const GenerationRequest& r,
                                                    StreamCallback on_chunk, StepObserver* observer,
                                                    int64_t prefill_chunk = 1 << 30, PrefixCache* cache = nullptr);

  bool done() const { return done_; }
  bool prefilling() const { return prefilled_ < static_cast<int64_t>(history_.prompt.size()); }
  // Tokens to run next, at positions kv().size()...; logits are needed after them.
  const std::vector<int32_t>& pending() const { return pending_; }
  KvCache& kv() { return kv_; }
  const KvCache& kv() const { return kv_; }
  // Whether logits() wants the logits of every pending token (n x n_vocab, row by row) instead of
  // the last one's: while the prompt runs for a request with prompt logprobs.
  bool all_logits() const { return req_.prompt_logprobs >= 0 && prefilling(); }
  // An embedding request wants no logits (null) but every prompt token's final hidden state.
  float* logits() { return embedding() ? nullptr : all_logits() ? prompt_logits_.data() : logits_.data(); }
  float* hidden() { return embedding() && prefilling() ? hidden_.data() : nullptr; }
  bool embedding() const { return req_.pooling != Pooling::None; }
  // The caller ran pending() (an error from the model ends the sequence with that error).
  void advance(Status model_status = Status::Ok());
  // Stops at the next opportunity with finish_reason "abort" (a client went away).
  void cancel();
  // The result (after done()).
  Expected<GenerationResult> finish();
  int64_t tokens_in_cache() const { return kv_.size(); }
  int64_t prompt_tokens() const { return static_cast<int64_t>(history_.prompt.size()); }
  // Prompt tokens in the cache so far (prefilled or copied from the prefix cache).
  int64_t prefilled_tokens() const { return prefilled_; }
  int64_t generated_tokens() const { return static_cast<int64_t>(history_.generated.size()); }
  // The most tokens this sequence may generate (the request's max_tokens within the context).
  int max_tokens() const { return max_tokens_; }
  const GenerationRequest& request() const { return req_; }
  // Prompt tokens whose KV was copied from the prefix cache at creation.
  int64_t cached_prompt_tokens() const { return res_.cached_tokens; }
  // The tokens at the cache's positions 0 .. kv().size() - 1 (prompt, then generated tokens).
  std::vector<int32_t> cached_token_ids() const;

 private:
  Sequence(const GenerationRequest& r, const Vocab& v, KvCache kv, SamplerChain chain, SamplerVocab sv);
  void step();  // sample one token from logits() and decide what comes next
  void rollback(int64_t keep);
  void end(std::string reason);

  GenerationRequest req_;
  const Vocab& vocab_;
  KvCache kv_;
  SamplerChain chain_;
  SamplerVocab sv_;
  SamplerRng rng_;
  StreamCallback on_chunk_;
  size_t logprobs_streamed_ = 0;  // res_.logprobs already handed to on_chunk_
  std::vector<TokenLogprob> streamed_logprobs(bool all);
  StepObserver* observer_ = nullptr;
  int max_tokens_ = 0;
  int64_t prefill_chunk_ = 0;
  int64_t prefilled_ = 0;
  std::vector<float> logits_;
  std::vector<float> prompt_logits_;  // prompt logprobs: one prefill chunk's rows of logits
  std::vector<float> hidden_;         // an embedding request: one prefill chunk's hidden states
  std::vector<double> pooled_;        // and what pooling has gathered from them so far
  void pool_hidden();                 // after a prefill chunk; the last one finishes the vector
  std::vector<int32_t> pending_;
  TokenHistory history_;
  std::optional<StreamDecoder> decoder_;
  StopMatcher stops_;
  std::vector<size_t> text_after_;  // completion text length after each generated token
  std::optional<RepairAction> boost_;
  std::vector<int32_t> forced_;  // tokens to write next instead of sampling (ForcedText)
  size_t forced_at_ = 0;
  int64_t ban_end_for_ = 0;  // sampled tokens left during which the end of generation is banned
  float boost_factor_ = 1.0f;
  int64_t max_steps_ = 0;
  bool done_ = false;
  bool cancelled_ = false;
  std::optional<Error> error_;
  GenerationResult res_;
  Timer request_timer_, phase_timer_;
  int decode_steps_ = 0;
};

}  // namespace coda
