#include "sampling/chain.h"

#include <algorithm>

#include "sampling/frequency_presence.h"
#include "sampling/logit_bias.h"
#include "sampling/min_p.h"
#include "sampling/repetition_penalty.h"
#include "sampling/temperature.h"
#include "sampling/top_k.h"
#include "sampling/top_p.h"
#include "sampling/typical_p.h"

namespace coda {

double SamplerRng::uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

Expected<SamplerChain> SamplerChain::create(const SamplingParams& p, int32_t n_vocab) {
  CODA_RETURN_IF_ERROR(p.validate(n_vocab));
  SamplerChain c;
  c.greedy_ = p.temperature == 0.0f;
  auto add = [&](auto proc) { c.processors_.push_back(std::make_shared<decltype(proc)>(std::move(proc))); };
  if (!p.logit_bias.empty()) add(LogitBias(p.logit_bias));
  if (p.repetition_penalty != 1.0f) add(RepetitionPenalty(p.repetition_penalty, p.repetition_window));
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
    add(FrequencyPresencePenalty(p.frequency_penalty, p.presence_penalty));
  if (c.greedy_) return c;  // truncations cannot change the argmax
  if (p.temperature != 1.0f) add(Temperature(p.temperature));
  if (p.top_k > 0) add(TopK(p.top_k));
  if (p.top_p < 1.0f) add(TopP(p.top_p));
  if (p.typical_p < 1.0f) add(TypicalP(p.typical_p));
  if (p.min_p > 0.0f) add(MinP(p.min_p));
  return c;
}

Candidates SamplerChain::shape(const float* logits, int32_t n_vocab, const TokenHistory& h) const {
  Candidates c;
  c.assign(logits, n_vocab);
  for (const auto& proc : processors_) proc->apply(c, h);
  return c;
}

int32_t SamplerChain::sample(const float* logits, int32_t n_vocab, const TokenHistory& h, SamplerRng& rng) const {
  if (greedy_ && processors_.empty()) {  // plain argmax: no copy of the vocabulary
    int32_t best = 0;
    float best_logit = logits[0];
    for (int32_t i = 1; i < n_vocab; ++i) {
      if (logits[i] > best_logit) {
        best_logit = logits[i];
        best = i;
      }
    }
    return best;
  }
  const Candidates c = shape(logits, n_vocab, h);
  if (greedy_) {
    size_t best = 0;
    for (size_t i = 1; i < c.size(); ++i)
      if (c.logits[i] > c.logits[best] || (c.logits[i] == c.logits[best] && c.ids[i] < c.ids[best])) best = i;
    return c.ids[best];
  }
  const std::vector<float> probs = c.probs();
  double u = rng.uniform();
  for (size_t i = 0; i < probs.size(); ++i) {
    u -= probs[i];
    if (u < 0) return c.ids[i];
  }
  // Rounding left a sliver: the last candidate with non-zero probability.
  for (size_t i = probs.size(); i-- > 0;)
    if (probs[i] > 0) return c.ids[i];
  return c.ids.front();
}

}  // namespace coda
