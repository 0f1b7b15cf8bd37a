// Top-k (HF/vLLM/llama.cpp): keep the k highest logits; k <= 0 or k >= size keeps everything.
#pragma once

#include "sampling/processor.h"

namespace coda {

class TopK : public Processor {
 public:
  explicit TopK(int k) : k_(k) {}
  const char* name() const override { return "top_k"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    if (k_ <= 0 || static_cast<size_t>(k_) >= c.size()) return;
    c.keep_top(static_cast<size_t>(k_));
  }

 private:
  int k_;
};

}  // namespace coda
