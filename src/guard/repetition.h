// Repetition signals over generated token ids.
//
// PeriodTracker keeps, for every period p up to a maximum, how many consecutive positions ending
// at the newest token satisfy t[i] == t[i - p]: an exact loop of period p covers that run plus p
// tokens. O(max_period) per token. near_loop() finds approximate periodicity (a loop that changes
// a word or a number each time) by the share of matching positions over the last few periods.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace coda {

struct Loop {
  int period = 0;      // 0: none
  int64_t span = 0;    // tokens covered by the repetition (all copies)
  int64_t onset = -1;  // index of the first token of the first copy
  double repeats = 0;  // span / period
  double match = 1.0;  // share of positions that repeat (1 for exact loops)
};

class PeriodTracker {
 public:
  explicit PeriodTracker(int max_period);
  void push(int32_t token);
  // Forgets everything after the first n tokens (a rollback) and rebuilds the runs.
  void truncate(size_t n);
  // The exact loop covering the most tokens with at least `min_repeats` copies and `min_span`
  // tokens (smallest period on ties); period 0 if none. Periods of `long_period` tokens or more
  // need `long_min_repeats` copies instead (when larger).
  Loop exact(double min_repeats, int64_t min_span, int min_period = 1, int long_period = 0,
             double long_min_repeats = 0) const;
  const std::vector<int32_t>& tokens() const { return toks_; }
  // Consecutive matches at period p ending at the newest token.
  int64_t run(int p) const { return p >= 1 && p <= max_period_ ? run_[static_cast<size_t>(p)] : 0; }

 private:
  int max_period_;
  std::vector<int32_t> toks_;
  std::vector<int64_t> run_;  // run_[p]
};

// Approximate loop at the end of `t`: the smallest period p in [min_period, max_period] whose last
// max(min_span, min_repeats * p) positions repeat with share >= min_match, extended backwards
// period by period while each period still does.
Loop near_loop(const std::vector<int32_t>& t, int min_period, int max_period, double min_match, double min_repeats,
               int64_t min_span);

// Distinct n-grams / n-grams over the last `window` tokens (1 when too short to tell).
double distinct_ngrams(const std::vector<int32_t>& t, int n, size_t window);

}  // namespace coda

namespace coda {

// Exact repetition at periods beyond PeriodTracker's bound, up to the whole generation: the block
// of code an agent writes 32 times, the 900-word answer said again. Every position's last
// `kgram` ids are hashed (a rolling polynomial hash); when the newest k-gram occurred before at
// distance p > min_period, p becomes a candidate whose run of matches (t[i] == t[i - p]) is then
// followed one comparison per token. So a step costs O(candidates), however long the generation
// and its periods; memory is one hash-table entry per token.
class SpanRepeats {
 public:
  explicit SpanRepeats(int min_period, int kgram = 16, size_t max_candidates = 8);
  void push(int32_t token);
  void truncate(size_t n);  // forget everything after the first n tokens
  // The candidate with the longest run of matches ending at the newest token (period 0 if none);
  // span = run + period, repeats = span / period.
  Loop longest() const;

 private:
  struct Candidate {
    int64_t period, run;
  };
  int min_period_, k_;
  size_t max_candidates_;
  std::vector<int32_t> toks_;
  std::vector<uint64_t> hashes_;  // hash of the k-gram ending at each position (from k-1 on)
  std::unordered_map<uint64_t, int64_t> last_;  // k-gram hash -> last position it ended at
  std::vector<Candidate> cands_;
  uint64_t pow_k_ = 1;  // base^k
};

}  // namespace coda
