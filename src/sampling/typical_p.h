// Locally typical sampling (HF `typical_p`): order tokens by |surprisal - entropy| and keep the
// most typical ones until their probability mass reaches p.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sampling/processor.h"

namespace coda {

class TypicalP : public Processor {
 public:
  explicit TypicalP(float p) : p_(p) {}
  const char* name() const override { return "typical_p"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    if (p_ >= 1.0f || c.size() <= 1) return;
    const std::vector<float> probs = c.probs();
    double entropy = 0;
    for (float p : probs)
      if (p > 0) entropy -= p * std::log(static_cast<double>(p));
    std::vector<size_t> order(probs.size());
    std::iota(order.begin(), order.end(), size_t{0});
    auto shift = [&](size_t i) {
      return probs[i] > 0 ? std::fabs(-std::log(static_cast<double>(probs[i])) - entropy) : INFINITY;
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return shift(a) < shift(b); });
    double cum = 0;
    size_t keep = order.size();
    for (size_t i = 0; i < order.size(); ++i) {
      cum += probs[order[i]];
      if (cum >= p_) {
        keep = i + 1;
        break;
      }
    }
    Candidates out;
    for (size_t i = 0; i < keep; ++i) {
      out.ids.push_back(c.ids[order[i]]);
      out.logits.push_back(c.logits[order[i]]);
    }
    c = std::move(out);
  }

 private:
  float p_;
};

}  // namespace coda
