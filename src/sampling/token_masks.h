// Token masks that hold even under greedy decoding:
//  - MinTokens (vLLM `min_tokens`): end-of-generation and stop ids get -inf until `min_tokens`
//    tokens have been generated.
//  - AllowedTokens (vLLM `allowed_token_ids`): every token outside the list gets -inf.
//  - IgnoreEos (llama.cpp `--ignore-eos`, vLLM `ignore_eos`): end-of-generation ids never win, so
//    a run goes to its length limit (benchmarks) without emitting end-of-turn text.
#pragma once

#include <limits>
#include <vector>

#include "sampling/processor.h"

namespace coda {

class MinTokens : public Processor {
 public:
  MinTokens(int min_tokens, std::vector<int32_t> ids) : min_(min_tokens), ids_(std::move(ids)) {}
  const char* name() const override { return "min_tokens"; }
  void apply(Candidates& c, const TokenHistory& h, SamplerRng&) const override {
    if (static_cast<int64_t>(h.generated.size()) >= min_) return;
    for (int32_t id : ids_)
      if (float* l = c.logit_of(id)) *l = -std::numeric_limits<float>::infinity();
  }

 private:
  int min_;
  std::vector<int32_t> ids_;
};

class AllowedTokens : public Processor {
 public:
  AllowedTokens(const std::vector<int32_t>& ids, int32_t n_vocab) : allowed_(static_cast<size_t>(n_vocab), 0) {
    for (int32_t id : ids) allowed_[static_cast<size_t>(id)] = 1;  // ids are checked by SamplingParams::validate
  }
  const char* name() const override { return "allowed_token_ids"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    for (size_t i = 0; i < c.size(); ++i) {
      const auto id = static_cast<size_t>(c.ids[i]);
      if (id >= allowed_.size() || !allowed_[id]) c.logits[i] = -std::numeric_limits<float>::infinity();
    }
  }

 private:
  std::vector<char> allowed_;  // by token id: a byte per token, looked up once per candidate
};

class IgnoreEos : public Processor {
 public:
  explicit IgnoreEos(std::vector<int32_t> eog_ids) : ids_(std::move(eog_ids)) {}
  const char* name() const override { return "ignore_eos"; }
  void apply(Candidates& c, const TokenHistory&, SamplerRng&) const override {
    for (int32_t id : ids_)
      if (float* l = c.logit_of(id)) *l = -std::numeric_limits<float>::infinity();
  }

 private:
  std::vector<int32_t> ids_;
};

}  // namespace coda
