// Top-p / nucleus (HF/vLLM): keep the smallest set of most probable tokens whose probability
// reaches p (the token that crosses p is kept); p = 1 keeps everything.
#pragma once

#include "sampling/processor.h"

namespace coda {

class TopP : public Processor {
 public:
  explicit TopP(float p) : p_(p) {}
  const char* name() const override { return "top_p"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    if (p_ >= 1.0f || c.size() <= 1) return;
    // Usually the nucleus is a few hundred tokens: select the top 1,024 (then 8,192) first and
    // sort only those when they already hold mass p; fall back to a full sort otherwise.
    for (size_t window : {size_t{1024}, size_t{8192}}) {
      if (c.sorted || !c.identity || c.size() <= 4 * window) break;
      const std::vector<float> all = c.probs();
      Candidates top = c;
      top.keep_top(window);
      double mass = 0;
      for (int32_t id : top.ids) mass += all[static_cast<size_t>(id)];  // identity: ids index `all`
      if (mass >= p_) {
        // Renormalisation does not change the order; cut where the cumulative mass reaches p.
        double cum = 0;
        size_t keep = top.size();
        for (size_t i = 0; i < top.size(); ++i) {
          cum += all[static_cast<size_t>(top.ids[i])];
          if (cum >= p_) {
            keep = i + 1;
            break;
          }
        }
        top.truncate(keep);
        c = std::move(top);
        return;
      }
    }
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
