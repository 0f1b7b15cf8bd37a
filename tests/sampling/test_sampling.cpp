// Sampling processors against hand-computed probabilities, the chain's determinism and its
// parameter validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "sampling/chain.h"
#include "sampling/frequency_presence.h"
#include "sampling/logit_bias.h"
#include "sampling/min_p.h"
#include "sampling/repetition_penalty.h"
#include "sampling/temperature.h"
#include "sampling/top_k.h"
#include "sampling/top_p.h"
#include "sampling/typical_p.h"

namespace coda {
namespace {

// Candidates whose softmax is exactly `probs` (logits = log p).
Candidates from_probs(std::vector<float> probs) {
  std::vector<float> logits;
  for (float p : probs) logits.push_back(p > 0 ? std::log(p) : -INFINITY);
  Candidates c;
  c.assign(logits.data(), static_cast<int32_t>(logits.size()));
  return c;
}

std::map<int32_t, float> dist(const Candidates& c) {
  std::map<int32_t, float> m;
  const auto p = c.probs();
  for (size_t i = 0; i < c.size(); ++i) m[c.ids[i]] = p[i];
  return m;
}

const TokenHistory kNone;

TEST(Processors, TopKRenormalisesTheKBest) {
  Candidates c = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  TopK(3).apply(c, kNone);
  auto d = dist(c);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NEAR(d[3], 0.4 / 0.9, 1e-5);  // 0.444
  EXPECT_NEAR(d[2], 0.3 / 0.9, 1e-5);  // 0.333
  EXPECT_NEAR(d[1], 0.2 / 0.9, 1e-5);  // 0.222
  Candidates all = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  TopK(10).apply(all, kNone);  // k > vocab: unchanged
  EXPECT_EQ(all.size(), 4u);
}

TEST(Processors, TopPKeepsTheNucleus) {
  Candidates c = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  TopP(0.65f).apply(c, kNone);  // 0.4 < 0.65 <= 0.4 + 0.3
  auto d = dist(c);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[3], 0.4 / 0.7, 1e-5);
  EXPECT_NEAR(d[2], 0.3 / 0.7, 1e-5);
  Candidates one = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  TopP(0.1f).apply(one, kNone);  // the most probable token always stays
  EXPECT_EQ(one.size(), 1u);
  Candidates all = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  TopP(1.0f).apply(all, kNone);
  EXPECT_EQ(all.size(), 4u);
}

// The partial-selection path of top-p (large vocabularies) keeps exactly what a full sort keeps.
TEST(Processors, TopPFastPathEqualsFullSort) {
  std::mt19937 rng(9);
  std::vector<float> logits(50000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = -1.2f * std::log(static_cast<float>(i + 1));
  std::shuffle(logits.begin(), logits.end(), rng);
  for (float p : {0.5f, 0.9f, 0.95f, 0.99f}) {
    Candidates fast;
    fast.assign(logits.data(), static_cast<int32_t>(logits.size()));
    Candidates full = fast;
    full.sort();  // sorted: takes the plain path
    TopP(p).apply(fast, kNone);
    TopP(p).apply(full, kNone);
    EXPECT_EQ(fast.ids, full.ids) << p;
  }
}

TEST(Processors, MinPDropsTokensBelowAFractionOfTheTop) {
  Candidates c = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  MinP(0.6f).apply(c, kNone);  // threshold 0.24
  auto d = dist(c);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[3], 0.4 / 0.7, 1e-5);
}

TEST(Processors, TemperatureScalesLogits) {
  const float logits[2] = {1.0f, 2.0f};
  Candidates c;
  c.assign(logits, 2);
  Temperature(0.5f).apply(c, kNone);
  const double e2 = std::exp(2.0), e4 = std::exp(4.0);
  EXPECT_NEAR(c.probs()[1], e4 / (e2 + e4), 1e-6);
}

TEST(Processors, TypicalKeepsTheMostTypicalMass) {
  // H = 1.0297; |surprisal - H| = 0.337 (p 0.5), 0.174 (p 0.3), 0.580 (p 0.2): order 1, 0, 2.
  Candidates c = from_probs({0.5f, 0.3f, 0.2f});
  TypicalP(0.5f).apply(c, kNone);
  auto d = dist(c);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[0], 0.5 / 0.8, 1e-5);
  EXPECT_NEAR(d[1], 0.3 / 0.8, 1e-5);
}

TEST(Processors, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  const float logits[3] = {2.0f, -2.0f, 1.0f};
  Candidates c;
  c.assign(logits, 3);
  TokenHistory h{{0}, {1}};  // token 0 in the prompt, token 1 generated
  RepetitionPenalty(2.0f, 0).apply(c, h);
  EXPECT_FLOAT_EQ(c.logits[0], 1.0f);
  EXPECT_FLOAT_EQ(c.logits[1], -4.0f);
  EXPECT_FLOAT_EQ(c.logits[2], 1.0f);
  Candidates w;
  w.assign(logits, 3);
  RepetitionPenalty(2.0f, 1).apply(w, h);  // window of 1: only the last token (1)
  EXPECT_FLOAT_EQ(w.logits[0], 2.0f);
  EXPECT_FLOAT_EQ(w.logits[1], -4.0f);
}

TEST(Processors, FrequencyAndPresenceOverTheOutputOnly) {
  const float logits[3] = {0.0f, 0.0f, 0.0f};
  Candidates c;
  c.assign(logits, 3);
  TokenHistory h{{1, 1, 1}, {0, 0, 2}};
  FrequencyPresencePenalty(0.5f, 1.0f).apply(c, h);
  EXPECT_FLOAT_EQ(c.logits[0], -2.0f);  // 0.5 * 2 + 1
  EXPECT_FLOAT_EQ(c.logits[1], 0.0f);   // only in the prompt: untouched
  EXPECT_FLOAT_EQ(c.logits[2], -1.5f);
}

TEST(Processors, EdgeCases) {
  // All logits equal: ties break by id.
  const float flat[4] = {1, 1, 1, 1};
  Candidates c;
  c.assign(flat, 4);
  TopK(2).apply(c, kNone);
  EXPECT_EQ(c.ids, (std::vector<int32_t>{0, 1}));
  // -inf logits get probability 0 and are never drawn.
  Candidates m = from_probs({0.0f, 1.0f, 0.0f});
  EXPECT_EQ(m.probs()[0], 0.0f);
  EXPECT_EQ(m.probs()[1], 1.0f);
  LogitBias({{1, -100.0f}}).apply(m, kNone);
  EXPECT_NEAR(m.probs()[1], 1.0f, 1e-6);  // the only finite candidate keeps all the mass
}

TEST(Chain, GreedyIsTheArgmaxAfterPenalties) {
  SamplingParams p;
  p.temperature = 0;
  const float logits[3] = {3.0f, 2.5f, 0.0f};
  auto chain = SamplerChain::create(p, 3);
  ASSERT_TRUE(chain.ok());
  SamplerRng rng(1);
  EXPECT_EQ(chain->sample(logits, 3, {}, rng), 0);
  p.repetition_penalty = 1.5f;  // 3.0 / 1.5 = 2.0 < 2.5
  auto penalised = SamplerChain::create(p, 3);
  EXPECT_EQ(penalised->sample(logits, 3, {{0}, {}}, rng), 1);
}

TEST(Chain, SameSeedSameTokensAndTheRightDistribution) {
  SamplingParams p;
  p.seed = 42;
  const std::vector<float> probs = {0.1f, 0.2f, 0.3f, 0.4f};
  std::vector<float> logits;
  for (float x : probs) logits.push_back(std::log(x));
  auto chain = SamplerChain::create(p, 4);
  ASSERT_TRUE(chain.ok());
  SamplerRng a(p.seed), b(p.seed);
  std::vector<int> counts(4, 0);
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const int32_t x = chain->sample(logits.data(), 4, {}, a);
    ASSERT_EQ(x, chain->sample(logits.data(), 4, {}, b));
    ++counts[static_cast<size_t>(x)];
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(counts[i] / static_cast<double>(n), probs[i], 0.01);
}

TEST(Validation, EveryParameterAtAndBeyondItsBounds) {
  struct Case {
    const char* what;
    std::function<void(SamplingParams&)> set;
    bool ok;
  };
  const std::vector<Case> cases = {
      {"temperature", [](SamplingParams& p) { p.temperature = 0; }, true},
      {"temperature", [](SamplingParams& p) { p.temperature = 2; }, true},
      {"temperature", [](SamplingParams& p) { p.temperature = 2.01f; }, false},
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }, false},
      {"temperature", [](SamplingParams& p) { p.temperature = NAN; }, false},
      {"top_p", [](SamplingParams& p) { p.top_p = 1; }, true},
      {"top_p", [](SamplingParams& p) { p.top_p = 0; }, false},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.5f; }, false},
      {"top_k", [](SamplingParams& p) { p.top_k = -1; }, true},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }, false},
      {"min_p", [](SamplingParams& p) { p.min_p = 1; }, true},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.5f; }, false},
      {"typical_p", [](SamplingParams& p) { p.typical_p = 0; }, false},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 2; }, true},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0; }, false},
      {"repetition window", [](SamplingParams& p) { p.repetition_window = -1; }, false},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -2; }, true},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = 2.5f; }, false},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = -3; }, false},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[5] = 100; }, true},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[10] = 1; }, false},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[-1] = 1; }, false},
      {"logit_bias value", [](SamplingParams& p) { p.logit_bias[1] = 101; }, false},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.set(p);
    const Status s = p.validate(10);
    EXPECT_EQ(s.ok(), c.ok) << c.what;
    if (!s.ok()) {
      EXPECT_EQ(s.message().rfind(c.what, 0), 0u) << s.message();
      EXPECT_NE(s.message().find("allowed"), std::string::npos) << s.message();
    }
  }
  SamplingParams bad;
  bad.temperature = 3;
  auto chain = SamplerChain::create(bad, 10);
  ASSERT_FALSE(chain.ok());
  EXPECT_EQ(chain.message(), "temperature: 3 is out of range; allowed [0, 2]");
}

}  // namespace
}  // namespace coda
