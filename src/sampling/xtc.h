// XTC, "exclude top choices" (llama.cpp/text-generation-webui): with probability `probability`,
// when at least two tokens have probability >= `threshold`, remove all of them except the least
// probable one, pushing the text off its most predictable path without leaving the plausible set.
#pragma once

#include "sampling/processor.h"

namespace coda {

class Xtc : public Processor {
 public:
  Xtc(float probability, float threshold) : probability_(probability), threshold_(threshold) {}
  const char* name() const override { return "xtc"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng& rng) const override {
    if (probability_ <= 0 || c.size() < 2) return;
    if (rng.uniform() >= probability_) return;  // the draw is made every step, so seeds stay aligned
    c.sort();
    const std::vector<float> p = c.probs();
    size_t above = 0;
    while (above < p.size() && p[above] >= threshold_) ++above;
    if (above < 2) return;
    std::vector<size_t> keep;
    for (size_t i = above - 1; i < c.size(); ++i) keep.push_back(i);
    c.take(keep);
  }

 private:
  float probability_;
  float threshold_;
};

}  // namespace coda
