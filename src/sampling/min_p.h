// Min-p (llama.cpp/vLLM): drop tokens whose probability is below min_p times the top token's.
#pragma once

#include <algorithm>
#include <cmath>

#include "sampling/processor.h"

namespace coda {

class MinP : public Processor {
 public:
  explicit MinP(float p) : p_(p) {}
  const char* name() const override { return "min_p"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    if (p_ <= 0.0f || c.size() <= 1) return;
    // p_i >= min_p * p_max  <=>  logit_i >= logit_max + ln(min_p): no softmax, no full sort.
    const float max = c.sorted ? c.logits.front() : *std::max_element(c.logits.begin(), c.logits.end());
    if (std::isinf(max)) return;
    c.keep_at_least(max + std::log(p_));
  }

 private:
  float p_;
};

}  // namespace coda
