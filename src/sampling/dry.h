// DRY, "don't repeat yourself" (koboldcpp/llama.cpp `--dry-*`): penalises the token that would
// extend a repetition of the text's own recent tail. For every earlier position where the last L
// tokens of the text occurred before, the token that followed them there gets
//   logit -= multiplier * base ^ (L - allowed_length)      when L >= allowed_length,
// using the longest such L per token. Sequence-breaker tokens (those whose text contains "\n", ":",
// "\"" or "*" by default) end a match, so formatting repeats are not punished. `window` limits the
// look-back to the last N tokens of prompt + output (0: all). Matches are capped at 64 tokens,
// which keeps the cost linear and the penalty finite.
#pragma once

#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "sampling/processor.h"

namespace coda {

class Dry : public Processor {
 public:
  static constexpr int kMaxMatch = 64;

  Dry(float multiplier, float base, int allowed_length, int window, std::unordered_set<int32_t> breakers)
      : multiplier_(multiplier),
        base_(base),
        allowed_(allowed_length),
        window_(window),
        breakers_(std::move(breakers)) {}
  const char* name() const override { return "dry"; }
  void apply(Candidates& c, const TokenHistory& h, SamplerRng&) const override {
    if (multiplier_ <= 0) return;
    const size_t len = h.size();
    const size_t start = window_ > 0 && static_cast<size_t>(window_) < len ? len - static_cast<size_t>(window_) : 0;
    if (len - start < 2) return;
    const size_t last = len - 1;
    if (breakers_.count(h.at(last))) return;  // the tail itself ends at a breaker: no sequence to extend
    std::unordered_map<int32_t, int> longest;
    for (size_t j = last; j-- > start;) {
      int k = 0;
      while (k < kMaxMatch && j >= start + static_cast<size_t>(k)) {
        const int32_t a = h.at(j - static_cast<size_t>(k));
        if (a != h.at(last - static_cast<size_t>(k)) || breakers_.count(a)) break;
        ++k;
      }
      if (k < allowed_) continue;
      int& best = longest[h.at(j + 1)];
      best = std::max(best, k);
    }
    for (const auto& [token, k] : longest) {
      if (float* l = c.logit_of(token)) *l -= multiplier_ * std::pow(base_, static_cast<float>(k - allowed_));
    }
  }

 private:
  float multiplier_;
  float base_;
  int allowed_;
  int window_;
  std::unordered_set<int32_t> breakers_;
};

}  // namespace coda
