// Flooding: one token over and over. Config: flood_min_run; structural_min_span for a flood of a
// token without a letter or digit (a rule of dashes is typography).
#pragma once

#include "guard/detector.h"
#include "guard/guard.h"

namespace coda::detectors {

class Flooding : public Detector {
 public:
  explicit Flooding(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    const int64_t flood = s.flood_run();
    if (flood < c.flood_min_run || (flood < c.structural_min_span && s.structural_tail(1))) return std::nullopt;
    return Finding{s.n - flood, static_cast<double>(flood) / (2.0 * c.flood_min_run),
                   {{"token", s.token}, {"run", flood}}, flood};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
