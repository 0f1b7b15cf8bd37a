// Phrase loops: recombined phrases with no period ("and thou shalt make thee a burnt offering, and
// thou shalt make it unto the LORD, ..."): fewer than phrase_max_distinct distinct 3-grams per
// 3-gram over the last phrase_window tokens, typography aside. Off over word pieces (a signature
// block falls as low there). Config: phrase_window, phrase_max_distinct (0: off).
#pragma once

#include "guard/detector.h"
#include "guard/detectors/near_loop.h"
#include "guard/guard.h"

namespace coda::detectors {

class PhraseLoop : public Detector {
 public:
  explicit PhraseLoop(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    const int64_t w = c.phrase_window;
    if (!approximate_step(s) || c.phrase_max_distinct <= 0 || w <= 0 || s.n < w) return std::nullopt;
    const double d3 = distinct_ngrams(s.periods.tokens(), 3, static_cast<size_t>(w));
    if (d3 >= c.phrase_max_distinct || s.structural_tail(w, c.structural_max_share)) return std::nullopt;
    return Finding{s.n - w, 1.0 - 0.5 * d3 / c.phrase_max_distinct, {{"distinct3", d3}, {"window", w}}, w};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
