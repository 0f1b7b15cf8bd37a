// Sampling parameters with the names and ranges users know from OpenAI/vLLM, and their validation.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "core/status.h"

namespace coda {

struct SamplingParams {
  float temperature = 1.0f;                       // [0, 2]; 0 = greedy
  int top_k = -1;                                 // -1 or 0: off
  float top_p = 1.0f;                             // (0, 1]
  float min_p = 0.0f;                             // [0, 1]
  float typical_p = 1.0f;                         // (0, 1]
  float repetition_penalty = 1.0f;                // (0, 2]; 1 = off
  int repetition_window = 0;                      // last N tokens of prompt + output; 0 = all
  float frequency_penalty = 0.0f;                 // [-2, 2]
  float presence_penalty = 0.0f;                  // [-2, 2]
  std::unordered_map<int32_t, float> logit_bias;  // token -> [-100, 100]
  uint64_t seed = 0;

  // Every value in range; errors name the parameter, the value and what is allowed.
  Status validate(int32_t n_vocab) const;
};

}  // namespace coda
