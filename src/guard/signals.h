// Per-step signals of the next-token distribution, computed from the raw logits in a few SIMD
// passes over the vocabulary (max, softmax moments, a count, a second max).
#pragma once

#include <cstdint>
#include <vector>

namespace coda {

struct StepSignals {
  float entropy = 0;      // nats: -sum p ln p
  float varentropy = 0;   // variance of -ln p under p
  float surprisal = 0;    // -ln p(chosen)
  float eos_prob = 0;     // total probability of the end-of-generation tokens
  int32_t eos_rank = -1;  // 0 if an EOS token is the most probable; -1 if there is none
  float top1_prob = 0;
  float top1_margin = 0;  // p(top 1) - p(top 2)
};

StepSignals step_signals(const float* logits, int32_t n_vocab, int32_t chosen, const std::vector<int32_t>& eos_ids);

}  // namespace coda
