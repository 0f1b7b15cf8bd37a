// Structured output as a sampling processor: every token whose bytes would take the text out of
// the requested format (output_grammar.h) gets -inf, so greedy and sampled decoding alike write
// only what the format admits; the end of generation is allowed only once the value is whole, and
// becomes the only choice when nothing can follow it.
//
// Finding the allowed tokens: the vocabulary's byte strings are sorted once, so tokens that share
// a prefix are neighbours; a walk over them keeps the matcher's state after each prefix and feeds
// only the bytes past what a token shares with the one before (a trie without building one). A
// prefix the format rejects rejects every token that starts with it, so they are skipped. Inside a
// plain string, where almost every token fits, the tokens without quotes, backslashes or control
// bytes are allowed at once and only the rest are walked.
//
// The state after each generated token is kept, so a step feeds one token's bytes; a rollback (the
// guard's repair) or any other change of the history is found by comparing token ids.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sampling/output_grammar.h"
#include "sampling/processor.h"

namespace coda {

class Vocab;

// The vocabulary's token bytes in the orders the walk needs, built once per request that asks
// for structured output (about 30 ms for a 128K vocabulary).
struct GrammarTokens {
  struct Sorted {
    std::vector<int32_t> ids;  // by byte string
    std::vector<uint16_t> lcp;  // bytes shared with the entry before
  };
  std::vector<std::string> bytes;  // by token id ("" for control tokens, which a format never admits)
  Sorted all;                      // every token with bytes
  Sorted special;                  // those that are not plain string content
  std::vector<int32_t> plain;      // whole UTF-8 characters without " \ or control bytes
  static std::shared_ptr<const GrammarTokens> build(const Vocab& vocab);
};

// The matcher's state after each generated token of one sequence. Shared by every chain the
// sequence builds (the guard's repair builds a hotter one each step), so none replays the history.
struct GrammarProgress {
  std::vector<int32_t> seen;
  std::vector<GrammarMatcher> states;
};

class StructuredOutput : public Processor {
 public:
  // `end_ids`: end-of-generation and stop tokens, allowed once the value is complete. `progress`:
  // the sequence's (SamplerVocab::grammar_progress); null gives this processor its own.
  StructuredOutput(std::shared_ptr<const OutputGrammar> grammar, std::shared_ptr<const GrammarTokens> tokens,
                   std::vector<int32_t> end_ids, std::shared_ptr<GrammarProgress> progress = nullptr);
  const char* name() const override { return "structured_output"; }
  void apply(Candidates& c, const TokenHistory& h, SamplerRng& rng) const override;

  // The tokens allowed after `generated` (tests; apply() masks everything else).
  std::vector<int32_t> allowed(const std::vector<int32_t>& generated) const;

 private:
  const GrammarMatcher& state_after(const std::vector<int32_t>& generated) const;
  void mark_allowed(const GrammarMatcher& s, std::vector<uint8_t>& ok) const;
  void walk(const GrammarMatcher& s, const GrammarTokens::Sorted& list, std::vector<uint8_t>& ok) const;

  std::shared_ptr<const OutputGrammar> grammar_;
  std::shared_ptr<const GrammarTokens> tokens_;
  std::vector<int32_t> end_ids_;
  std::shared_ptr<GrammarProgress> progress_;
  mutable std::vector<GrammarMatcher> levels_;  // the walk's state after each byte of a prefix
  mutable std::vector<uint8_t> ok_;
};

}  // namespace coda
