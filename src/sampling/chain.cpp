#include "sampling/chain.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "sampling/bad_words.h"
#include "sampling/dry.h"
#include "sampling/dynamic_temperature.h"
#include "sampling/frequency_presence.h"
#include "sampling/logit_bias.h"
#include "sampling/min_p.h"
#include "sampling/no_repeat_ngram.h"
#include "sampling/repetition_penalty.h"
#include "sampling/structured_output.h"
#include "sampling/temperature.h"
#include "sampling/token_masks.h"
#include "sampling/top_k.h"
#include "sampling/top_n_sigma.h"
#include "sampling/top_p.h"
#include "sampling/typical_p.h"
#include "sampling/xtc.h"
#include "tokenizer/vocab.h"

namespace coda {

double SamplerRng::uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

Expected<SamplerVocab> SamplerVocab::from(const Vocab& vocab, const SamplingParams& p,
                                          const std::vector<int32_t>& stop_ids, const std::vector<int32_t>& more_eos,
                                          std::shared_ptr<const GrammarTokens> grammar_tokens) {
  SamplerVocab v;
  v.n_vocab = vocab.size();
  for (int32_t id : {vocab.eos(), vocab.eot()})
    if (id >= 0) v.eos_ids.push_back(id);
  for (int32_t id : more_eos)
    if (id >= 0 && id < v.n_vocab && std::find(v.eos_ids.begin(), v.eos_ids.end(), id) == v.eos_ids.end())
      v.eos_ids.push_back(id);
  for (int32_t id : stop_ids) {
    if (id < 0 || id >= v.n_vocab)
      return Error("stop_token_ids: " + std::to_string(id) + " is out of range; allowed 0.." +
                   std::to_string(v.n_vocab - 1));
    v.stop_ids.push_back(id);
  }
  for (const auto& word : p.bad_words) {
    for (const std::string& text : {word, " " + word}) {
      auto ids = vocab.encode(text, false);
      if (!ids) return Error("bad_words: " + ids.message());
      if (!ids->empty() && std::find(v.bad_word_ids.begin(), v.bad_word_ids.end(), *ids) == v.bad_word_ids.end())
        v.bad_word_ids.push_back(*ids);
    }
  }
  if (p.grammar) {
    v.grammar_tokens = grammar_tokens ? std::move(grammar_tokens) : GrammarTokens::build(vocab);
    v.grammar_progress = std::make_shared<GrammarProgress>();
  }
  if (p.dry_multiplier > 0) {
    for (int32_t id = 0; id < v.n_vocab; ++id) {
      const std::string text = vocab.token_bytes(id);
      for (const auto& b : p.dry_sequence_breakers) {
        if (text.find(b) != std::string::npos) {
          v.dry_breakers.insert(id);
          break;
        }
      }
    }
  }
  return v;
}

Expected<SamplerChain> SamplerChain::create(const SamplingParams& p, const SamplerVocab& v) {
  CODA_RETURN_IF_ERROR(p.validate(v.n_vocab));
  SamplerChain c;
  c.greedy_ = p.temperature == 0.0f;
  auto add = [&](auto proc) { c.processors_.push_back(std::make_shared<decltype(proc)>(std::move(proc))); };
  if (!p.allowed_token_ids.empty()) add(AllowedTokens(p.allowed_token_ids, v.n_vocab));
  if (!p.logit_bias.empty()) add(LogitBias(p.logit_bias));
  // After logit_bias, so no bias can push a token the format rejects.
  if (p.grammar) {
    if (!v.grammar_tokens) return Error("structured output needs the vocabulary's token bytes (SamplerVocab::from)");
    std::vector<int32_t> ends = v.eos_ids;
    ends.insert(ends.end(), v.stop_ids.begin(), v.stop_ids.end());
    add(StructuredOutput(p.grammar, v.grammar_tokens, std::move(ends), v.grammar_progress));
  }
  if (p.ignore_eos && !v.eos_ids.empty()) add(IgnoreEos(v.eos_ids));
  if (p.min_tokens > 0) {
    std::vector<int32_t> ends = v.stop_ids;
    if (!p.ignore_eos) ends.insert(ends.end(), v.eos_ids.begin(), v.eos_ids.end());
    if (!ends.empty()) add(MinTokens(p.min_tokens, ends));
  }
  if (!v.bad_word_ids.empty()) add(BadWords(v.bad_word_ids));
  if (p.no_repeat_ngram_size > 0) add(NoRepeatNgram(p.no_repeat_ngram_size));
  if (p.repetition_penalty != 1.0f) add(RepetitionPenalty(p.repetition_penalty, p.repetition_window));
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
    add(FrequencyPresencePenalty(p.frequency_penalty, p.presence_penalty));
  if (p.dry_multiplier > 0.0f)
    add(Dry(p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_window, v.dry_breakers));
  if (c.greedy_) return c;  // truncations and temperature cannot change the argmax
  if (p.top_n_sigma > 0.0f) add(TopNSigma(p.top_n_sigma));
  if (p.dynatemp_range > 0.0f) {
    add(DynamicTemperature(p.temperature, p.dynatemp_range, p.dynatemp_exponent));
  } else if (p.temperature != 1.0f) {
    add(Temperature(p.temperature));
  }
  if (p.top_k > 0) add(TopK(p.top_k));
  if (p.top_p < 1.0f) add(TopP(p.top_p));
  if (p.typical_p < 1.0f) add(TypicalP(p.typical_p));
  if (p.min_p > 0.0f) add(MinP(p.min_p));
  if (p.xtc_probability > 0.0f) add(Xtc(p.xtc_probability, p.xtc_threshold));
  return c;
}

Candidates SamplerChain::shape(const float* logits, int32_t n_vocab, const TokenHistory& h, SamplerRng& rng) const {
  Candidates c;
  c.assign(logits, n_vocab);
  for (const auto& proc : processors_) proc->apply(c, h, rng);
  return c;
}

int32_t SamplerChain::sample(const float* logits, int32_t n_vocab, const TokenHistory& h, SamplerRng& rng) const {
  const KernelTable& k = kernels();
  if (greedy_ && processors_.empty()) {  // plain argmax: no copy of the vocabulary
    const float max = k.max_f32(logits, n_vocab);
    int32_t best = 0;
    while (best + 1 < n_vocab && logits[best] != max) ++best;  // the first (lowest id) maximum
    return best;
  }
  // Scratch reused across steps: a vocabulary-sized allocation per token would cost page faults.
  thread_local Candidates c;
  thread_local std::vector<float> weights;
  c.assign(logits, n_vocab);
  for (const auto& proc : processors_) proc->apply(c, h, rng);
  if (greedy_) {
    size_t best = 0;
    for (size_t i = 1; i < c.size(); ++i)
      if (c.logits[i] > c.logits[best] || (c.logits[i] == c.logits[best] && c.ids[i] < c.ids[best])) best = i;
    return c.ids[best];
  }
  const size_t n = c.size();
  const float max = c.sorted ? c.logits.front() : k.max_f32(c.logits.data(), static_cast<int64_t>(n));
  if (std::isinf(max) && max < 0) {  // everything masked: uniform over what is left
    return c.ids[std::min(n - 1, static_cast<size_t>(rng.uniform() * static_cast<double>(n)))];
  }
  weights.resize(n);
  const float sum = k.exp_sum(c.logits.data(), weights.data(), static_cast<int64_t>(n), max);
  // The draw against unnormalised weights (u * sum), skipping whole blocks by their sums so a
  // 128K vocabulary is not one long chain of dependent subtractions.
  double u = rng.uniform() * static_cast<double>(sum);
  constexpr size_t kBlock = 512;
  size_t i = 0;
  for (; i + kBlock < n; i += kBlock) {
    const float block = k.sum_f32(weights.data() + i, kBlock);
    if (u < block) break;
    u -= block;
  }
  for (; i < n; ++i) {
    u -= weights[i];
    if (u < 0) return c.ids[i];
  }
  // Rounding left a sliver: the last candidate with non-zero weight.
  for (size_t i = n; i-- > 0;)
    if (weights[i] > 0) return c.ids[i];
  return c.ids.front();
}

}  // namespace coda
