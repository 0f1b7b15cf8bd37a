// Statistics the lab reports, in one place: binomial intervals for failure rates, percentiles of
// latencies, the Kolmogorov-Smirnov test of arrival gaps, the hypervolume of a Pareto front, and
// survival analysis (Kaplan-Meier) for coherence thresholds.
// Every function is pure and tested against hand-computed cases.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace coda::lab {

// Wilson score interval for k successes in n trials at normal quantile z (1.96: 95%). For n = 0 the
// interval is [0, 1]: nothing is known. 0 failures in 600 gives [0, 0.0064], "below 0.64%".
std::pair<double, double> wilson_interval(int64_t k, int64_t n, double z = 1.959963984540054);

// The q-quantile (0..1) by linear interpolation between order statistics (NumPy's default,
// "linear"); NaN for an empty sample.
double percentile(std::vector<double> xs, double q);

// One-sample Kolmogorov-Smirnov statistic D of `xs` against the exponential distribution with the
// given rate, and its asymptotic p-value (Kolmogorov's distribution, with Stephens' small-sample
// correction sqrt(n) + 0.12 + 0.11 / sqrt(n)).
struct KsResult {
  double d = 0;
  double p_value = 1;
};
KsResult ks_exponential(std::vector<double> xs, double rate);
double kolmogorov_survival(double lambda);  // P(K > lambda)

// Pareto tools for minimisation. `dominates(a, b)`: a is no worse in every objective and better in
// one. `nondomination_ranks`: 0 for the front, 1 for the front once it is removed, and so on.
bool dominates(const std::vector<double>& a, const std::vector<double>& b);
std::vector<int> nondomination_ranks(const std::vector<std::vector<double>>& points);
// Hypervolume dominated by `points` up to `reference` (points not better than the reference in
// every objective add nothing). Exact, by recursive slicing over the first objective (WFG-style
// inclusion-exclusion is not needed for the 2-4 objectives the tuner uses).
double hypervolume(std::vector<std::vector<double>> points, const std::vector<double>& reference);

// Survival analysis. One observation per run: the generated-token count at which it degraded
// (`event` true), or the length it reached still coherent (`event` false: censored there).
struct SurvivalObservation {
  double time = 0;
  bool event = false;
};
// One step of the Kaplan-Meier curve: S(t) just after `time`, with the runs at risk at `time`
// (not yet degraded or censored before it) and the degradations at `time`.
struct SurvivalStep {
  double time = 0;
  double survival = 1;
  int64_t at_risk = 0, events = 0;
};
// The Kaplan-Meier estimate S(t) = prod over event times t_i <= t of (1 - d_i / n_i); steps only at
// event times. A run censored at the same time as an event is counted at risk there (the usual
// convention: censoring happens just after the events of its time).
std::vector<SurvivalStep> kaplan_meier(const std::vector<SurvivalObservation>& obs);
// The time by which a share `q` of runs has degraded: the first event time with S <= 1 - q; NaN
// when the curve never falls that far (fewer than q of the runs degraded within what was seen).
double survival_quantile(const std::vector<SurvivalStep>& curve, double q);
// The quantile of `resamples` bootstrap resamples (runs drawn with replacement, seeded). A
// resample whose curve never reaches the quantile gives +infinity: "beyond what was observed".
std::vector<double> bootstrap_survival_quantiles(const std::vector<SurvivalObservation>& obs, double q, int resamples,
                                                 uint64_t seed);
// The percentile interval of those (level 0.95: the 2.5th and 97.5th percentiles); an end may be
// +infinity.
std::pair<double, double> bootstrap_interval(std::vector<double> quantiles, double level = 0.95);

}  // namespace coda::lab
