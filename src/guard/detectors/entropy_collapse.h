// Entropy collapse: near-certain steps (mean entropy below collapse_entropy over collapse_window
// tokens) over a repetitive window (distinct 3-grams below collapse_distinct). Needs signals.
#pragma once

#include "guard/detector.h"
#include "guard/detectors/window.h"
#include "guard/guard.h"

namespace coda::detectors {

class EntropyCollapse : public Detector {
 public:
  explicit EntropyCollapse(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    if (!s.signals_known || c.collapse_window <= 0 || s.n < c.collapse_window) return std::nullopt;
    const double h = mean_of(s.signals, static_cast<size_t>(c.collapse_window), &StepSignals::entropy);
    if (h >= c.collapse_entropy) return std::nullopt;
    const double d3 = distinct_ngrams(s.periods.tokens(), 3, static_cast<size_t>(c.collapse_window));
    if (d3 >= c.collapse_distinct) return std::nullopt;
    return Finding{s.n - c.collapse_window,
                   1.0 - h / c.collapse_entropy,
                   {{"mean_entropy", h}, {"distinct3", d3}, {"window", c.collapse_window}},
                   c.collapse_window};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
