// Repetition signals over generated token ids.
//
// PeriodTracker keeps, for every period p up to a maximum, how many consecutive positions ending
// at the newest token satisfy t[i] == t[i - p]: an exact loop of period p covers that run plus p
// tokens. O(max_period) per token. near_loop() finds approximate periodicity (a loop that changes
// a word or a number each time) by the share of matching positions over the last few periods.
#pragma once

#include <cstddef>
#include <cstdint>
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
