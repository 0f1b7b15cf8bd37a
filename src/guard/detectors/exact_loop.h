// Exact loops: a period of 2..max_period tokens repeated back to back. Config: max_period,
// loop_min_repeats, loop_min_span, loop_long_period, loop_long_min_repeats (a period of a sentence
// or more needs a copy more), structural_min_span (typography needs a longer span). A flood also
// repeats at every period; it is the flooding detector's.
#pragma once

#include "guard/detector.h"
#include "guard/guard.h"

namespace coda::detectors {

class ExactLoop : public Detector {
 public:
  explicit ExactLoop(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const Loop& loop = s.exact_loop();
    if (loop.period == 0 || s.flood_run() >= loop.span) return std::nullopt;
    return Finding{loop.onset, loop.repeats / (s.config.loop_min_repeats + 2),
                   {{"period", loop.period}, {"repeats", loop.repeats}, {"span", loop.span}}, loop.span};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
