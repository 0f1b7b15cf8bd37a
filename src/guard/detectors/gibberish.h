// Gibberish: the model keeps picking tokens it finds unlikely from flat distributions (mean
// surprisal above gibberish_surprisal and mean entropy above gibberish_entropy over
// gibberish_window tokens). Needs signals.
#pragma once

#include "guard/detector.h"
#include "guard/detectors/window.h"
#include "guard/guard.h"

namespace coda::detectors {

class Gibberish : public Detector {
 public:
  explicit Gibberish(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    if (!s.signals_known || c.gibberish_window <= 0 || s.n < c.gibberish_window) return std::nullopt;
    const size_t w = static_cast<size_t>(c.gibberish_window);
    const double sur = mean_of(s.signals, w, &StepSignals::surprisal);
    const double h = mean_of(s.signals, w, &StepSignals::entropy);
    if (sur <= c.gibberish_surprisal || h <= c.gibberish_entropy) return std::nullopt;
    return Finding{s.n - c.gibberish_window,
                   sur / (2 * c.gibberish_surprisal),
                   {{"mean_surprisal", sur}, {"mean_entropy", h}, {"window", c.gibberish_window}},
                   c.gibberish_window};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
