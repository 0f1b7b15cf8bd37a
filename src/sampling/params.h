// Sampling parameters with the names and ranges users know from OpenAI/vLLM, and their validation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace coda {

class OutputGrammar;

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
  // vLLM's allowed_token_ids: only these tokens may be sampled (end-of-generation ones included,
  // as in vLLM: without them a generation runs to its length limit); empty: every token.
  std::vector<int32_t> allowed_token_ids;
  float top_n_sigma = 0.0f;                       // [-1, 100]; <= 0: off
  float dynatemp_range = 0.0f;                    // [0, 5]; 0: plain temperature
  float dynatemp_exponent = 1.0f;                 // (0, 10]
  float dry_multiplier = 0.0f;                    // [0, 10]; 0: off
  float dry_base = 1.75f;                         // (1, 10]
  int dry_allowed_length = 2;                     // [1, 1000]
  int dry_window = 0;                             // last N tokens; 0 = all
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
  float xtc_probability = 0.0f;  // [0, 1]; 0: off
  float xtc_threshold = 0.1f;    // [0, 1]
  int no_repeat_ngram_size = 0;  // >= 0; 0: off
  int min_tokens = 0;            // >= 0
  bool ignore_eos = false;
  std::vector<std::string> bad_words;  // each non-empty
  uint64_t seed = 0;
  // Structured output (response_format, guided_json, guided_choice): the format every token must
  // keep the text in; null: free text.
  std::shared_ptr<const OutputGrammar> grammar;

  // Every value in range; errors name the parameter, the value and what is allowed.
  Status validate(int32_t n_vocab) const;
};

}  // namespace coda
