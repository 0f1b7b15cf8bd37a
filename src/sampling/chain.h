// The sampler chain: processors applied in a fixed, documented order, then a seeded draw.
//
// Order (vLLM/HF): logit_bias -> repetition_penalty -> frequency/presence penalties ->
// temperature -> top_k -> top_p -> typical_p -> min_p -> draw. Temperature comes before the
// truncations, so top_p and min_p see the probabilities the draw will use. temperature = 0 is
// greedy: the argmax after bias and penalties.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "sampling/params.h"
#include "sampling/processor.h"

namespace coda {

// Seeded generator owned by one request, so a seed reproduces a request whatever else runs.
class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed) : state_(seed) {}
  // Uniform in [0, 1) with 53 random bits (splitmix64: same sequence on every platform).
  double uniform();

 private:
  uint64_t state_;
};

class SamplerChain {
 public:
  static Expected<SamplerChain> create(const SamplingParams& p, int32_t n_vocab);

  // Picks the next token from raw logits.
  int32_t sample(const float* logits, int32_t n_vocab, const TokenHistory& h, SamplerRng& rng) const;
  // The candidates after every processor (tests, logprobs).
  Candidates shape(const float* logits, int32_t n_vocab, const TokenHistory& h) const;
  const std::vector<std::shared_ptr<const Processor>>& processors() const { return processors_; }

 private:
  bool greedy_ = false;
  std::vector<std::shared_ptr<const Processor>> processors_;
};

}  // namespace coda
