// Top-p / nucleus (HF/vLLM): keep the smallest set of most probable tokens whose probability
// reaches p (the token that crosses p is kept); p = 1 keeps everything.
#pragma once

#include "sampling/processor.h"

namespace coda {

class TopP : public Processor {
 public:
  explicit TopP(float p) : p_(p) {}
  const char* name() const override { return "top_p"; }
  void apply(Candidates& c, const TokenHistory&) const override {
    if (p_ >= 1.0f || c.size() <= 1) return;
    c.sort();
    const std::vector<float> probs = c.probs();
    double cum = 0;
    size_t keep = c.size();
    for (size_t i = 0; i < probs.size(); ++i) {
      cum += probs[i];
      if (cum >= p_) {
        keep = i + 1;
        break;
      }
    }
    c.truncate(keep);
  }

 private:
  float p_;
};

}  // namespace coda
