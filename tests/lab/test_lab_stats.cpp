// The lab's statistics against hand-computed cases: Wilson intervals, percentiles, the
// Kolmogorov-Smirnov test (also of the arrival process), non-domination ranks and hypervolume.
#include <gtest/gtest.h>

#include <cmath>

#include "lab/arrivals.h"
#include "lab/stats.h"

namespace coda::lab {
namespace {

TEST(Wilson, HandComputedIntervals) {
  // 5 of 100: p = 0.05, z^2/n = 0.0384146, centre 0.0666470, half-width 0.0451033.
  auto [lo, hi] = wilson_interval(5, 100);
  EXPECT_NEAR(lo, 0.0215437, 1e-6);
  EXPECT_NEAR(hi, 0.1117503, 1e-6);
  // 0 of 600: the upper bound is z^2 / (n + z^2) = 3.841459 / 603.841459.
  std::tie(lo, hi) = wilson_interval(0, 600);
  EXPECT_EQ(lo, 0.0);
  EXPECT_NEAR(hi, 3.841459 / 603.841459, 1e-7);
  // n of n mirrors 0 of n.
  std::tie(lo, hi) = wilson_interval(600, 600);
  EXPECT_NEAR(lo, 1 - 3.841459 / 603.841459, 1e-7);
  EXPECT_EQ(hi, 1.0);
  // Half: symmetric around 0.5; 50 of 100 -> 0.5 +/- 1.959964 * 0.05 / 1.0384146 * sqrt(1 + 0.0384146).
  std::tie(lo, hi) = wilson_interval(50, 100);
  EXPECT_NEAR(lo + hi, 1.0, 1e-12);
  EXPECT_NEAR(hi - 0.5, 1.959964 * std::sqrt(0.25 / 100 + 3.841459 / 40000) / 1.0384146, 1e-6);
  std::tie(lo, hi) = wilson_interval(0, 0);
  EXPECT_EQ(lo, 0.0);
  EXPECT_EQ(hi, 1.0);
}

TEST(Percentile, LinearInterpolationLikeNumPy) {
  const std::vector<double> xs = {4, 1, 3, 2};  // sorted 1 2 3 4
  EXPECT_DOUBLE_EQ(percentile(xs, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(percentile(xs, 0.9), 3.7);   // position 2.7
  EXPECT_DOUBLE_EQ(percentile(xs, 0.99), 3.97);  // position 2.97
  EXPECT_DOUBLE_EQ(percentile(xs, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(xs, 1), 4);
  EXPECT_DOUBLE_EQ(percentile({7}, 0.5), 7);
  EXPECT_TRUE(std::isnan(percentile({}, 0.5)));
}

TEST(KolmogorovSmirnov, HandComputedStatistic) {
  // Exponential(1) CDF at 0.5, 1, 2: 0.393469, 0.632121, 0.864665. D- at the first point is
  // 0.393469 - 0 and dominates every other gap.
  const KsResult r = ks_exponential({2.0, 0.5, 1.0}, 1.0);
  EXPECT_NEAR(r.d, 1 - std::exp(-0.5), 1e-12);
  // Kolmogorov's survival function at 1.36 is about 0.0494 (the 5% critical value is 1.358).
  EXPECT_NEAR(kolmogorov_survival(1.358), 0.05, 1e-3);
  EXPECT_NEAR(kolmogorov_survival(1.628), 0.01, 1e-3);
}

TEST(Arrivals, PoissonGapsPassTheKsTestAndOthersFail) {
  // 60 requests per minute = 1 per second; 2,000 gaps.
  auto t = arrival_times(2000, 1.0, 1.0, 42);
  ASSERT_TRUE(t.ok());
  std::vector<double> gaps;
  double prev = 0;
  for (double x : *t) {
    gaps.push_back(x - prev);
    prev = x;
  }
  const KsResult fit = ks_exponential(gaps, 1.0);
  EXPECT_GT(fit.p_value, 0.01) << "D = " << fit.d;
  // The same gaps do not fit an exponential of twice the rate, and regular arrivals
  // (burstiness 50, nearly constant gaps) do not fit an exponential at all.
  EXPECT_LT(ks_exponential(gaps, 2.0).p_value, 1e-6);
  auto regular = arrival_times(2000, 1.0, 50.0, 42);
  std::vector<double> rg;
  prev = 0;
  for (double x : *regular) {
    rg.push_back(x - prev);
    prev = x;
  }
  EXPECT_LT(ks_exponential(rg, 1.0).p_value, 1e-6);
  // Mean gap 1 / rate, within 3 standard errors (sd of an exponential gap = its mean).
  EXPECT_NEAR(t->back() / 2000.0, 1.0, 3.0 / std::sqrt(2000.0));
  // Seeded: the same seed gives the same times; rate 0 sends all at once; bad values are errors.
  EXPECT_EQ(*arrival_times(50, 1.0, 1.0, 7), *arrival_times(50, 1.0, 1.0, 7));
  EXPECT_EQ(*arrival_times(3, 0.0, 1.0, 7), std::vector<double>(3, 0.0));
  EXPECT_FALSE(arrival_times(3, -1, 1, 7).ok());
  EXPECT_FALSE(arrival_times(3, 1, 0, 7).ok());
}

TEST(Pareto, NonDominationRanks) {
  const std::vector<std::vector<double>> pts = {{1, 2}, {2, 1}, {2, 2}, {3, 3}, {1, 1}, {1, 1}};
  EXPECT_EQ(nondomination_ranks(pts), (std::vector<int>{1, 1, 2, 3, 0, 0}));
  EXPECT_TRUE(dominates({1, 1}, {1, 2}));
  EXPECT_FALSE(dominates({1, 1}, {1, 1}));
  EXPECT_FALSE(dominates({1, 3}, {2, 2}));
}

TEST(Pareto, HypervolumeHandComputed) {
  // A staircase: 3 + 2 + 1.
  EXPECT_DOUBLE_EQ(hypervolume({{1, 3}, {2, 2}, {3, 1}}, {4, 4}), 6.0);
  // A dominated point and one outside the reference add nothing.
  EXPECT_DOUBLE_EQ(hypervolume({{1, 3}, {2, 2}, {3, 1}, {3, 3}, {5, 0}}, {4, 4}), 6.0);
  // Three objectives: two boxes of volume 2 overlapping in a unit cube.
  EXPECT_DOUBLE_EQ(hypervolume({{0, 1, 1}, {1, 0, 1}}, {2, 2, 2}), 3.0);
  EXPECT_DOUBLE_EQ(hypervolume({{1, 1, 1}}, {2, 2, 2}), 1.0);
  EXPECT_DOUBLE_EQ(hypervolume({}, {2, 2}), 0.0);
}

}  // namespace
}  // namespace coda::lab
