// The MOTPE sampler: the good/bad split by non-domination rank with the hypervolume tie-break,
// hypervolume-contribution weights, seeded reproducibility, proposals inside the space, and that
// it learns (beats random search on a problem with a known front).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "lab/stats.h"
#include "lab/tpe.h"
#include "lab/tune.h"

namespace coda::lab {
namespace {

TEST(Motpe, GammaIsOptunasDefault) {
  EXPECT_EQ(MotpeSampler::gamma(10, 0.1), 1u);
  EXPECT_EQ(MotpeSampler::gamma(11, 0.1), 2u);
  EXPECT_EQ(MotpeSampler::gamma(24, 0.1), 3u);
  EXPECT_EQ(MotpeSampler::gamma(1000, 0.1), 25u);
}

TEST(Motpe, GammaShareIsCeiledAndCapped) {
  // coda's default share, 0.25 (hyperopt's): ceil(0.25 x 11) = 3, ceil(0.25 x 24) = 6, ceil(0.25 x
  // 47) = 12, capped at 25 from 97 trials on; never below one trial while there is one.
  EXPECT_EQ(TpeOptions{}.gamma, 0.25);
  EXPECT_EQ(MotpeSampler::gamma(11, 0.25), 3u);
  EXPECT_EQ(MotpeSampler::gamma(24, 0.25), 6u);
  EXPECT_EQ(MotpeSampler::gamma(47, 0.25), 12u);
  EXPECT_EQ(MotpeSampler::gamma(97, 0.25), 25u);
  EXPECT_EQ(MotpeSampler::gamma(3, 0.01), 1u);
  EXPECT_EQ(MotpeSampler::gamma(0, 0.25), 0u);
}

TEST(Motpe, SplitTakesWholeRanksThenTheLargestHypervolumeContribution) {
  // Rank 0: (1,1), (0.5,3), (3,0.5), (2.9,0.6); rank 1: (2,2); rank 2: (4,4).
  const std::vector<std::vector<double>> v = {{1, 1}, {0.5, 3}, {2, 2}, {3, 0.5}, {2.9, 0.6}, {4, 4}};
  EXPECT_EQ(nondomination_ranks(v), (std::vector<int>{0, 0, 1, 0, 0, 2}));
  // Rank 0 overflows one slot: greedy hypervolume subset selection with the reference 1.1 x the
  // rank's worst = (3.3, 3.3). Alone: (1,1) 2.3 x 2.3 = 5.29 beats (0.5,3) 0.84, (3,0.5) 0.84,
  // (2.9,0.6) 1.08.
  EXPECT_EQ(MotpeSampler::split_below(v, 1), (std::vector<size_t>{0}));
  // Next, the gains beside (1,1): (0.5,3) 0.5 x 0.3 = 0.15; (3,0.5) 0.3 x 0.5 = 0.15;
  // (2.9,0.6) 0.4 x 0.4 = 0.16, so (2.9, 0.6) though (3, 0.5) is more extreme.
  EXPECT_EQ(MotpeSampler::split_below(v, 2), (std::vector<size_t>{0, 4}));
  // Then (0.5,3) still gains 0.15; (3,0.5) only 0.3 x 0.1 = 0.03 beside (2.9,0.6).
  EXPECT_EQ(MotpeSampler::split_below(v, 3), (std::vector<size_t>{0, 4, 1}));
  // Whole ranks first: five slots take all of rank 0 and then rank 1.
  EXPECT_EQ(MotpeSampler::split_below(v, 5), (std::vector<size_t>{0, 1, 3, 4, 2}));
}

TEST(Motpe, BelowWeightsAreHypervolumeContributions) {
  // Reference (1.1 x worst) = (3.3, 3.3). HV of all = staircase; exclusive contributions:
  // (1,3): 1 x 0.3 = 0.3; (2,2): 1 x 1 = 1; (3,1): 0.3 x 1 = 0.3. Normalised by the max.
  auto w = MotpeSampler::below_weights({{1, 3}, {2, 2}, {3, 1}});
  ASSERT_EQ(w.size(), 3u);
  EXPECT_NEAR(w[0], 0.3, 1e-9);
  EXPECT_NEAR(w[1], 1.0, 1e-9);
  EXPECT_NEAR(w[2], 0.3, 1e-9);
  EXPECT_EQ(MotpeSampler::below_weights({{5, 5}}), std::vector<double>{1.0});
}

TEST(Motpe, DenoisingSmoothsOnlyNoisyObjectives) {
  // Three trials on a line, a = 0, 0.5, 1, with noisy values 0, 1, 0. At a = 0.5 the neighbours sit
  // symmetrically, so the local slope is 0 and the value is the weighted mean
  // (w 0 + 1 + w 0) / (2 w + 1), w = exp(-0.5 x 0.5^2 / 0.2^2) = exp(-3.125): 0.919185. The two
  // ends mirror each other. The second objective is exact and must come back as given.
  auto space = *parse_search_space("a=0:1");
  TpeOptions o;
  o.denoise_bandwidth = 0.2;
  o.denoise_degree = 1;
  MotpeSampler s(space, o, 1);
  std::vector<CompletedTrial> trials = {
      {{{"a", 0.0}}, {0.0, 3.0}, {1, 0}}, {{{"a", 0.5}}, {1.0, 2.0}, {1, 0}}, {{{"a", 1.0}}, {0.0, 1.0}, {1, 0}}};
  auto v = s.split_values(trials);
  const double w = std::exp(-3.125);
  EXPECT_NEAR(v[1][0], 1.0 / (2 * w + 1), 1e-9);
  EXPECT_NEAR(v[0][0], v[2][0], 1e-12);  // mirror images
  EXPECT_EQ(v[0][1], 3.0);
  EXPECT_EQ(v[1][1], 2.0);
  EXPECT_EQ(v[2][1], 1.0);
  // Off, or with a trial whose value is not marked noisy (an Optuna-written trial): untouched.
  o.denoise_bandwidth = 0;
  EXPECT_EQ(MotpeSampler(space, o, 1).split_values(trials)[1][0], 1.0);
  trials[2].noisy.clear();
  EXPECT_EQ(s.split_values(trials)[1][0], 1.0);
}

TEST(Motpe, DenoisingReproducesALinearSurfaceAndPullsInALuckyZero) {
  // A local-linear fit is exact on a plane, whatever the weights (up to the small ridge on the
  // slopes): 40 trials on rate = 0.02 + 0.03 a - 0.01 b come back within 1e-4.
  auto space = *parse_search_space("a=0:1,b=0:1");
  TpeOptions o;
  MotpeSampler s(space, o, 1);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<CompletedTrial> plane;
  for (int i = 0; i < 40; ++i) {
    const double a = u(rng), b = u(rng);
    plane.push_back({{{"a", a}, {"b", b}}, {0.02 + 0.03 * a - 0.01 * b, b}, {1, 0}});
  }
  auto v = s.split_values(plane);
  for (size_t i = 0; i < plane.size(); ++i) EXPECT_NEAR(v[i][0], plane[i].values[0], 1e-4) << i;
  // A flat rate of 0.05 on a 5 x 5 grid, where the centre trial drew 0 failures: its neighbours
  // outvote the draw, and the split no longer puts it alone on the front.
  std::vector<CompletedTrial> grid;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j)
      grid.push_back({{{"a", i / 4.0}, {"b", j / 4.0}}, {i == 2 && j == 2 ? 0.0 : 0.05, 0.5}, {1, 0}});
  v = s.split_values(grid);
  EXPECT_GT(v[12][0], 0.025);
  EXPECT_LT(v[12][0], 0.05);
}

TEST(Motpe, QuadraticDenoisingFollowsAValleyThatLinesCutAcross) {
  // A valley in a and a slope in b: rate = 0.002 + 0.05 (a - 0.5)^2 + 0.01 b, on a 5 x 5 grid with
  // no noise. Each parameter's square is in the degree-2 model, so it reproduces the surface at
  // every trial, the valley's floor included (up to the small ridge: 1.3e-6 here). Lines at the
  // default bandwidth (0.8) average the two walls into the floor: at a = 0.5 they overestimate by
  // 0.0058 (the NumPy computation of the same fit), and the floor looks barely better than the
  // trials beside it (0.0004 instead of 0.0031).
  auto space = *parse_search_space("a=0:1,b=0:1");
  auto rate = [](double a, double b) { return 0.002 + 0.05 * (a - 0.5) * (a - 0.5) + 0.01 * b; };
  std::vector<CompletedTrial> grid;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) grid.push_back({{{"a", i / 4.0}, {"b", j / 4.0}}, {rate(i / 4.0, j / 4.0), 0}, {1, 0}});
  TpeOptions o;
  ASSERT_EQ(o.denoise_degree, 2);
  auto v = MotpeSampler(space, o, 1).split_values(grid);
  for (size_t t = 0; t < grid.size(); ++t) EXPECT_NEAR(v[t][0], grid[t].values[0], 1e-5) << t;
  o.denoise_degree = 1;
  v = MotpeSampler(space, o, 1).split_values(grid);
  const size_t floor = 2 * 5 + 2, wall = 1 * 5 + 2;  // (a 0.5, b 0.5) and (a 0.25, b 0.5)
  EXPECT_GT(v[floor][0] - grid[floor].values[0], 0.004);
  EXPECT_LT(v[wall][0] - v[floor][0], 0.5 * (grid[wall].values[0] - grid[floor].values[0]));
  // Too few trials for a square per parameter (two parameters need 3d + 1 = 7): six trials get
  // lines whatever the degree; a seventh brings the squares in.
  std::vector<CompletedTrial> few;
  for (auto [a, b] : std::vector<std::pair<double, double>>{
           {0, 0}, {0.25, 0.5}, {0.5, 1}, {0.75, 0.25}, {1, 0.75}, {0.5, 0}, {0.25, 1}})
    few.push_back({{{"a", a}, {"b", b}}, {rate(a, b), 0}, {1, 0}});
  auto smoothed = [&](int degree, size_t n) {
    TpeOptions d;
    d.denoise_degree = degree;
    return MotpeSampler(space, d, 1).split_values({few.begin(), few.begin() + static_cast<std::ptrdiff_t>(n)});
  };
  EXPECT_EQ(smoothed(2, 6), smoothed(1, 6));
  EXPECT_NE(smoothed(2, 7), smoothed(1, 7));
  EXPECT_NEAR(smoothed(2, 7)[3][0], rate(0.75, 0.25), 1e-4);
}

TEST(Motpe, SurrogatePredictsAValleyAwayFromTheTrials) {
  // rate = 0.002 + 0.05 (a - 0.5)^2 + 0.01 b measured on a 5 x 5 grid (no noise, flagged noisy),
  // deviation = |b - 0.5| (a V the regression cannot follow at its tip). Between the trials the
  // local quadratic reproduces the rate (a sum of squares and a line: exact up to the ridge);
  // the deviation, given as an exact objective, is computed, and without it the fit misses the tip.
  auto space = *parse_search_space("a=0:1,b=0:1");
  auto rate = [](double a, double b) { return 0.002 + 0.05 * (a - 0.5) * (a - 0.5) + 0.01 * b; };
  std::vector<CompletedTrial> grid;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      const double a = i / 4.0, b = j / 4.0;
      grid.push_back({{{"a", a}, {"b", b}}, {rate(a, b), std::fabs(b - 0.5)}, {1, 0}});
    }
  const std::vector<std::map<std::string, double>> at = {{{"a", 0.37}, {"b", 0.5}}, {{"a", 0.9}, {"b", 0.13}}};
  MotpeSampler s(space, TpeOptions{}, 1);
  auto fitted = s.predict(grid, at);
  ASSERT_EQ(fitted.size(), 2u);
  for (size_t c = 0; c < at.size(); ++c) EXPECT_NEAR(fitted[c][0], rate(at[c].at("a"), at[c].at("b")), 1e-5) << c;
  EXPECT_GT(fitted[0][1], 0.01);  // the smoothed V at its tip, b = 0.5
  s.set_exact_objectives({{}, [](const std::map<std::string, double>& p) { return std::fabs(p.at("b") - 0.5); }});
  auto exact = s.predict(grid, at);
  EXPECT_EQ(exact[0][1], 0.0);
  EXPECT_DOUBLE_EQ(exact[1][1], 0.37);
  EXPECT_EQ(exact[0][0], fitted[0][0]);
}

TEST(Motpe, DeviationObjectivesAreExact) {
  // repetition_penalty's neutral value is 1, min_p's 0: |1.03 - 1| and |0.9 - 1|; a parameter the
  // space leaves out sits at its neutral value. Measured objectives and unknown fields have none.
  const auto rp = exact_objective("repetition_penalty_deviation");
  ASSERT_TRUE(rp);
  EXPECT_NEAR(rp({{"repetition_penalty", 1.03}}), 0.03, 1e-12);
  EXPECT_NEAR(rp({{"repetition_penalty", 0.9}, {"min_p", 0.05}}), 0.1, 1e-12);
  EXPECT_EQ(rp({{"temperature", 0.8}}), 0.0);
  EXPECT_NEAR(exact_objective("min_p_deviation")({{"min_p", 0.05}}), 0.05, 1e-12);
  EXPECT_FALSE(exact_objective("failure_rate"));
  EXPECT_FALSE(exact_objective("e2e_ms.p99"));
  EXPECT_FALSE(exact_objective("bogus_deviation"));
  EXPECT_FALSE(exact_objective("_deviation"));
}

TEST(Motpe, LargestGainIsTheHypervolumeAPredictionAdds) {
  // Front (1,3), (3,1); reference 1.1 x its worst = (3.3, 3.3). What each prediction adds:
  // (2,2): the square [2,3] x [2,3] = 1; (0.5,3.2): [0.5,1] x [3.2,3.3] = 0.05; (4,4) and (3,3):
  // nothing (beyond the reference, dominated); (1.5,1.5): [1.5,3] x [1.5,3] = 2.25.
  const std::vector<std::vector<double>> front = {{1, 3}, {3, 1}};
  EXPECT_EQ(MotpeSampler::largest_gain(front, {{2, 2}, {0.5, 3.2}, {4, 4}}), 0);
  EXPECT_EQ(MotpeSampler::largest_gain(front, {{0.5, 3.2}, {4, 4}}), 0);
  EXPECT_EQ(MotpeSampler::largest_gain(front, {{2, 2}, {0.5, 3.2}, {4, 4}, {1.5, 1.5}}), 3);
  EXPECT_EQ(MotpeSampler::largest_gain(front, {{4, 4}, {3, 3}}), -1);
  EXPECT_EQ(MotpeSampler::largest_gain(front, {{std::nan(""), 0}, {2}}), -1);  // unusable predictions
  EXPECT_EQ(MotpeSampler::largest_gain({}, {{2, 2}}), -1);
}

TEST(Motpe, WithNothingToGainTheSurrogateLeavesTpesPick) {
  // A trial at (0, 0) on exact objectives f = (a, b) dominates every prediction, so no candidate
  // adds hypervolume and the proposal is TPE's own pick from the same draws: the proposal with the
  // surrogate off. Without that trial, the surrogate picks differently.
  auto space = *parse_search_space("a=0:1,b=0:1");
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<CompletedTrial> trials;
  for (int i = 0; i < 15; ++i) {
    const double a = u(rng), b = u(rng);
    trials.push_back({{{"a", a}, {"b", b}}, {a, b}, {0, 0}});
  }
  TpeOptions off;
  off.surrogate_bandwidth = 0;
  auto with_ideal = trials;
  with_ideal.push_back({{{"a", 0.0}, {"b", 0.0}}, {0, 0}, {0, 0}});
  MotpeSampler on(space, TpeOptions{}, 9);
  on.set_exact_objectives({[](const std::map<std::string, double>& p) { return p.at("a"); },
                           [](const std::map<std::string, double>& p) { return p.at("b"); }});
  EXPECT_EQ(on.propose(with_ideal, 16), MotpeSampler(space, off, 9).propose(with_ideal, 16));
  EXPECT_NE(on.propose(trials, 16), MotpeSampler(space, off, 9).propose(trials, 16));
}

std::vector<CompletedTrial> run(const MotpeSampler& s, const Evaluator& f, int n) {
  std::vector<CompletedTrial> trials;
  for (int i = 0; i < n; ++i) {
    auto p = s.propose(trials, static_cast<uint64_t>(i));
    trials.push_back(
        {p, (*f(p, 1 << 20, static_cast<uint64_t>(i))).details["true_values"].get<std::vector<double>>(), {}});
  }
  return trials;
}

class MotpeModes : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(UnivariateAndMultivariate, MotpeModes, ::testing::Bool());

TEST_P(MotpeModes, SeededProposalsReproduceAndStayInTheSpace) {
  auto space = *parse_search_space("a=0:1,b=1e-3:1:log,c=0:0.1:0.01,k=1:50:int");
  TpeOptions o;
  o.multivariate = GetParam();
  MotpeSampler s1(space, o, 7), s2(space, o, 7), s3(space, o, 8);
  std::vector<CompletedTrial> trials;
  for (int i = 0; i < 30; ++i) {
    auto p = s1.propose(trials, static_cast<uint64_t>(i));
    EXPECT_EQ(p, s2.propose(trials, static_cast<uint64_t>(i)));
    for (const auto& ps : space) {
      const double v = p.at(ps.name);
      EXPECT_TRUE(ps.contains(v)) << ps.name << " " << v;
      if (ps.integer) {
        EXPECT_EQ(v, std::round(v));
      }
      if (ps.step > 0) {
        EXPECT_NEAR(v / ps.step, std::round(v / ps.step), 1e-6) << v;
      }
    }
    trials.push_back({p, {p.at("a") + p.at("c"), std::fabs(p.at("b") - 0.1) + p.at("k") / 50}, {}});
  }
  EXPECT_NE(s3.propose(trials, 30), s1.propose(trials, 30));
}

TEST(Motpe, StartupTrialsFormALatinHypercube) {
  // 10 startup trials: each parameter's range (in the sampler's space: log for a log scale) is
  // cut into 10 strata and every stratum is drawn exactly once. Independent draws (Optuna's
  // RandomSampler, --random-startup) leave strata empty: 10 draws hit 10 distinct strata with
  // probability 10!/10^10 = 0.04%.
  auto space = *parse_search_space("a=0:1,b=1e-3:1:log");
  auto stratum = [](const ParamSpec& p, double v) {
    const double u =
        p.log ? (std::log(v) - std::log(p.low)) / (std::log(p.high) - std::log(p.low)) : (v - p.low) / (p.high - p.low);
    return static_cast<int>(std::floor(u * 10));
  };
  for (uint64_t seed = 0; seed < 5; ++seed) {
    for (bool lhs : {true, false}) {
      TpeOptions o;
      o.latin_hypercube_startup = lhs;
      MotpeSampler s(space, o, seed);
      std::vector<CompletedTrial> trials;
      std::map<std::string, std::set<int>> seen;
      for (uint64_t i = 0; i < 10; ++i) {
        auto p = s.propose(trials, i);
        for (const auto& ps : space) seen[ps.name].insert(stratum(ps, p.at(ps.name)));
        trials.push_back({p, {p.at("a"), p.at("b")}, {}});
      }
      for (const auto& ps : space) {
        if (lhs) {
          EXPECT_EQ(seen[ps.name].size(), 10u) << ps.name << " seed " << seed;
        } else {
          EXPECT_LT(seen[ps.name].size(), 10u) << ps.name << " seed " << seed;
        }
      }
    }
  }
}

TEST_P(MotpeModes, LearnsBeyondRandomSearch) {
  // On noise-free ZDT1, 40 TPE trials (10 random) reach a larger hypervolume than 40 random ones,
  // in the median of 9 seeds.
  auto space = *test_problem_space("zdt1");
  auto f = test_problem("zdt1");
  std::vector<double> tpe, rnd;
  for (uint64_t seed = 0; seed < 9; ++seed) {
    TpeOptions random_only;
    random_only.n_startup_trials = 1000;
    auto hv = [](const std::vector<CompletedTrial>& t) {
      std::vector<std::vector<double>> v;
      for (const auto& x : t) v.push_back(x.values);
      return hypervolume(v, {1.1, 11});
    };
    TpeOptions o;
    o.multivariate = GetParam();
    tpe.push_back(hv(run(MotpeSampler(space, o, seed), f, 40)));
    rnd.push_back(hv(run(MotpeSampler(space, random_only, seed), f, 40)));
  }
  EXPECT_GT(percentile(tpe, 0.5), percentile(rnd, 0.5));
}

TEST(Motpe, SurrogateFindsLargerFrontsOnTheNoisyFailureProblem) {
  // The failure test problem as `coda tune --test-problem failure` runs it: 24 trials whose
  // failure rate is a Binomial(120, p) draw. Judged on the noise-free values of what each found,
  // picking TPE's candidates by predicted hypervolume gain beats TPE's own pick in the median of
  // 15 seeds (docs/lab.md measures it over 200 seeds per set against Optuna: about +1.7%).
  auto space = *test_problem_space("failure");
  auto f = test_problem("failure");
  auto hv_found = [&](const TpeOptions& o, uint64_t seed) {
    MotpeSampler s(space, o, seed);
    std::vector<CompletedTrial> trials;
    std::vector<std::vector<double>> truth;
    for (int i = 0; i < 24; ++i) {
      auto p = s.propose(trials, static_cast<uint64_t>(i));
      auto e = *f(p, 120, seed * 1000 + static_cast<uint64_t>(i));
      trials.push_back({p, e.values, {1, 0}});
      truth.push_back(e.details["true_values"].get<std::vector<double>>());
    }
    return hypervolume(truth, {0.05, 0.11});
  };
  TpeOptions off;
  off.surrogate_bandwidth = 0;
  std::vector<double> with, without;
  for (uint64_t seed = 0; seed < 15; ++seed) {
    with.push_back(hv_found(TpeOptions{}, seed));
    without.push_back(hv_found(off, seed));
  }
  EXPECT_GT(percentile(with, 0.5), percentile(without, 0.5));
}

TEST(SearchSpace, ParsesAndRejects) {
  auto s = parse_search_space("temperature=0.7:0.9,top_k=1:100:int,min_p=0:0.2:0.01,lr=1e-4:1:log");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->size(), 4u);
  EXPECT_TRUE((*s)[1].integer);
  EXPECT_DOUBLE_EQ((*s)[2].step, 0.01);
  EXPECT_TRUE((*s)[3].log);
  EXPECT_EQ((*s)[0].optuna_distribution(),
            R"({"name":"FloatDistribution","attributes":{"step":null,"low":0.7,"high":0.9,"log":false}})");
  for (const char* bad : {"", "t", "t=1", "t=2:1", "t=a:b", "t=0:1:weird", "t=0:1:log", "k=0.5:3:int", "t=0:1,t=0:2"})
    EXPECT_FALSE(parse_search_space(bad).ok()) << bad;
}

}  // namespace
}  // namespace coda::lab
