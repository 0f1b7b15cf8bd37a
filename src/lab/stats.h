// Statistics the lab reports, in one place: binomial intervals for failure rates, percentiles of
// latencies, the Kolmogorov-Smirnov test of arrival gaps, and the hypervolume of a Pareto front.
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

}  // namespace coda::lab
