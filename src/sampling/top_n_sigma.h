// Top-n-sigma (llama.cpp, "Top-nσ: Not All Logits Are You Need"): keep the tokens whose logit is
// within n standard deviations of the largest, the deviation taken over the finite logits. Scaling
// by a temperature scales both sides, so its place relative to temperature does not matter.
#pragma once

#include <cmath>

#include "sampling/processor.h"

namespace coda {

class TopNSigma : public Processor {
 public:
  explicit TopNSigma(float n) : n_(n) {}
  const char* name() const override { return "top_n_sigma"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    if (n_ <= 0 || c.size() <= 1) return;
    double sum = 0, sq = 0, max = -INFINITY;
    size_t finite = 0;
    for (float l : c.logits) {
      if (!std::isfinite(l)) continue;
      sum += l;
      sq += static_cast<double>(l) * l;
      max = std::max(max, static_cast<double>(l));
      ++finite;
    }
    if (finite == 0) return;
    const double mean = sum / static_cast<double>(finite);
    const double sigma = std::sqrt(std::max(0.0, sq / static_cast<double>(finite) - mean * mean));
    c.keep_at_least(static_cast<float>(max - n_ * sigma));
  }

 private:
  float n_;
};

}  // namespace coda
