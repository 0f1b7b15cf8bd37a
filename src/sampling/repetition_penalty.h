// Repetition penalty (HF/vLLM): for every token seen in the prompt or the output (optionally only
// the last `window` tokens), divide a positive logit by the penalty and multiply a negative one.
#pragma once

#include <unordered_set>

#include "sampling/processor.h"

namespace coda {

class RepetitionPenalty : public Processor {
 public:
  RepetitionPenalty(float penalty, int window) : penalty_(penalty), window_(window) {}
  const char* name() const override { return "repetition_penalty"; }
  void apply(Candidates& c, const TokenHistory& h, SamplerRng&) const override {
    if (penalty_ == 1.0f) return;
    std::unordered_set<int32_t> seen;
    const size_t total = h.prompt.size() + h.generated.size();
    const size_t from = window_ > 0 && static_cast<size_t>(window_) < total ? total - static_cast<size_t>(window_) : 0;
    for (size_t i = from; i < total; ++i)
      seen.insert(i < h.prompt.size() ? h.prompt[i] : h.generated[i - h.prompt.size()]);
    auto penalise = [&](float& l) { l = l > 0 ? l / penalty_ : l * penalty_; };
    if (c.identity) {  // O(history): touch only the seen tokens
      for (int32_t t : seen)
        if (t >= 0 && static_cast<size_t>(t) < c.size()) penalise(c.logits[static_cast<size_t>(t)]);
      return;
    }
    for (size_t i = 0; i < c.size(); ++i)
      if (seen.count(c.ids[i]) != 0) penalise(c.logits[i]);
  }

 private:
  float penalty_;
  int window_;  // 0: everything
};

}  // namespace coda
