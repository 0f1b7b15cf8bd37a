// The evaluator that makes `coda tune` a load study: each configuration is a `coda bench` run
// (same target, prompts and arrivals) with the configuration's sampling fields, and its
// objectives are read from the run's summary.
#pragma once

#include "lab/load_bench.h"
#include "lab/tune.h"

namespace coda::lab {

// Objective names: "failure_rate" (with its Wilson interval), "<param>_deviation" (|value - the
// field's neutral default|, e.g. repetition_penalty_deviation = |repetition_penalty - 1|),
// "error_rate", "guard_event_rate", "mean_output_tokens", or a latency like "ttft_ms.p50",
// "e2e_ms.p99", "tpot_ms.mean". Checked before anything runs.
Status check_objectives(const std::vector<std::string>& objectives, const SearchSpace& space);

Evaluator load_evaluator(Target& target, const std::vector<BenchPrompt>& prompts, const LoadOptions& base,
                         const std::vector<std::string>& objectives, std::atomic<bool>* stop,
                         std::function<void(const Progress&)> on_progress);

}  // namespace coda::lab
