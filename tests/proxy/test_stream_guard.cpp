// The proxy's guard on a stream: text pieces, signals estimated from top-k logprobs (against
// hand-computed values and against the full distribution), loops seen on tokens and on text alone,
// rollback; vLLM's repetition_detection; continue_final_message; labelled metrics.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "chat/chat_template.h"
#include "guard/guard.h"
#include "guard/signals.h"
#include "proxy/stream_guard.h"
#include "server/metrics.h"

namespace coda {
namespace {

using proxy::StreamGuard;
using proxy::TextPieces;

std::vector<std::string> pieces_of(const std::string& text, size_t step) {
  TextPieces p;
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size(); i += step) p.feed(text.substr(i, step), out);
  p.finish(out);
  return out;
}

TEST(TextPieces, WordsWithTheirSpaceNumbersPunctuationWhitespaceRuns) {
  const std::string text = "Hello, world  42 times\n\nok";
  const std::vector<std::string> want = {"Hello", ",", " world", " ", " 42", " times", "\n\n", "ok"};
  EXPECT_EQ(pieces_of(text, text.size()), want);
  for (size_t step : {1, 2, 3, 5}) EXPECT_EQ(pieces_of(text, step), want) << "fed " << step << " bytes at a time";
  EXPECT_EQ(pieces_of(" città è", 1), (std::vector<std::string>{" città", " è"}));  // UTF-8 letters stay whole
  // Digits in groups of three, as Llama 3 cuts numbers: a run of zeros is a run of equal pieces.
  EXPECT_EQ(pieces_of("v 1234567 00000000", 2),
            (std::vector<std::string>{"v", " 123", "456", "7", " 000", "000", "00"}));
}

TEST(TopKSignals, HandComputedWithUnseenMass) {
  // Seen: 0.5, 0.25, 0.125; unseen 0.125, counted at the least likely seen token's surprisal (ln 8):
  // H = 0.5 ln 2 + 0.25 ln 4 + 0.125 ln 8 + 0.125 ln 8 = 1.75 ln 2.
  const StepSignals s = top_k_signals(std::log(0.5), {std::log(0.25), std::log(0.5), std::log(0.125)}, std::nullopt);
  EXPECT_NEAR(s.entropy, 1.75 * std::log(2.0), 1e-6);
  EXPECT_NEAR(s.surprisal, std::log(2.0), 1e-6);
  EXPECT_NEAR(s.top1_prob, 0.5, 1e-6);
  EXPECT_NEAR(s.top1_margin, 0.25, 1e-6);
  EXPECT_NEAR(s.eos_prob, 0.125, 1e-6);  // EOS unseen: bounded by the least likely seen token
  // Varentropy: E[(-ln p)^2] - H^2 with the unseen mass at ln 8.
  const double l2 = std::log(2.0);
  const double e2 = 0.5 * l2 * l2 + 0.25 * 4 * l2 * l2 + 0.25 * 9 * l2 * l2;
  EXPECT_NEAR(s.varentropy, e2 - std::pow(1.75 * l2, 2), 1e-5);
  // EOS among the top: its probability and rank.
  const StepSignals e = top_k_signals(std::log(0.5), {std::log(0.5), std::log(0.3), std::log(0.2)}, std::log(0.3));
  EXPECT_NEAR(e.eos_prob, 0.3, 1e-6);
  EXPECT_EQ(e.eos_rank, 1);
}

TEST(TopKSignals, EqualTheFullDistributionsWhenTheTopHoldsEverything) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0, 2);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(12);
    for (auto& x : logits) x = g(rng);
    double z = 0;
    const float mx = *std::max_element(logits.begin(), logits.end());
    for (float x : logits) z += std::exp(x - mx);
    std::vector<double> lps;
    for (float x : logits) lps.push_back(x - mx - std::log(z));
    const int chosen = trial % 12;
    const StepSignals full = step_signals(logits.data(), 12, chosen, {});
    const StepSignals est = top_k_signals(lps[static_cast<size_t>(chosen)], lps, std::nullopt);
    EXPECT_NEAR(est.entropy, full.entropy, 1e-4);
    EXPECT_NEAR(est.varentropy, full.varentropy, 1e-3);
    EXPECT_NEAR(est.surprisal, full.surprisal, 1e-4);
    EXPECT_NEAR(est.top1_margin, full.top1_margin, 1e-5);
    // With part of the vocabulary unseen, the estimate stays a lower bound.
    std::vector<double> top = lps;
    std::sort(top.begin(), top.end(), std::greater<>());
    top.resize(4);
    EXPECT_LE(top_k_signals(lps[static_cast<size_t>(chosen)], top, std::nullopt).entropy, full.entropy + 1e-4);
  }
}

std::vector<std::string> loop_tokens(int copies) {
  std::vector<std::string> t = {" Once", " upon", " a", " time", "."};
  const std::vector<std::string> copy = {" The", " cat", " sat", " on", " the", " mat", " and", " slept", "."};
  for (int i = 0; i < copies; ++i) t.insert(t.end(), copy.begin(), copy.end());
  return t;
}

client::TokenLogprob token(const std::string& s) {
  return {s, -0.1, {{s, -0.1}, {" else", -3.0}, {" other", -4.0}}};
}

TEST(StreamGuard, StopsALoopOnTokensWithSignals) {
  GuardConfig cfg;
  cfg.policy = GuardPolicy::Stop;
  StreamGuard sg(cfg, "Tell me a story.");
  StepVerdict v;
  size_t fed = 0;
  for (const auto& t : loop_tokens(20)) {
    ++fed;
    v = sg.feed(t, {token(t)});
    if (v.stop) break;
  }
  ASSERT_TRUE(v.stop);
  EXPECT_EQ(v.finish_reason, "repetition");
  EXPECT_LT(fed, 60u);  // within a few copies
  EXPECT_FALSE(sg.text_only());
  EXPECT_TRUE(sg.report().has_signals);
  EXPECT_EQ(sg.units(), fed);
}

// The upstream is asked for 20 alternatives a token for the guard's signals; the client gets (and
// the guard keeps) only as many as it asked for, or none.
TEST(StreamGuard, KeepsOnlyTheLogprobsTheClientAskedFor) {
  GuardConfig cfg;
  const std::vector<std::string> words = {" The", " ferry", " left", " at", " dawn"};
  for (int top : {-1, 0, 2}) {
    StreamGuard sg(cfg, "Tell me a story.", top);
    for (const auto& w : words) sg.feed(w, {token(w)});  // three alternatives each
    const auto lps = sg.logprobs(0, sg.units());
    if (top < 0) {
      EXPECT_TRUE(lps.empty());
      continue;
    }
    ASSERT_EQ(lps.size(), words.size()) << "top " << top;
    for (size_t i = 0; i < words.size(); ++i) {
      EXPECT_EQ(lps[i].token, words[i]);
      EXPECT_DOUBLE_EQ(lps[i].logprob, -0.1);
      ASSERT_EQ(lps[i].top.size(), static_cast<size_t>(top));
      if (top > 0) {
        EXPECT_EQ(lps[i].top[0].token, words[i]);
      }
    }
    EXPECT_TRUE(sg.report().has_signals) << "the signals still come from all alternatives";
  }
}

TEST(StreamGuard, StopsTheSameLoopOnTextAloneWhateverTheChunking) {
  std::string text;
  for (const auto& t : loop_tokens(20)) text += t;
  for (size_t step : {1, 7, 23}) {
    GuardConfig cfg;
    cfg.policy = GuardPolicy::Stop;
    StreamGuard sg(cfg, "Tell me a story.");
    StepVerdict v;
    for (size_t i = 0; i < text.size() && !v.stop; i += step) v = sg.feed(text.substr(i, step), {});
    EXPECT_TRUE(v.stop) << "step " << step;
    EXPECT_TRUE(sg.text_only());
    EXPECT_FALSE(sg.report().has_signals);
    EXPECT_EQ(text.rfind(sg.text(), 0), 0u) << "the accepted text is a prefix of what came";
  }
}

TEST(StreamGuard, LeavesOrdinaryTextAloneAndRollsBack) {
  GuardConfig cfg;
  cfg.policy = GuardPolicy::Repair;
  StreamGuard sg(cfg, "Tell me a story.");
  const std::string text =
      "It was a cold morning when the ferry left the harbour. Nobody on board knew the captain, who had come "
      "from the north with a crate of oranges and a dog named Pepper. By noon the fog lifted and the island "
      "showed its cliffs, white as paper, above a sea the colour of slate.";
  StepVerdict v = sg.feed(text, {});
  EXPECT_EQ(sg.text(), text);  // the last word is held as a piece, still part of the text
  EXPECT_EQ(sg.slice(text.size() - 12, text.size()), text.substr(text.size() - 12));
  EXPECT_EQ(sg.slice(3, 9), text.substr(3, 6));
  StepVerdict end = sg.finish();
  EXPECT_FALSE(v.stop || v.repair || end.stop || end.repair);
  EXPECT_EQ(sg.text(), text);
  const size_t kept = sg.rollback(5, 3);
  EXPECT_EQ(kept, 5u);
  EXPECT_EQ(sg.text(), "It was a cold morning");
  EXPECT_EQ(sg.rollback(1, 4), 4u);  // never before what the client has
  EXPECT_EQ(sg.text(), "It was a cold");
}

// A list on one line, as the proxy without logprobs sees it (word pieces): apt's history.log names
// each package it installed, with its version, in one line of items that differ by a name and
// numbers (a Debian 12 machine's /var/log/apt/history.log). Each item brings a name the text had not used:
// a list. A counter on one line is still a loop.
TEST(StreamGuard, AListOnOneLineIsNotALoopACounterIs) {
  const std::string apt =
      "Start-Date: 2026-05-20  16:49:12\nCommandline: apt-get install -y freeglut3-dev libxcb-cursor0 libmagic1 "
      "libmagic-dev libxkbcommon-x11-0 libxcomposite-dev\nInstall: "
      "libxcb-util1:amd64 (0.4.0-1+b1, automatic), libglu1-mesa-dev:amd64 (9.0.2-1.1, automatic), "
      "libglx-dev:amd64 (1.6.0-1, automatic), libegl-dev:amd64 (1.6.0-1, automatic), "
      "libgles-dev:amd64 (1.6.0-1, automatic), libglut-dev:amd64 (3.4.0-1, automatic), "
      "libmagic-dev:amd64 (1:5.44-3), xkb-data:amd64 (2.35.1-1, automatic), "
      "libxcomposite-dev:amd64 (1:0.4.5-1), libxcb-image0:amd64 (0.4.0-2, automatic), "
      "libmagic-mgc:amd64 (1:5.44-3, automatic), libgbm1:amd64 (22.3.6-1+deb12u1, automatic), "
      "libxfixes-dev:amd64 (1:6.0.0-2, automatic), libwayland-server0:amd64 (1.21.0-1, automatic), "
      "libmagic1:amd64 (1:5.44-3), libglvnd-dev:amd64 (1.6.0-1, automatic), "
      "libgl1-mesa-dev:amd64 (22.3.6-1+deb12u1, automatic), libgles1:amd64 (1.6.0-1, automatic), "
      "libgles2:amd64 (1.6.0-1, automatic), libxkbcommon0:amd64 (1.5.0-1, automatic), "
      "libopengl0:amd64 (1.6.0-1, automatic), libxcb-cursor0:amd64 (0.1.4-1), "
      "libglu1-mesa:amd64 (9.0.2-1.1, automatic), libglvnd-core-dev:amd64 (1.6.0-1, automatic), "
      "libgl-dev:amd64 (1.6.0-1, automatic), libxcb-xkb1:amd64 (1.15-1, automatic), "
      "libopengl-dev:amd64 (1.6.0-1, automatic), libegl-mesa0:amd64 (22.3.6-1+deb12u1, automatic), "
      "libxcb-render-util0:amd64 (0.3.9-1+b1, automatic), libglut3.12:amd64 (3.4.0-1, automatic), "
      "libegl1:amd64 (1.6.0-1, automatic), libwayland-client0:amd64 (1.21.0-1, automatic), "
      "libxkbcommon-x11-0:amd64 (1.5.0-1), freeglut3-dev:amd64 (3.4.0-1)"
      "\nEnd-Date: 2026-05-20  16:49:20\n";
  GuardConfig cfg;
  cfg.policy = GuardPolicy::Stop;
  StreamGuard list(cfg, "Show me the last apt run.");
  const StepVerdict v = list.feed(apt, {});
  for (const auto& e : list.report().events) ADD_FAILURE() << e.type << " " << e.evidence;
  EXPECT_FALSE(v.stop);
  std::string counter = "Let me go through the cases one at a time. ";
  for (int k = 7; k < 40; ++k) counter += "Case " + std::to_string(k) + ": check the cached value again, ";
  StreamGuard loop(cfg, "Check the cases.");
  EXPECT_TRUE(loop.feed(counter, {}).stop);
}

// Without logprobs the units are text pieces, which are not tokens: runaway measures an estimate
// (kTokensPerPiece a piece), and the upstream's own count whenever a chunk reports it.
TEST(StreamGuard, RunawayCountsTokensNotPiecesWithoutLogprobs) {
  GuardConfig cfg;
  cfg.policy = GuardPolicy::Stop;
  cfg.act_on = {"runaway"};
  cfg.runaway_tokens = 170;
  std::mt19937 rng(5);
  auto word = [&] { return " w" + std::to_string(rng() % 100000); };
  // 170 tokens are 200 pieces at 0.85: the stop comes at the 200th piece, not the 170th.
  {
    StreamGuard sg(cfg, "Write.");
    size_t fed = 0;
    StepVerdict v;
    while (!v.stop && fed < 400) {
      v = sg.feed(word() + "-", {});
      fed += 2;  // " wN" and "-"
    }
    ASSERT_TRUE(v.stop);
    ASSERT_FALSE(sg.report().events.empty());
    EXPECT_EQ(sg.report().events.back().type, "runaway");
    EXPECT_TRUE(sg.text_only());
    EXPECT_GE(sg.units(), 199u);
    EXPECT_LE(sg.units(), 201u);
    EXPECT_EQ(sg.tokens(), 170);
  }
  // An upstream that reports 3 tokens a piece so far (long words): the count replaces the estimate.
  {
    StreamGuard sg(cfg, "Write.");
    StepVerdict v;
    int pieces = 0;
    while (!v.stop && pieces < 400) {
      v = sg.feed(word() + "-", {});
      pieces += 2;
      sg.upstream_count(3 * static_cast<int64_t>(sg.units()));
    }
    ASSERT_TRUE(v.stop);
    EXPECT_LE(sg.units(), 60u);
    // A continuation (a repair) counts from the units accepted before it.
    StreamGuard sg2(cfg, "Write.");
    for (int i = 0; i < 20; ++i) sg2.feed(word() + "-", {});
    sg2.upstream_count(100);
    EXPECT_EQ(sg2.tokens(), 100);
    sg2.rollback(30, 0);
    sg2.begin_segment();
    const int64_t before = sg2.tokens();
    sg2.feed(word() + "-", {});
    sg2.upstream_count(5);
    EXPECT_EQ(sg2.tokens(), before + 5);
  }
}

TEST(RepetitionDetection, StopsAtMinCountCopiesUnderAnyPolicy) {
  GuardConfig cfg;  // observe
  cfg.rd_min_pattern = 2;
  cfg.rd_max_pattern = 10;
  cfg.rd_min_count = 3;
  Guard g(cfg, {});
  g.on_start({}, "");
  const std::vector<int32_t> t = {7, 8, 1, 2, 3, 1, 2, 3, 1, 2, 3};
  std::string text;
  for (size_t i = 0; i < t.size(); ++i) {
    const StepVerdict v = g.observe(t[i], nullptr, text);
    EXPECT_EQ(v.stop, i == t.size() - 1) << "token " << i;
    if (v.stop) {
      EXPECT_EQ(v.finish_reason, "repetition");
    }
  }
  // One token over and over: min_pattern_size 2 sees it as the 2-gram "5 5", three copies at the 6th.
  Guard h(cfg, {});
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(h.observe(5, nullptr, text).stop) << i;
  EXPECT_TRUE(h.observe(5, nullptr, text).stop);
}

TEST(ContinueFinalMessage, CutsRightAfterTheAssistantsContent) {
  auto t = ChatTemplate::builtin("chatml");
  ASSERT_TRUE(t);
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", "Tell me a story"}}, {{"role", "assistant"}, {"content", "Once upon a"}}});
  ChatOptions o;
  o.add_generation_prompt = false;
  auto closed = t->apply(msgs, o);
  o.continue_final_message = true;
  auto open = t->apply(msgs, o);
  ASSERT_TRUE(closed && open);
  EXPECT_EQ(*open, "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\nOnce upon a");
  EXPECT_EQ(closed->rfind(*open, 0), 0u);
  msgs[1]["content"] = "";  // nothing to continue: the assistant's turn starts fresh
  auto fresh = t->apply(msgs, o);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(*fresh, "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n");
  msgs.erase(1);
  EXPECT_FALSE(t->apply(msgs, o));  // the last message is the user's: an error, not a guess
}

TEST(Metrics, LabelledSeriesAreEscapedAndSummed) {
  Metrics m(false);
  m.add("coda:x_total", 2, {{"upstream", "http://a:1"}, {"model", "m\"1"}});
  m.add("coda:x_total", 3, {{"upstream", "http://b:1"}, {"model", "m2"}});
  m.define_histogram("coda:h", {1, 10}, "help");
  m.observe("coda:h", 5, {{"model", "m2"}});
  const std::string text = m.prometheus();
  EXPECT_NE(text.find("coda:x_total{upstream=\"http://a:1\",model=\"m\\\"1\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("coda:h_bucket{model=\"m2\",le=\"10\"} 1"), std::string::npos) << text;
  EXPECT_EQ(m.value("coda:x_total"), 5);
  EXPECT_EQ(m.value("coda:x_total", "m2"), 3);
  EXPECT_EQ(m.value("coda:h"), 1);
}

}  // namespace
}  // namespace coda
