// Runaway length: the generation passed runaway_tokens tokens (0: off). Reported once.
#pragma once

#include <cstdint>

#include "guard/detector.h"
#include "guard/guard.h"

namespace coda::detectors {

class Runaway : public Detector {
 public:
  explicit Runaway(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    if (c.runaway_tokens <= 0 || s.n < c.runaway_tokens) return std::nullopt;
    return Finding{c.runaway_tokens - 1, 1.0, {{"tokens", s.n}, {"limit", c.runaway_tokens}}, INT64_MAX / 2};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
