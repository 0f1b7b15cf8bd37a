// The sampler chain: processors applied in a fixed, documented order, then a seeded draw.
//
// Order: allowed_token_ids -> logit_bias -> structured output -> ignore_eos -> min_tokens -> bad_words ->
// no_repeat_ngram -> repetition_penalty -> frequency/presence -> DRY -> [greedy stops here: argmax] -> top_n_sigma ->
// temperature (or dynamic temperature) -> top_k -> top_p -> typical_p -> min_p -> XTC -> draw.
// Masks and penalties come first, so greedy decoding honours them too; temperature comes before
// the truncations (vLLM/HF), so top_p and min_p see the probabilities the draw will use.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "sampling/params.h"
#include "sampling/processor.h"

namespace coda {

class Vocab;
struct GrammarTokens;
struct GrammarProgress;

// What the chain needs to know about the vocabulary beyond its size.
struct SamplerVocab {
  int32_t n_vocab = 0;
  std::vector<int32_t> eos_ids;                    // end of generation: EOS, EOT, end-of-turn tokens
  std::vector<int32_t> stop_ids;                   // the request's stop_token_ids
  std::vector<std::vector<int32_t>> bad_word_ids;  // token sequences of params.bad_words
  std::unordered_set<int32_t> dry_breakers;        // tokens whose text holds a sequence breaker
  std::shared_ptr<const GrammarTokens> grammar_tokens;  // token bytes for structured output
  std::shared_ptr<GrammarProgress> grammar_progress;    // its per-sequence state, shared by the chains

  // From a tokenizer: EOS/EOT plus `more_eos` (a chat template's end-of-turn tokens), the
  // request's `stop_ids` (checked), bad words tokenized with and without a leading space, DRY
  // breakers by scanning the pieces.
  // `grammar_tokens`: the vocabulary's bytes for structured output, if the caller keeps them
  // (Generator::grammar_tokens); built here when a request needs them and none are given.
  static Expected<SamplerVocab> from(const Vocab& vocab, const SamplingParams& p, const std::vector<int32_t>& stop_ids,
                                     const std::vector<int32_t>& more_eos = {},
                                     std::shared_ptr<const GrammarTokens> grammar_tokens = nullptr);
};

class SamplerChain {
 public:
  static Expected<SamplerChain> create(const SamplingParams& p, const SamplerVocab& v);
  static Expected<SamplerChain> create(const SamplingParams& p, int32_t n_vocab) {
    SamplerVocab v;
    v.n_vocab = n_vocab;
    return create(p, v);
  }

  // Picks the next token from raw logits.
  int32_t sample(const float* logits, int32_t n_vocab, const TokenHistory& h, SamplerRng& rng) const;
  // The candidates after every processor (tests, logprobs).
  Candidates shape(const float* logits, int32_t n_vocab, const TokenHistory& h, SamplerRng& rng) const;
  Candidates shape(const float* logits, int32_t n_vocab, const TokenHistory& h) const {
    SamplerRng rng(0);
    return shape(logits, n_vocab, h, rng);
  }
  const std::vector<std::shared_ptr<const Processor>>& processors() const { return processors_; }
  bool greedy() const { return greedy_; }

 private:
  bool greedy_ = false;
  std::vector<std::shared_ptr<const Processor>> processors_;
};

}  // namespace coda
