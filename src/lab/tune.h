// `coda tune`: multi-objective search over sampling parameters under the same load as
// `coda bench`, in two phases, with the study kept in an Optuna journal file.
//
// Phase 1 runs `n_trials` configurations: trial 0 is the baseline (the engine's defaults, or
// --baseline), then random startup trials, then MOTPE proposals (tpe.h). Phase 2 re-runs the
// baseline and the best K configurations (by non-domination rank, then the first objective) with
// more requests. The objective is noisy, so the recommendation is careful: a configuration is
// recommended only when its phase-2 interval for the first objective lies wholly below the
// baseline's (Wilson intervals for failure rates); otherwise there is none, and the report says so.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lab/journal.h"
#include "lab/search_space.h"
#include "lab/tpe.h"

namespace coda::lab {

// One evaluation: an objective value per objective with its 95% interval (lo == hi when exact),
// plus what to keep about it (a bench summary, or a test problem's true values).
struct Evaluation {
  std::vector<double> values;
  std::vector<std::pair<double, double>> intervals;
  nlohmann::json details = nlohmann::json::object();
};
// Runs `params` with `requests` requests (seeded by `seed`); errors end the study with a message.
using Evaluator =
    std::function<Expected<Evaluation>(const std::map<std::string, double>& params, int64_t requests, uint64_t seed)>;

struct TuneOptions {
  SearchSpace space;
  std::vector<std::string> objectives;
  std::map<std::string, double> baseline;
  int n_trials = 24;
  int64_t requests = 120;  // per phase-1 trial
  int phase2_top = 0;
  int64_t phase2_requests = 600;
  uint64_t seed = 0;
  TpeOptions tpe;
  std::string study_path, study_name = "coda-tune";
};

struct TuneTrial {
  int number = 0;
  int phase = 1;
  int source = -1;  // phase 2: the phase-1 trial it re-runs
  bool baseline = false;
  bool on_front = false;
  std::map<std::string, double> params;
  Evaluation eval;
  std::string started;  // when its evaluation began (the study file's datetime_start)
};

struct TuneResult {
  std::vector<TuneTrial> trials;          // phase 1 then phase 2
  nlohmann::ordered_json recommendation;  // null when nothing beats the baseline
  std::string recommendation_text;
  bool interrupted = false;
};

// Runs (or resumes, from the study file) the study. `on_trial` reports progress.
Expected<TuneResult> run_tune(const TuneOptions& opts, const Evaluator& eval,
                              const std::function<void(const TuneTrial&, int done, int total)>& on_trial,
                              const std::atomic<bool>* stop);

// The defaults of the sampling fields coda knows (temperature 1, repetition_penalty 1, min_p 0,
// ...), which is also what "<param>_deviation" objectives measure distance from.
Expected<double> neutral_value(const std::string& param);
// Trial 0 without --baseline: the published study's (temperature 0.7), else neutral_value.
Expected<double> baseline_value(const std::string& param);

// "<param>_deviation": |param - its neutral value| (the neutral value where the space leaves the
// parameter out), a function of the trial's parameters. Empty for any other objective, which must
// be measured.
ExactObjective exact_objective(const std::string& objective);

nlohmann::ordered_json pareto_json(const TuneResult& r, const TuneOptions& opts);
std::string tune_report_html(const TuneResult& r, const TuneOptions& opts);

// Noisy two-objective test problems with known fronts (the tuner's benchmark against Optuna):
// "zdt1" (x1, x2 in [0, 1]; f1 = x1 seen through Binomial(requests, x1) / requests, f2 = ZDT1's
// g (1 - sqrt(x1 / g)), g = 1 + 9 x2) and "failure" (the study's shape: temperature, min_p,
// repetition_penalty; f1 a failure probability seen through a binomial, f2 = repetition_penalty
// - 1). details["true_values"] holds the noise-free objectives.
Expected<SearchSpace> test_problem_space(const std::string& name);
Evaluator test_problem(const std::string& name);

}  // namespace coda::lab
