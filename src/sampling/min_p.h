// Min-p (llama.cpp/vLLM): drop tokens whose probability is below min_p times the top token's.
#pragma once

#include "sampling/processor.h"

namespace coda {

class MinP : public Processor {
 public:
  explicit MinP(float p) : p_(p) {}
  const char* name() const override { return "min_p"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    if (p_ <= 0.0f || c.size() <= 1) return;
    c.sort();
    const std::vector<float> probs = c.probs();
    const float threshold = probs[0] * p_;
    size_t keep = 1;
    while (keep < probs.size() && probs[keep] >= threshold) ++keep;
    c.truncate(keep);
  }

 private:
  float p_;
};

}  // namespace coda
