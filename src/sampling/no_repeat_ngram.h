// No-repeat n-gram (HF `no_repeat_ngram_size`): a token that would complete an n-gram already
// present in prompt + output gets -inf. n = 1 bans every token seen so far.
#pragma once

#include <limits>

#include "sampling/processor.h"

namespace coda {

class NoRepeatNgram : public Processor {
 public:
  explicit NoRepeatNgram(int n) : n_(static_cast<size_t>(n)) {}
  const char* name() const override { return "no_repeat_ngram"; }
  void apply(Candidates& c, const TokenHistory& h, SamplerRng&) const override {
    const size_t len = h.size();
    if (n_ == 0 || len + 1 < n_) return;
    const size_t prefix = n_ - 1;  // the last n-1 tokens must match an earlier n-gram's first n-1
    for (size_t start = 0; start + n_ <= len; ++start) {
      bool match = true;
      for (size_t k = 0; k < prefix && match; ++k) match = h.at(start + k) == h.at(len - prefix + k);
      if (match)
        if (float* l = c.logit_of(h.at(start + prefix))) *l = -std::numeric_limits<float>::infinity();
    }
  }

 private:
  size_t n_;
};

}  // namespace coda
