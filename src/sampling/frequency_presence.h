// Frequency and presence penalties (OpenAI): over the generated tokens only,
// logit -= frequency * count(token) + presence * (count(token) > 0).
#pragma once

#include <unordered_map>

#include "sampling/processor.h"

namespace coda {

class FrequencyPresencePenalty : public Processor {
 public:
  FrequencyPresencePenalty(float frequency, float presence) : frequency_(frequency), presence_(presence) {}
  const char* name() const override { return "frequency_presence"; }
  void apply(Candidates& c, const TokenHistory& h, SamplerRng&) const override {
    if (frequency_ == 0.0f && presence_ == 0.0f) return;
    std::unordered_map<int32_t, int> count;
    for (int32_t t : h.generated) ++count[t];
    if (c.identity) {  // O(history)
      for (const auto& [t, n] : count)
        if (t >= 0 && static_cast<size_t>(t) < c.size())
          c.logits[static_cast<size_t>(t)] -= frequency_ * static_cast<float>(n) + presence_;
      return;
    }
    for (size_t i = 0; i < c.size(); ++i) {
      auto it = count.find(c.ids[i]);
      if (it != count.end()) c.logits[i] -= frequency_ * static_cast<float>(it->second) + presence_;
    }
  }

 private:
  float frequency_, presence_;
};

}  // namespace coda
