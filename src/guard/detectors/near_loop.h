// Near loops: a period whose positions repeat with a share of at least near_min_match over
// near_min_repeats periods (a loop that changes a number or a word each time). Checked every
// near_every tokens while no exact loop is confirmed. Config: near_min_match, near_min_repeats,
// near_min_span, near_every, near_line_min_match and near_line_min_repeats (a near loop over line
// breaks: how lists, tables, logs and code repeat legitimately), structural_max_share.
#pragma once

#include <algorithm>

#include "guard/detector.h"
#include "guard/guard.h"

namespace coda::detectors {

// The step on which the approximate detectors (near and phrase loops) look: every near_every
// tokens, while no exact loop (typography included) is confirmed and no periodic episode is quiet.
inline bool approximate_step(GuardState& s) {
  const GuardConfig& c = s.config;
  return c.near_every > 0 && s.n % c.near_every == 0 && s.exact_loop().period == 0 && !s.exact_loop_is_typography() &&
         !s.cooling_down("loop");
}

class NearLoop : public Detector {
 public:
  explicit NearLoop(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    if (!approximate_step(s)) return std::nullopt;
    const GuardConfig& c = s.config;
    const auto& t = s.periods.tokens();
    Loop near = near_loop(t, 2, c.max_period, c.near_min_match, c.near_min_repeats, c.near_min_span);
    if (near.period > 0 && s.line_tail(near.span))  // structured text: the stricter test
      near = near_loop(t, 2, c.max_period, std::max(c.near_min_match, c.near_line_min_match),
                       std::max(c.near_min_repeats, c.near_line_min_repeats), c.near_min_span);
    if (near.period == 0) return std::nullopt;
    // An exact repetition still growing (exact but for its first period) is the exact detector's,
    // with its rule for long periods; this detector is for loops that change as they go.
    if (s.periods.run(near.period) + 2 * near.period >= near.span) return std::nullopt;
    // A near loop over typography (a banner of asterisks broken by a title, a ruled table) is
    // judged by the whole span: the few letters where the pattern breaks do not make it prose.
    if (near.span < c.structural_min_span && s.structural_tail(near.span, c.structural_max_share)) return std::nullopt;
    return Finding{near.onset, near.match * std::min(1.0, near.repeats / (c.near_min_repeats + 2)),
                   {{"period", near.period}, {"repeats", near.repeats}, {"span", near.span}, {"match", near.match}},
                   near.span};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
