// Runaway length: the generation passed runaway_tokens tokens (0: off). Reported once. Tokens are
// the engine's in process; in the proxy, the upstream's count when it reports one (vLLM's
// continuous_usage_stats, llama.cpp's timings), else an estimate from word pieces (StreamGuard).
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
    if (c.runaway_tokens <= 0 || s.length_tokens < c.runaway_tokens) return std::nullopt;
    nlohmann::ordered_json evidence = {{"tokens", s.length_tokens}, {"limit", c.runaway_tokens}};
    if (s.length_tokens != s.n) evidence["units"] = s.n;
    // The onset is the unit where the limit was passed: the limit itself when units are tokens.
    return Finding{s.length_tokens == s.n ? c.runaway_tokens - 1 : s.i, 1.0, std::move(evidence), INT64_MAX / 2};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
