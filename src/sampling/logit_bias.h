// Logit bias (OpenAI): add a per-token bias; -100 effectively bans a token, +100 forces it.
#pragma once

#include <unordered_map>

#include "sampling/processor.h"

namespace coda {

class LogitBias : public Processor {
 public:
  explicit LogitBias(std::unordered_map<int32_t, float> bias) : bias_(std::move(bias)) {}
  const char* name() const override { return "logit_bias"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    if (bias_.empty()) return;
    if (c.identity) {
      for (const auto& [t, b] : bias_)
        if (t >= 0 && static_cast<size_t>(t) < c.size()) c.logits[static_cast<size_t>(t)] += b;
      return;
    }
    for (size_t i = 0; i < c.size(); ++i) {
      auto it = bias_.find(c.ids[i]);
      if (it != bias_.end()) c.logits[i] += it->second;
    }
  }

 private:
  std::unordered_map<int32_t, float> bias_;
};

}  // namespace coda
