// Phrase loops: text that keeps saying the same things without a period.
//
// - Recombined phrases ("and thou shalt make thee a burnt offering, and thou shalt make it unto the
//   LORD, ..."): fewer than phrase_max_distinct distinct 3-grams per 3-gram over the last
//   phrase_window tokens, typography aside. Off over word pieces (a signature block falls as low
//   there). Config: phrase_window, phrase_max_distinct (0: off).
// - Recurring sentences (`rule: sentences`): a reasoning model that cycles through "Wait, let me
//   check again." / "Hmm, let me verify that once more." / ... in any order has no period either,
//   and its 3-grams stay varied. Here the last phrase_sentence_run sentences (of 3 words or more,
//   case aside) have each been written at least twice before. A block quoted twice (a
//   licence in two places) has each sentence only once before, and a chorus of fewer lines cannot
//   make the run. Config: phrase_sentence_run (0: off).
#pragma once

#include <unordered_map>

#include "guard/detector.h"
#include "guard/detectors/near_loop.h"
#include "guard/guard.h"

namespace coda::detectors {

class PhraseLoop : public Detector {
 public:
  explicit PhraseLoop(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }

  void see(const GuardState& s) override {
    if (s.config.phrase_sentence_run <= 0) return;
    const std::string& t = s.text;
    // A sentence ends at . ! or ? followed by blank space; the character after it must be in.
    for (; scanned_ + 1 < t.size(); ++scanned_) {
      const char c = t[scanned_];
      const char next = t[scanned_ + 1];
      if ((c == '.' || c == '!' || c == '?') && (next == ' ' || next == '\n' || next == '\t' || next == '\r'))
        add_sentence(t, scanned_ + 1);
    }
  }

  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    if (c.phrase_sentence_run > 0 && run_ >= c.phrase_sentence_run && fresh_) {
      fresh_ = false;
      const int64_t onset = std::min(s.unit_at_byte(run_first_byte_), s.i);
      return Finding{onset, 0.9, {{"rule", "sentences"}, {"run", run_}, {"distinct", distinct_in_run()}}, 64};
    }
    const int64_t w = c.phrase_window;
    if (!approximate_step(s) || c.phrase_max_distinct <= 0 || w <= 0 || s.n < w) return std::nullopt;
    const double d3 = distinct_ngrams(s.periods.tokens(), 3, static_cast<size_t>(w));
    // Few distinct 3-grams in typography or data (a hex dump's rows of zero bytes) are its form,
    // not a phrase said again: a phrase has letters.
    if (d3 >= c.phrase_max_distinct || s.structural_tail(w, c.structural_max_share) ||
        s.letterless_tail(w, c.structural_max_share))
      return std::nullopt;
    return Finding{s.n - w, 1.0 - 0.5 * d3 / c.phrase_max_distinct, {{"distinct3", d3}, {"window", w}}, w};
  }

  void on_rollback(int64_t /*keep*/, size_t /*kept_bytes*/) override {
    // Sentences are found again from the start: a rollback is rare, and the counts must forget
    // what was taken back.
    seen_.clear();
    run_hashes_.clear();
    scanned_ = start_ = 0;
    run_ = 0;
    fresh_ = false;
  }

 private:
  struct Seen {
    int count = 0;
    size_t first_byte = 0;
  };

  void add_sentence(const std::string& t, size_t end) {
    // Normalized: lower case, blank space collapsed; fewer than 3 words: not counted. Digits stay:
    // sentences that differ by a number ("Row 4 holds 7 items.") are a list, or the near-loop
    // detector's counter.
    std::string key;
    int words = 0;
    bool in_word = false;
    size_t begin = start_;
    while (begin < end && (t[begin] == ' ' || t[begin] == '\n' || t[begin] == '\t' || t[begin] == '\r')) ++begin;
    for (size_t k = begin; k < end; ++k) {
      auto ch = static_cast<unsigned char>(t[k]);
      const bool blank = ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r';
      if (blank) {
        if (in_word) key += ' ';
        in_word = false;
        continue;
      }
      if (!in_word) ++words;
      in_word = true;
      key += static_cast<char>(std::tolower(ch));
    }
    start_ = end;
    if (words < 3) return;
    Seen& e = seen_[key];
    if (e.count == 0) e.first_byte = begin;
    ++e.count;
    if (e.count >= 3) {
      if (run_ == 0) run_first_byte_ = e.first_byte;
      run_first_byte_ = std::min(run_first_byte_, e.first_byte);
      ++run_;
      run_hashes_.push_back(std::hash<std::string>{}(key));
      fresh_ = true;
    } else {
      run_ = 0;
      run_hashes_.clear();
    }
  }

  int64_t distinct_in_run() const {
    std::vector<size_t> h(run_hashes_);
    std::sort(h.begin(), h.end());
    return static_cast<int64_t>(std::unique(h.begin(), h.end()) - h.begin());
  }

  const DetectorInfo& info_;
  std::unordered_map<std::string, Seen> seen_;
  std::vector<size_t> run_hashes_;
  size_t scanned_ = 0, start_ = 0, run_first_byte_ = 0;
  int64_t run_ = 0;
  bool fresh_ = false;  // the run grew at this step
};

}  // namespace coda::detectors
