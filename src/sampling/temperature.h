// Temperature (all engines): logits / T. T = 0 means greedy and is handled by the chain.
#pragma once

#include "sampling/processor.h"

namespace coda {

class Temperature : public Processor {
 public:
  explicit Temperature(float t) : t_(t) {}
  const char* name() const override { return "temperature"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    // Multiplying by 1/T (within an ulp of dividing) lets the compiler vectorize the loop.
    const float inv = 1.0f / t_;
    for (float& l : c.logits) l *= inv;
  }

 private:
  float t_;
};

}  // namespace coda
