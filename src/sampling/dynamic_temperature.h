// Dynamic temperature (llama.cpp `--dynatemp-range`, `--dynatemp-exp`): the temperature moves
// within [T - range, T + range] with the normalised entropy of the distribution:
//   T_dyn = T_min + (T_max - T_min) * (H / log N) ^ exponent
// where H is the entropy of the softmax of the current logits over the N candidates. A confident
// distribution is sampled colder, a flat one hotter. Replaces plain temperature when range > 0.
#pragma once

#include <algorithm>
#include <cmath>

#include "sampling/processor.h"

namespace coda {

class DynamicTemperature : public Processor {
 public:
  DynamicTemperature(float temperature, float range, float exponent)
      : min_(std::max(0.0f, temperature - range)), max_(temperature + range), exponent_(exponent) {}
  const char* name() const override { return "dynamic_temperature"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    if (c.size() <= 1) return;
    const std::vector<float> p = c.probs();
    double entropy = 0;
    for (float x : p)
      if (x > 0) entropy -= x * std::log(static_cast<double>(x));
    const double max_entropy = std::log(static_cast<double>(c.size()));
    const double normalized = max_entropy > 0 ? entropy / max_entropy : 0;
    const double t = min_ + (max_ - min_) * std::pow(normalized, static_cast<double>(exponent_));
    if (t <= 0) {  // as cold as it gets: keep only the argmax
      c.keep_top(1);
      return;
    }
    const float inv = static_cast<float>(1.0 / t);
    for (float& l : c.logits) l *= inv;
  }
  // The temperature this processor would apply to the given candidates (tests, the lab).
  float min_temperature() const { return min_; }
  float max_temperature() const { return max_; }

 private:
  float min_, max_, exponent_;
};

}  // namespace coda
