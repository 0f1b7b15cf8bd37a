// Sampling processors against hand-computed probabilities, the chain's determinism and its
// parameter validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "gguf/gguf.h"
#include "sampling/bad_words.h"
#include "sampling/chain.h"
#include "sampling/dry.h"
#include "sampling/dynamic_temperature.h"
#include "sampling/frequency_presence.h"
#include "sampling/logit_bias.h"
#include "sampling/min_p.h"
#include "sampling/no_repeat_ngram.h"
#include "sampling/repetition_penalty.h"
#include "sampling/temperature.h"
#include "sampling/token_masks.h"
#include "sampling/top_k.h"
#include "sampling/top_n_sigma.h"
#include "sampling/top_p.h"
#include "sampling/typical_p.h"
#include "sampling/xtc.h"
#include "tokenizer/vocab.h"

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
SamplerRng g_rng(0);  // processors other than XTC ignore it

TEST(Processors, TopKRenormalisesTheKBest) {
  Candidates c = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  TopK(3).apply(c, kNone, g_rng);
  auto d = dist(c);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NEAR(d[3], 0.4 / 0.9, 1e-5);  // 0.444
  EXPECT_NEAR(d[2], 0.3 / 0.9, 1e-5);  // 0.333
  EXPECT_NEAR(d[1], 0.2 / 0.9, 1e-5);  // 0.222
  Candidates all = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  TopK(10).apply(all, kNone, g_rng);  // k > vocab: unchanged
  EXPECT_EQ(all.size(), 4u);
}

TEST(Processors, TopPKeepsTheNucleus) {
  Candidates c = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  TopP(0.65f).apply(c, kNone, g_rng);  // 0.4 < 0.65 <= 0.4 + 0.3
  auto d = dist(c);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[3], 0.4 / 0.7, 1e-5);
  EXPECT_NEAR(d[2], 0.3 / 0.7, 1e-5);
  Candidates one = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  TopP(0.1f).apply(one, kNone, g_rng);  // the most probable token always stays
  EXPECT_EQ(one.size(), 1u);
  Candidates all = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  TopP(1.0f).apply(all, kNone, g_rng);
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
    TopP(p).apply(fast, kNone, g_rng);
    TopP(p).apply(full, kNone, g_rng);
    EXPECT_EQ(fast.ids, full.ids) << p;
  }
}

TEST(Processors, MinPDropsTokensBelowAFractionOfTheTop) {
  Candidates c = from_probs({0.1f, 0.2f, 0.3f, 0.4f});
  MinP(0.6f).apply(c, kNone, g_rng);  // threshold 0.24
  auto d = dist(c);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[3], 0.4 / 0.7, 1e-5);
}

TEST(Processors, TemperatureScalesLogits) {
  const float logits[2] = {1.0f, 2.0f};
  Candidates c;
  c.assign(logits, 2);
  Temperature(0.5f).apply(c, kNone, g_rng);
  const double e2 = std::exp(2.0), e4 = std::exp(4.0);
  EXPECT_NEAR(c.probs()[1], e4 / (e2 + e4), 1e-6);
}

TEST(Processors, TypicalKeepsTheMostTypicalMass) {
  // H = 1.0297; |surprisal - H| = 0.337 (p 0.5), 0.174 (p 0.3), 0.580 (p 0.2): order 1, 0, 2.
  Candidates c = from_probs({0.5f, 0.3f, 0.2f});
  TypicalP(0.5f).apply(c, kNone, g_rng);
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
  RepetitionPenalty(2.0f, 0).apply(c, h, g_rng);
  EXPECT_FLOAT_EQ(c.logits[0], 1.0f);
  EXPECT_FLOAT_EQ(c.logits[1], -4.0f);
  EXPECT_FLOAT_EQ(c.logits[2], 1.0f);
  Candidates w;
  w.assign(logits, 3);
  RepetitionPenalty(2.0f, 1).apply(w, h, g_rng);  // window of 1: only the last token (1)
  EXPECT_FLOAT_EQ(w.logits[0], 2.0f);
  EXPECT_FLOAT_EQ(w.logits[1], -4.0f);
}

TEST(Processors, FrequencyAndPresenceOverTheOutputOnly) {
  const float logits[3] = {0.0f, 0.0f, 0.0f};
  Candidates c;
  c.assign(logits, 3);
  TokenHistory h{{1, 1, 1}, {0, 0, 2}};
  FrequencyPresencePenalty(0.5f, 1.0f).apply(c, h, g_rng);
  EXPECT_FLOAT_EQ(c.logits[0], -2.0f);  // 0.5 * 2 + 1
  EXPECT_FLOAT_EQ(c.logits[1], 0.0f);   // only in the prompt: untouched
  EXPECT_FLOAT_EQ(c.logits[2], -1.5f);
}

TEST(Processors, EdgeCases) {
  // All logits equal: ties break by id.
  const float flat[4] = {1, 1, 1, 1};
  Candidates c;
  c.assign(flat, 4);
  TopK(2).apply(c, kNone, g_rng);
  EXPECT_EQ(c.ids, (std::vector<int32_t>{0, 1}));
  // -inf logits get probability 0 and are never drawn.
  Candidates m = from_probs({0.0f, 1.0f, 0.0f});
  EXPECT_EQ(m.probs()[0], 0.0f);
  EXPECT_EQ(m.probs()[1], 1.0f);
  LogitBias({{1, -100.0f}}).apply(m, kNone, g_rng);
  EXPECT_NEAR(m.probs()[1], 1.0f, 1e-6);  // the only finite candidate keeps all the mass
}

Candidates from_logits(std::vector<float> logits) {
  Candidates c;
  c.assign(logits.data(), static_cast<int32_t>(logits.size()));
  return c;
}

TEST(Processors, FastPathsEqualTheDefinitions) {
  // Top-k by heap selection and min-p in logit space against a full sort, on a large vocabulary
  // with many ties (ties break by id).
  std::mt19937 rng(11);
  std::vector<float> logits(50000);
  for (auto& l : logits) l = static_cast<float>(static_cast<int>(rng() % 2000)) / 100.0f;
  Candidates full;
  full.assign(logits.data(), 50000);
  full.sort();
  for (size_t k : {1u, 40u, 1000u}) {
    Candidates c;
    c.assign(logits.data(), 50000);
    TopK(static_cast<int>(k)).apply(c, kNone, g_rng);
    ASSERT_EQ(c.size(), k);
    for (size_t i = 0; i < k; ++i) EXPECT_EQ(c.ids[i], full.ids[i]) << "k=" << k << " i=" << i;
  }
  Candidates c;
  c.assign(logits.data(), 50000);
  MinP(0.3f).apply(c, kNone, g_rng);
  const std::vector<float> p = full.probs();
  std::set<int32_t> want;
  for (size_t i = 0; i < full.size(); ++i)
    if (p[i] >= 0.3f * p[0] * (1 - 1e-6f)) want.insert(full.ids[i]);
  EXPECT_EQ(std::set<int32_t>(c.ids.begin(), c.ids.end()), want);
}

TEST(Processors, TopNSigmaKeepsLogitsWithinNDeviationsOfTheMax) {
  // logits 0..3: mean 1.5, sigma sqrt(1.25) = 1.118; n = 1 keeps logits >= 1.882, n = 2 >= 0.764.
  Candidates c = from_logits({0, 1, 2, 3});
  TopNSigma(1).apply(c, kNone, g_rng);
  EXPECT_EQ(c.ids, (std::vector<int32_t>{2, 3}));
  c = from_logits({0, 1, 2, 3, -INFINITY});  // -inf is left out of the statistics
  TopNSigma(2).apply(c, kNone, g_rng);
  EXPECT_EQ(c.ids, (std::vector<int32_t>{1, 2, 3}));
  c = from_logits({1, 1, 1});  // sigma 0: everything equal to the max stays
  TopNSigma(1).apply(c, kNone, g_rng);
  EXPECT_EQ(c.size(), 3u);
}

TEST(Processors, DynamicTemperatureFollowsTheNormalisedEntropy) {
  // p = {0.7, 0.1, 0.1, 0.1}: H = 0.94045, H / ln 4 = 0.67839; T = 1, range 0.5, exponent 1:
  // T_dyn = 0.5 + (1.5 - 0.5) * 0.67839 = 1.17839, so p_i is proportional to p_i^(1 / 1.17839).
  Candidates c = from_probs({0.7f, 0.1f, 0.1f, 0.1f});
  DynamicTemperature(1.0f, 0.5f, 1.0f).apply(c, kNone, g_rng);
  const double t = 1.17839;
  const double a = std::pow(0.7, 1 / t), b = std::pow(0.1, 1 / t), z = a + 3 * b;
  auto d = dist(c);
  EXPECT_NEAR(d[0], a / z, 1e-4);
  EXPECT_NEAR(d[1], b / z, 1e-4);
  // Uniform: maximal entropy, the hottest end (no change to a uniform distribution).
  c = from_probs({0.25f, 0.25f, 0.25f, 0.25f});
  DynamicTemperature(1.0f, 0.5f, 1.0f).apply(c, kNone, g_rng);
  EXPECT_NEAR(dist(c)[2], 0.25, 1e-6);
  // Exponent 2 on the same distribution: T_dyn = 0.5 + 0.67839^2 = 0.96021.
  c = from_probs({0.7f, 0.1f, 0.1f, 0.1f});
  DynamicTemperature(1.0f, 0.5f, 2.0f).apply(c, kNone, g_rng);
  const double t2 = 0.96021, a2 = std::pow(0.7, 1 / t2), b2 = std::pow(0.1, 1 / t2);
  EXPECT_NEAR(dist(c)[0], a2 / (a2 + 3 * b2), 1e-4);
}

TEST(Processors, XtcRemovesTopChoicesButTheLeastLikelyOfThem) {
  // 0.5, 0.3 and 0.15 are above 0.1: keep 0.15 and everything below -> {0.15, 0.05} -> {0.75, 0.25}.
  Candidates c = from_probs({0.5f, 0.3f, 0.15f, 0.05f});
  Xtc(1.0f, 0.1f).apply(c, kNone, g_rng);
  auto d = dist(c);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[2], 0.75, 1e-6);
  EXPECT_NEAR(d[3], 0.25, 1e-6);
  c = from_probs({0.5f, 0.3f, 0.15f, 0.05f});
  Xtc(1.0f, 0.4f).apply(c, kNone, g_rng);  // one token above: unchanged
  EXPECT_EQ(c.size(), 4u);
  c = from_probs({0.5f, 0.3f, 0.15f, 0.05f});
  Xtc(0.0f, 0.1f).apply(c, kNone, g_rng);  // never triggers
  EXPECT_EQ(c.size(), 4u);
}

TEST(Processors, DryPenalisesTheTokenThatExtendsARepeat) {
  // "1 2 3 4 1 2 3": the tail "1 2 3" occurred before, followed by 4. L = 3, allowed 2:
  // penalty = 0.8 * 1.75^(3 - 2) = 1.4 on token 4 only.
  TokenHistory h;
  h.generated = {1, 2, 3, 4, 1, 2, 3};
  Candidates c = from_logits({0, 0, 0, 0, 0, 0});
  Dry(0.8f, 1.75f, 2, 0, {}).apply(c, h, g_rng);
  EXPECT_EQ(c.logits, (std::vector<float>{0, 0, 0, 0, -1.4f, 0}));
  // Token 2 is a sequence breaker: the match stops at it (L = 1 < 2), no penalty.
  c = from_logits({0, 0, 0, 0, 0, 0});
  Dry(0.8f, 1.75f, 2, 0, {2}).apply(c, h, g_rng);
  EXPECT_EQ(c.logits, (std::vector<float>{0, 0, 0, 0, 0, 0}));
  // A window of 4 tokens ("4 1 2 3") holds no earlier "... 3": no penalty.
  c = from_logits({0, 0, 0, 0, 0, 0});
  Dry(0.8f, 1.75f, 2, 4, {}).apply(c, h, g_rng);
  EXPECT_EQ(c.logits, (std::vector<float>{0, 0, 0, 0, 0, 0}));
  // A long loop: "5 5 5 5 5 5" -> the tail of 5 matches L = 5 before the last 5: 1 * 2^(5-2) = 8.
  h.generated = {5, 5, 5, 5, 5, 5};
  c = from_logits({0, 0, 0, 0, 0, 0});
  Dry(1.0f, 2.0f, 2, 0, {}).apply(c, h, g_rng);
  EXPECT_FLOAT_EQ(c.logits[5], -8.0f);
}

TEST(Processors, NoRepeatNgramBansCompletions) {
  TokenHistory h;
  h.prompt = {5, 6, 7};
  h.generated = {5, 6};
  auto banned = [&](int n) {
    Candidates c = from_logits(std::vector<float>(9, 0.0f));
    NoRepeatNgram(n).apply(c, h, g_rng);
    std::vector<int32_t> out;
    for (size_t i = 0; i < c.size(); ++i)
      if (std::isinf(c.logits[i])) out.push_back(c.ids[i]);
    return out;
  };
  EXPECT_EQ(banned(3), (std::vector<int32_t>{7}));  // "5 6" was followed by 7
  EXPECT_EQ(banned(2), (std::vector<int32_t>{7}));  // "6" was followed by 7
  EXPECT_EQ(banned(1), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_TRUE(banned(6).empty());  // longer than the text
}

TEST(Processors, MasksBadWordsMinTokensIgnoreEos) {
  TokenHistory h;
  h.generated = {1, 3};
  Candidates c = from_logits(std::vector<float>(10, 0.0f));
  BadWords({{9}, {3, 4}, {2, 5}}).apply(c, h, g_rng);  // 9 always; 4 after 3; 5 only after 2
  EXPECT_TRUE(std::isinf(c.logits[9]) && std::isinf(c.logits[4]));
  EXPECT_FALSE(std::isinf(c.logits[5]));
  c = from_logits(std::vector<float>(10, 0.0f));
  MinTokens(3, {0, 7}).apply(c, h, g_rng);  // 2 generated < 3: EOS and stop ids masked
  EXPECT_TRUE(std::isinf(c.logits[0]) && std::isinf(c.logits[7]));
  h.generated.push_back(4);
  c = from_logits(std::vector<float>(10, 0.0f));
  MinTokens(3, {0, 7}).apply(c, h, g_rng);  // reached: nothing masked
  EXPECT_FALSE(std::isinf(c.logits[0]));
  IgnoreEos({0}).apply(c, h, g_rng);
  EXPECT_TRUE(std::isinf(c.logits[0]));
}

TEST(Chain, AllowedTokenIdsHoldUnderGreedyAndSampling) {
  SamplingParams p;
  p.allowed_token_ids = {1, 3};
  const float logits[5] = {4.0f, 0.5f, 3.0f, 0.2f, 5.0f};  // the two best are outside the list
  for (float temperature : {0.0f, 1.0f, 2.0f}) {
    p.temperature = temperature;
    auto chain = SamplerChain::create(p, 5);
    ASSERT_TRUE(chain);
    SamplerRng rng(7);
    int seen[5] = {};
    for (int i = 0; i < 400; ++i) ++seen[chain->sample(logits, 5, kNone, rng)];
    EXPECT_EQ(seen[0] + seen[2] + seen[4], 0) << "temperature " << temperature;
    if (temperature == 0) {
      EXPECT_EQ(seen[1], 400);  // the better of the allowed two
    } else {
      EXPECT_GT(seen[3], 0);  // both allowed ones are drawn
    }
  }
  p.allowed_token_ids = {1, 5};
  EXPECT_FALSE(SamplerChain::create(p, 5));  // 5 is outside a 5-token vocabulary
  p.allowed_token_ids = {-1};
  EXPECT_FALSE(SamplerChain::create(p, 5));
}

TEST(Chain, GreedyHonoursMasks) {
  SamplerVocab v;
  v.n_vocab = 4;
  v.eos_ids = {2};
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  auto chain = SamplerChain::create(p, v);
  ASSERT_TRUE(chain);
  const float logits[4] = {0.1f, 0.5f, 3.0f, 0.2f};  // EOS (2) is the argmax
  SamplerRng rng(0);
  EXPECT_EQ(chain->sample(logits, 4, kNone, rng), 1);
  p.ignore_eos = false;
  p.min_tokens = 1;
  chain = SamplerChain::create(p, v);
  EXPECT_EQ(chain->sample(logits, 4, kNone, rng), 1);  // nothing generated yet
}

TEST(Chain, SamplerVocabFromATokenizer) {
  auto f = GgufFile::open(std::string(CODA_TEST_DATA) + "/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(f);
  auto vocab = Vocab::from_gguf(*f);
  ASSERT_TRUE(vocab);
  SamplingParams p;
  p.bad_words = {"hello"};
  p.dry_multiplier = 0.8f;
  auto v = SamplerVocab::from(*vocab, p, {13});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->eos_ids, (std::vector<int32_t>{2}));  // </s>
  EXPECT_EQ(v->stop_ids, (std::vector<int32_t>{13}));
  ASSERT_FALSE(v->bad_word_ids.empty());
  for (const auto& seq : v->bad_word_ids) EXPECT_EQ(vocab->decode(seq).find("hello") != std::string::npos, true);
  EXPECT_TRUE(v->dry_breakers.count(vocab->find("<0x0A>")));  // the newline byte token
  EXPECT_TRUE(v->dry_breakers.count(vocab->find(":")));
  EXPECT_FALSE(v->dry_breakers.count(vocab->find("▁the")));
  EXPECT_FALSE(SamplerVocab::from(*vocab, p, {40000}));
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
      {"top_n_sigma", [](SamplingParams& p) { p.top_n_sigma = 100; }, true},
      {"top_n_sigma", [](SamplingParams& p) { p.top_n_sigma = -1; }, true},
      {"top_n_sigma", [](SamplingParams& p) { p.top_n_sigma = 101; }, false},
      {"dynatemp_range", [](SamplingParams& p) { p.dynatemp_range = 5; }, true},
      {"dynatemp_range", [](SamplingParams& p) { p.dynatemp_range = -0.1f; }, false},
      {"dynatemp_exponent", [](SamplingParams& p) { p.dynatemp_exponent = 0; }, false},
      {"dry_multiplier", [](SamplingParams& p) { p.dry_multiplier = 10; }, true},
      {"dry_multiplier", [](SamplingParams& p) { p.dry_multiplier = -1; }, false},
      {"dry_base", [](SamplingParams& p) { p.dry_base = 1; }, false},
      {"dry_allowed_length", [](SamplingParams& p) { p.dry_allowed_length = 0; }, false},
      {"dry_penalty_last_n", [](SamplingParams& p) { p.dry_window = -1; }, false},
      {"dry_sequence_breakers", [](SamplingParams& p) { p.dry_sequence_breakers = {""}; }, false},
      {"xtc_probability", [](SamplingParams& p) { p.xtc_probability = 1; }, true},
      {"xtc_probability", [](SamplingParams& p) { p.xtc_probability = 1.1f; }, false},
      {"xtc_threshold", [](SamplingParams& p) { p.xtc_threshold = -0.1f; }, false},
      {"no_repeat_ngram_size", [](SamplingParams& p) { p.no_repeat_ngram_size = -1; }, false},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = -1; }, false},
      {"bad_words",
       [](SamplingParams& p) {
         p.bad_words = {"ok", ""};
       },
       false},
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
