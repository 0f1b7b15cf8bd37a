// The lab's statistics against hand-computed cases: Wilson intervals, percentiles, the
// Kolmogorov-Smirnov test (also of the arrival process), non-domination ranks and hypervolume,
// Kaplan-Meier curves, their quantiles and the bootstrap interval.
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
  EXPECT_DOUBLE_EQ(percentile(xs, 0.9), 3.7);    // position 2.7
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

// Six runs: degraded at 3; censored at 5; degraded at 6 (two); censored at 8; degraded at 10.
// By hand: S(3) = 5/6; at 6 four are at risk (the run censored at 5 has left), two degrade:
// S(6) = 5/6 x 2/4 = 5/12; at 10 one is at risk and degrades: S(10) = 0.
TEST(KaplanMeier, HandComputedCurve) {
  const std::vector<SurvivalObservation> obs = {{6, true}, {3, true}, {10, true}, {5, false}, {8, false}, {6, true}};
  const auto c = kaplan_meier(obs);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].time, 3);
  EXPECT_EQ(c[0].at_risk, 6);
  EXPECT_NEAR(c[0].survival, 5.0 / 6, 1e-12);
  EXPECT_EQ(c[1].time, 6);
  EXPECT_EQ(c[1].at_risk, 4);
  EXPECT_EQ(c[1].events, 2);
  EXPECT_NEAR(c[1].survival, 5.0 / 12, 1e-12);
  EXPECT_EQ(c[2].time, 10);
  EXPECT_EQ(c[2].at_risk, 1);
  EXPECT_NEAR(c[2].survival, 0, 1e-12);
  EXPECT_EQ(survival_quantile(c, 0.1), 3);   // S(3) = 0.833 <= 0.9
  EXPECT_EQ(survival_quantile(c, 0.5), 6);   // S(3) = 0.833 > 0.5, S(6) = 0.417 <= 0.5
  EXPECT_EQ(survival_quantile(c, 0.17), 6);  // 1 - 0.17 = 0.83 < 5/6: not yet at 3
}

// A run censored at the time of an event is still at risk for it: {4 event, 4 censored, 9 event}
// gives S(4) = 1 - 1/3 (not 1 - 1/2), then S(9) = 2/3 x (1 - 1/1) = 0.
TEST(KaplanMeier, CensoringAtAnEventTimeCountsAtRisk) {
  const auto c = kaplan_meier({{4, false}, {9, true}, {4, true}});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].at_risk, 3);
  EXPECT_NEAR(c[0].survival, 2.0 / 3, 1e-12);
  EXPECT_EQ(c[1].at_risk, 1);
  EXPECT_NEAR(c[1].survival, 0, 1e-12);
}

TEST(KaplanMeier, NoDegradationMeansNoThreshold) {
  const auto c = kaplan_meier({{100, false}, {200, false}});
  EXPECT_TRUE(c.empty());
  EXPECT_TRUE(std::isnan(survival_quantile(c, 0.1)));
  const auto b = bootstrap_survival_quantiles({{100, false}, {200, false}}, 0.1, 50, 1);
  for (double v : b) EXPECT_TRUE(std::isinf(v));
  EXPECT_TRUE(std::isinf(bootstrap_interval(b).first));
}

// Two runs degraded at 2 and at 4, median (q = 0.5). A resample of two draws is {2,2} (p 1/4),
// {4,4} (1/4) or one of each (1/2); its median is 2 unless both draws are 4 (S(2) = 1/2 <= 1/2).
// So the bootstrap medians are 2 with probability 3/4 and 4 with 1/4, and the 95% interval is
// [2, 4].
TEST(Bootstrap, HandComputedDistributionAndInterval) {
  const std::vector<SurvivalObservation> obs = {{2, true}, {4, true}};
  const int B = 4000;
  const auto qs = bootstrap_survival_quantiles(obs, 0.5, B, 7);
  ASSERT_EQ(qs.size(), static_cast<size_t>(B));
  int twos = 0;
  for (double v : qs) {
    EXPECT_TRUE(v == 2 || v == 4) << v;
    twos += v == 2;
  }
  const double se = std::sqrt(0.75 * 0.25 / B);
  EXPECT_NEAR(static_cast<double>(twos) / B, 0.75, 4 * se);
  const auto ci = bootstrap_interval(qs);
  EXPECT_EQ(ci.first, 2);
  EXPECT_EQ(ci.second, 4);
  EXPECT_EQ(bootstrap_survival_quantiles(obs, 0.5, 100, 7), bootstrap_survival_quantiles(obs, 0.5, 100, 7));
}

// Every run degraded at 7: every resample's quantile is 7.
TEST(Bootstrap, IdenticalRunsGiveAPointInterval) {
  const auto qs = bootstrap_survival_quantiles({{7, true}, {7, true}, {7, true}}, 0.1, 200, 3);
  const auto ci = bootstrap_interval(qs);
  EXPECT_EQ(ci.first, 7);
  EXPECT_EQ(ci.second, 7);
}

}  // namespace
}  // namespace coda::lab
