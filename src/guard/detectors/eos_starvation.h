// EOS starvation: after eos_starvation_after tokens, the end-of-generation tokens never reached
// eos_starvation_prob over the last eos_starvation_window steps. Needs signals. Reported once.
#pragma once

#include <algorithm>
#include <cstdint>

#include "guard/detector.h"
#include "guard/guard.h"

namespace coda::detectors {

class EosStarvation : public Detector {
 public:
  explicit EosStarvation(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    if (!s.signals_known || c.eos_starvation_after <= 0 || s.n < c.eos_starvation_after) return std::nullopt;
    const size_t w = static_cast<size_t>(std::min<int64_t>(c.eos_starvation_window, s.n));
    float max_p = 0;
    for (size_t k = s.signals.size() - w; k < s.signals.size(); ++k) max_p = std::max(max_p, s.signals[k].eos_prob);
    if (max_p >= c.eos_starvation_prob) return std::nullopt;
    return Finding{s.n - static_cast<int64_t>(w),
                   1.0 - max_p / c.eos_starvation_prob,
                   {{"max_eos_prob", max_p}, {"window", w}},
                   INT64_MAX / 2};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
