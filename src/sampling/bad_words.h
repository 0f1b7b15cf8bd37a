// Bad words (vLLM `bad_words`, HF `bad_words_ids`): a word is one or more token sequences (the
// caller tokenizes it with and without a leading space). A one-token word is always banned; for a
// longer one, its last token is banned when the output so far ends with the word's other tokens.
#pragma once

#include <limits>
#include <vector>

#include "sampling/processor.h"

namespace coda {

class BadWords : public Processor {
 public:
  explicit BadWords(std::vector<std::vector<int32_t>> sequences) : seqs_(std::move(sequences)) {}
  const char* name() const override { return "bad_words"; }
  void apply(Candidates& c, const TokenHistory& h, SamplerRng&) const override {
    const size_t n = h.size();
    for (const auto& seq : seqs_) {
      if (seq.empty()) continue;
      const size_t prefix = seq.size() - 1;
      if (prefix > n) continue;
      bool match = true;
      for (size_t k = 0; k < prefix && match; ++k) match = h.at(n - prefix + k) == seq[k];
      if (match)
        if (float* l = c.logit_of(seq.back())) *l = -std::numeric_limits<float>::infinity();
    }
  }

 private:
  std::vector<std::vector<int32_t>> seqs_;
};

}  // namespace coda
