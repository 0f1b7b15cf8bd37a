// Exact loops: a period of 2..max_period tokens repeated back to back. Config: max_period,
// loop_min_repeats, loop_min_span, loop_long_period, loop_long_min_repeats (a period of a sentence
// or more needs a copy more), structural_min_span (typography needs a longer span). A flood also
// repeats at every period; it is the flooding detector's.
//
// Blocks: a period beyond max_period (a function, a paragraph, a 900-word answer said again) is
// followed by SpanRepeats at any length. Two copies back to back end legitimately (a licence
// quoted twice, a table printed for two cases); a third that goes on for block_third_copy tokens
// (or the whole period, when shorter) does not. Config: block_third_copy (0: off).
#pragma once

#include <algorithm>

#include "guard/detector.h"
#include "guard/guard.h"

namespace coda::detectors {

class ExactLoop : public Detector {
 public:
  ExactLoop(const DetectorInfo& info, const GuardConfig& config)
      : info_(info), blocks_(std::max(1, config.max_period)) {}
  const DetectorInfo& info() const override { return info_; }
  void see(const GuardState& s) override {
    if (s.config.block_third_copy > 0) blocks_.push(s.token);
  }
  void on_rollback(int64_t keep, size_t) override { blocks_.truncate(static_cast<size_t>(keep)); }
  std::optional<Finding> check(GuardState& s) override {
    const Loop& loop = s.exact_loop();
    if (loop.period > 0 && s.flood_run() < loop.span)
      return Finding{loop.onset,
                     loop.repeats / (s.config.loop_min_repeats + 2),
                     {{"period", loop.period}, {"repeats", loop.repeats}, {"span", loop.span}},
                     loop.span};
    const int64_t third = s.config.block_third_copy;
    if (loop.period > 0 || third <= 0) return std::nullopt;
    const Loop block = blocks_.longest();
    if (block.period == 0 || block.span < 2 * block.period + std::min<int64_t>(third, block.period))
      return std::nullopt;
    return Finding{block.onset,
                   std::min(1.0, block.repeats / 3.0),
                   {{"period", block.period}, {"repeats", block.repeats}, {"span", block.span}, {"rule", "block"}},
                   block.span};
  }

 private:
  const DetectorInfo& info_;
  SpanRepeats blocks_;
};

}  // namespace coda::detectors
