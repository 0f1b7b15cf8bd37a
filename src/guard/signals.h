// Per-step signals of the next-token distribution, computed from the raw logits in a few SIMD
// passes over the vocabulary (max, softmax moments, a count, a second max).
#pragma once

#include <cstdint>
#include <optional>
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

// The same signals estimated from what an OpenAI-compatible server shows: the chosen token's
// logprob and the top-k logprobs (any order; at most 20 from vLLM and OpenAI). The mass the top k
// leave unseen is counted as if spread over tokens each as likely as the least likely one seen:
// every unseen token is at most that likely, so its share of the entropy is at least
// -m ln p_min, and the estimate is a lower bound of the true entropy (exact when the top k hold
// everything). `eos_logprob` is the EOS token's logprob when it is among the top k; otherwise
// its probability is bounded by p_min and reported as that bound.
StepSignals top_k_signals(double chosen_logprob, const std::vector<double>& top_logprobs,
                          std::optional<double> eos_logprob);

}  // namespace coda
