// The degeneration guard's detectors on constructed token streams and distributions: what each
// must catch and what it must leave alone.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "engine/generator.h"
#include "gguf/gguf.h"
#include "guard/detector.h"
#include "guard/guard.h"
#include "guard/repetition.h"
#include "tokenizer/vocab.h"

namespace coda {
namespace {

constexpr int32_t kVocab = 4096;
constexpr int32_t kEos = 2;

// Feeds tokens to a guard with logits that make each token moderately likely (entropy ~2 nats,
// no collapse, no gibberish) unless `logits_for` says otherwise; returns the events.
struct Feeder {
  GuardConfig cfg;
  std::string prompt_text = "In the beginning God created the heaven and the earth.";
  std::function<void(std::vector<float>&, int32_t token, size_t i)> logits_for;
  std::vector<GuardEvent> run(const std::vector<int32_t>& tokens, const std::vector<std::string>* texts = nullptr) {
    Guard g(cfg, {kEos});
    std::vector<int32_t> prompt{1, 5, 6};
    g.on_start(prompt, prompt_text);
    std::vector<int32_t> generated;
    std::string text;
    std::vector<float> logits(kVocab);
    for (size_t i = 0; i < tokens.size(); ++i) {
      generated.push_back(tokens[i]);
      if (texts) text += (*texts)[i];
      std::fill(logits.begin(), logits.end(), 0.0f);
      for (int k = 0; k < 8; ++k) logits[static_cast<size_t>((tokens[i] + 97 * k) % kVocab)] = 6.0f;
      if (logits_for) logits_for(logits, tokens[i], i);
      const StepView v{static_cast<int64_t>(i), tokens[i], logits.data(), kVocab, prompt, generated, text};
      g.on_step(v);
    }
    return g.report().events;
  }
};

std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(10 + rng() % 4000);
  return t;
}

bool has(const std::vector<GuardEvent>& e, const std::string& type) {
  for (const auto& x : e)
    if (x.type == type) return true;
  return false;
}

// The registry is the one list of detectors: its families decide what a stop says, what the lab
// counts as a loop and what the Prometheus rules sum (deploy/prometheus/check.sh compares them).
TEST(GuardRegistry, NamesFamiliesFinishReasonsAndNeeds) {
  EXPECT_EQ(detector_family("loop"), (std::vector<std::string>{"flooding", "loop", "near_loop", "phrase_loop"}));
  EXPECT_EQ(detector_family("degenerate"),
            (std::vector<std::string>{"entropy_collapse", "gibberish", "language_drift", "script_mixing", "garbage",
                                      "invented_words"}));
  EXPECT_EQ(detector_family("length"), (std::vector<std::string>{"runaway", "eos_starvation"}));
  EXPECT_EQ(guard_event_types().size(), detector_infos().size());
  for (const auto& d : detector_infos()) {
    EXPECT_EQ(std::string(d.finish_reason), std::string(d.family) == "loop" ? "repetition" : "degenerate") << d.name;
    EXPECT_EQ(d.repairable, std::string(d.family) != "length") << d.name;
  }
  // One episode for the periodic detectors; a phrase loop is its own.
  EXPECT_STREQ(find_detector("near_loop")->episode, find_detector("flooding")->episode);
  EXPECT_STRNE(find_detector("phrase_loop")->episode, find_detector("loop")->episode);
  EXPECT_TRUE(find_detector("gibberish")->needs & kNeedsSignals);
  EXPECT_FALSE(find_detector("loop")->needs & kNeedsSignals);
  EXPECT_EQ(find_detector("no_such"), nullptr);
  EXPECT_TRUE(in_detector_family("phrase_loop", "loop"));
  EXPECT_FALSE(in_detector_family("runaway", "loop"));
  auto made = make_detectors(GuardConfig{});
  ASSERT_EQ(made.size(), detector_infos().size());
  for (size_t i = 0; i < made.size(); ++i) EXPECT_STREQ(made[i]->info().name, detector_infos()[i].name);
}

TEST(GuardDetectors, ExactLoopsOfPeriod1To200) {
  for (int p : {1, 2, 3, 5, 7, 10, 25, 50, 100, 150, 200}) {
    std::vector<int32_t> t = random_tokens(60, 1);
    const std::vector<int32_t> unit = random_tokens(static_cast<size_t>(p), 100 + p);
    const size_t onset = t.size();
    while (t.size() - onset < static_cast<size_t>(std::max(4 * p, 40))) t.insert(t.end(), unit.begin(), unit.end());
    Feeder f;
    const auto events = f.run(t);
    ASSERT_FALSE(events.empty()) << "period " << p;
    EXPECT_EQ(events[0].type, p == 1 ? "flooding" : "loop") << "period " << p;
    EXPECT_EQ(events[0].onset, static_cast<int64_t>(onset)) << "period " << p;
    if (p > 1) {
      EXPECT_EQ(events[0].evidence["period"], p);
      // Detected as soon as 3 copies (4 for a period of 16 tokens or more) and 32 tokens are there.
      const int64_t copies = p >= 16 ? 4 : 3;
      EXPECT_EQ(events[0].detected_at, static_cast<int64_t>(onset) + std::max<int64_t>(copies * p, 32) - 1) << p;
    }
  }
}

TEST(GuardDetectors, LoopWithAChangingNumber) {
  // "the count is now N ." with N a different token each time: not exact, but periodic.
  std::vector<int32_t> t = random_tokens(40, 2);
  const size_t onset = t.size();
  for (int n = 0; n < 14; ++n) {
    for (int32_t w : {500, 501, 502, 503}) t.push_back(w);
    t.push_back(1000 + n);
    t.push_back(504);
  }
  Feeder f;
  const auto events = f.run(t);
  ASSERT_TRUE(has(events, "near_loop"));
  EXPECT_FALSE(has(events, "loop"));
  for (const auto& e : events) {
    if (e.type == "near_loop") {
      EXPECT_EQ(e.evidence["period"], 6);
      EXPECT_LE(std::llabs(e.onset - static_cast<int64_t>(onset)), 6);
    }
  }
}

TEST(GuardDetectors, Flooding) {
  std::vector<int32_t> t = random_tokens(30, 3);
  t.insert(t.end(), 40, 777);
  Feeder f;
  const auto events = f.run(t);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "flooding");
  EXPECT_EQ(events[0].onset, 30);
  EXPECT_EQ(events[0].detected_at, 30 + 16 - 1);
}

// Real text through the bundled model's tokenizer.
const Vocab& bundled_vocab() {
  static auto file = GgufFile::open(CODA_MODEL_PATH);
  static auto vocab = Vocab::from_gguf(*file);
  return *vocab;
}
std::vector<int32_t> tokenize(const std::string& text) { return *bundled_vocab().encode(text, false); }
// Each token's text, as the generator's stream has it (the growing decoded text, cut per token).
std::vector<std::string> token_texts(const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  std::string before;
  std::vector<int32_t> so_far;
  for (int32_t id : ids) {
    so_far.push_back(id);
    const std::string now = bundled_vocab().decode(so_far);
    out.push_back(now.size() >= before.size() ? now.substr(before.size()) : std::string());
    before = now;
  }
  return out;
}

TEST(GuardDetectors, LegitimateRepetitionIsNotFlagged) {
  const std::vector<std::string> texts = {
      // A genealogy (Matthew 1, King James).
      "Abraham begat Isaac; and Isaac begat Jacob; and Jacob begat Judas and his brethren; And Judas begat Phares "
      "and Zara of Thamar; and Phares begat Esrom; and Esrom begat Aram; And Aram begat Aminadab; and Aminadab begat "
      "Naasson; and Naasson begat Salmon; And Salmon begat Booz of Rachab; and Booz begat Obed of Ruth; and Obed "
      "begat Jesse; And Jesse begat David the king; and David the king begat Solomon of her that had been the wife "
      "of Urias;",
      // A list.
      "Shopping list:\n1. two apples\n2. a loaf of bread\n3. milk and eggs\n4. three lemons\n5. olive oil\n6. a bag "
      "of rice\n7. tomatoes\n8. fresh basil\n9. coffee beans\n10. dark chocolate\n",
      // A refrain sung twice.
      "We shall overcome, we shall overcome, we shall overcome some day. Oh, deep in my heart I do believe. We shall "
      "overcome, we shall overcome, we shall overcome some day. The end of the song comes here at last.",
      // Code with repeated, similar lines.
      "def setup(cfg):\n    a = load(cfg, \"alpha\")\n    b = load(cfg, \"beta\")\n    c = load(cfg, \"gamma\")\n    "
      "d = load(cfg, \"delta\")\n    e = load(cfg, \"epsilon\")\n    return combine(a, b, c, d, e)\n\n"
      "for item in items:\n    if item.ready:\n        process(item)\n    else:\n        defer(item)\n",
      // Psalm 136: a refrain after every line, the lines differ.
      "O give thanks unto the LORD; for he is good: for his mercy endureth for ever. O give thanks unto the God of "
      "gods: for his mercy endureth for ever. O give thanks to the Lord of lords: for his mercy endureth for ever. "
      "To him who alone doeth great wonders: for his mercy endureth for ever.",
  };
  for (const auto& text : texts) {
    Feeder f;
    const auto events = f.run(tokenize(text));
    for (const auto& e : events) ADD_FAILURE() << e.type << " flagged in: " << text.substr(0, 60) << " " << e.evidence;
  }
}

// A changelog's list of CVE identifiers (chromium's changelog.Debian has hundreds in a row) changes
// only a number per line, as a loop with a counter does; the identifiers move by irregular steps,
// a counter by the same step every time.
TEST(GuardDetectors, AListOfIdentifiersIsNotALoopACounterIs) {
  std::string cves = "chromium (130.0.6723.58-1~deb12u1) bookworm-security; urgency=high\n\n  * New upstream stable release.\n";
  std::string counter = cves;
  int64_t id = 141693;
  const int steps[] = {1, 3, 1, 2, 2, 1, 4, 1, 1, 3, 2, 1, 5, 1, 2};
  for (int k = 0; k < 60; ++k) {
    cves += "    - CVE-2026-" + std::to_string(id) + "\n";
    counter += "    - CVE-2026-" + std::to_string(141693 + k) + "\n";
    id += steps[k % 15];
  }
  const auto ids = tokenize(cves), counted = tokenize(counter);
  const auto texts = token_texts(ids), counted_texts = token_texts(counted);
  Feeder f;
  for (const auto& e : f.run(ids, &texts)) ADD_FAILURE() << e.type << " " << e.evidence;
  Feeder g;
  EXPECT_TRUE(has(g.run(counted, &counted_texts), "near_loop"));
}

// The bundled model's text through coda proxy's repair (llama.cpp upstream, greedy): clauses
// recombined with a word inserted or dropped each time, so no period lines up and neither the exact
// nor the positional near-loop test sees it. Few distinct 3-grams do.
TEST(GuardDetectors, PhraseLoopWithoutAPeriod) {
  const std::string text =
      "and thou shalt not be a great multitude of the land of Egypt, and thou shalt make thee a burnt "
      "offering unto the LORD. And thou shalt make a burnt offering, and thou shalt make thee a burnt "
      "offering, and thou shalt make it a burnt offering, and thou shalt make it unto the LORD thy God. And "
      "thou shalt make a burnt offering, and thou shalt make thee a burnt offering, and thou shalt make it "
      "a burnt offering, and thou shalt make it unto the LORD thy God. And thou shalt make a burnt "
      "offering, and thou shalt make it unto the LORD thy God, and thou shalt make it unto the LORD thy "
      "God, and thou shalt make thee a burnt offering unto the LORD. And thou shalt make a burnt offering, "
      "and thou shalt make it unto the LORD thy God, and thou shalt make it unto the LORD thy God, and thou "
      "shalt make thy people to the LORD thy God. And thou shalt make the LORD thy God, and thou shalt make "
      "thee a burnt offering unto the LORD thy God, and thou shalt make thy people to the LORD thy God, and "
      "thou shalt make thy people to the LORD thy God. And thou shalt make the LORD thy God, and thou shalt "
      "make thee a burnt offering unto the LORD thy God, and thou shalt make thy people to the LORD thy "
      "God, and thou shalt make thy people to the LORD thy God. And thou shalt make thy people, and thou "
      "shalt make thee a burnt offering, and thou";
  const auto tokens = tokenize(text);
  ASSERT_GE(tokens.size(), 200u);
  Feeder positional;
  positional.cfg.phrase_max_distinct = 0;
  for (const auto& e : positional.run(tokens))
    ADD_FAILURE() << e.type << " without the phrase detector: " << e.evidence;
  Feeder f;
  const auto events = f.run(tokens);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "phrase_loop");
  ASSERT_TRUE(events[0].evidence.contains("distinct3")) << events[0].evidence;
  EXPECT_LT(events[0].evidence["distinct3"].get<double>(), 0.2);
  EXPECT_EQ(events[0].onset, events[0].detected_at + 1 - 160);
}

// distinct_ngrams packs ids into integers; a set of n-grams is the reference.
TEST(GuardSignals, DistinctNgramsMatchesASetOfNgrams) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t alphabet = trial % 2 ? 5 : (1 << 22);  // small: many repeats; large: ids past 21 bits
    std::vector<int32_t> t(1 + rng() % 300);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(alphabet));
    if (trial % 4 == 1) t.back() = (1 << 21) - 1;  // the largest id that packs
    for (int n = 1; n <= 4; ++n)
      for (size_t window : {size_t{16}, size_t{160}, t.size()}) {
        const size_t len = std::min(window, t.size());
        double want = 1.0;
        if (len >= static_cast<size_t>(n) + 1) {
          std::set<std::vector<int32_t>> seen;
          for (size_t i = t.size() - len; i + static_cast<size_t>(n) <= t.size(); ++i)
            seen.emplace(t.begin() + static_cast<std::ptrdiff_t>(i), t.begin() + static_cast<std::ptrdiff_t>(i) + n);
          want = static_cast<double>(seen.size()) / static_cast<double>(len - static_cast<size_t>(n) + 1);
        }
        ASSERT_DOUBLE_EQ(distinct_ngrams(t, n, window), want)
            << "trial " << trial << " n " << n << " window " << window;
      }
  }
  // Ids that would collide if packed into 21 bits: (0, 2^21) against (1, 0).
  EXPECT_DOUBLE_EQ(distinct_ngrams({0, 1 << 21, 1, 0}, 2, 4), 1.0);
  EXPECT_DOUBLE_EQ(distinct_ngrams({0, (1 << 21) - 1, 1, 0, (1 << 21) - 1}, 2, 5), 0.75);  // the first bigram again
}

TEST(GuardDetectors, LanguageDriftFromItalianToEnglish) {
  const std::string italian =
      "La vita è bella quando il sole splende e gli amici sono con noi. Non sempre si può avere tutto, ma "
      "con un po' di pazienza e di fortuna si arriva lontano. ";
  const std::string english =
      "And the LORD spake unto Moses, saying, Speak unto the children of Israel, that they bring me an offering: "
      "of every man that giveth it willingly with his heart ye shall take my offering. And this is the offering "
      "which ye shall take of them; gold, and silver, and brass, and the people of the land were with them all. ";
  // Word by word, so the text grows with the tokens.
  std::vector<std::string> pieces;
  // The switch must hold (drift_checks checks over an 800-byte window): four copies of the English.
  std::string all = italian + italian + english + english + english + english;
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find(' ', start + 1);
    if (end == std::string::npos) end = all.size();
    pieces.push_back(all.substr(start, end - start));
    start = end;
  }
  std::vector<int32_t> tokens = random_tokens(pieces.size(), 4);
  Feeder f;
  f.prompt_text = "Il mattino ha l'oro in bocca, e chi dorme non piglia pesci: questo è il proverbio della nonna.";
  const auto events = f.run(tokens, &pieces);
  ASSERT_TRUE(has(events, "language_drift"));
  const size_t italian_words = (italian + italian).size() / 6;  // no event while the text is still Italian
  for (const auto& e : events) {
    if (e.type == "language_drift") {
      EXPECT_GT(static_cast<size_t>(e.detected_at), italian_words / 2);
    }
  }
  // English text after an English prompt is no drift.
  std::vector<std::string> english_pieces(pieces.begin() + static_cast<std::ptrdiff_t>(pieces.size() / 2),
                                          pieces.end());
  Feeder same;
  same.prompt_text = "And God said, Let there be light: and there was light. And God saw the light, that it was good.";
  EXPECT_FALSE(has(same.run(random_tokens(english_pieces.size(), 5), &english_pieces), "language_drift"));
}

TEST(GuardDetectors, GibberishCollapseStarvationRunaway) {
  // Flat distributions with the chosen token drawn at random: gibberish.
  Feeder flat;
  flat.logits_for = [](std::vector<float>& l, int32_t, size_t) { std::fill(l.begin(), l.end(), 0.0f); };
  EXPECT_TRUE(has(flat.run(random_tokens(64, 5)), "gibberish"));
  // Near-certain steps over a repetitive stretch (a loop the exact detector is told not to see).
  Feeder peaked;
  peaked.cfg.loop_min_span = 100000;
  peaked.cfg.near_every = 0;
  peaked.logits_for = [](std::vector<float>& l, int32_t t, size_t) {
    std::fill(l.begin(), l.end(), 0.0f);
    l[static_cast<size_t>(t)] = 30.0f;
  };
  std::vector<int32_t> rep;
  for (int i = 0; i < 30; ++i)
    for (int32_t w : {11, 12, 13}) rep.push_back(w);
  EXPECT_TRUE(has(peaked.run(rep), "entropy_collapse"));
  // ... but a confident, varied text is not a collapse.
  EXPECT_FALSE(has(peaked.run(random_tokens(90, 6)), "entropy_collapse"));
  // EOS never considered for 600 tokens: starvation; then runaway at a low limit.
  Feeder starving;
  starving.cfg.runaway_tokens = 700;
  starving.logits_for = [](std::vector<float>& l, int32_t, size_t) { l[kEos] = -40.0f; };
  const auto events = starving.run(random_tokens(720, 7));
  EXPECT_TRUE(has(events, "eos_starvation"));
  EXPECT_TRUE(has(events, "runaway"));
  Feeder fed;
  fed.logits_for = [](std::vector<float>& l, int32_t, size_t) { l[kEos] = 3.0f; };
  EXPECT_FALSE(has(fed.run(random_tokens(600, 8)), "eos_starvation"));
}

// Tokens with their texts, for the rules that look at the text of the repeated period.
struct Piece {
  int32_t id;
  std::string text;
};
void append(std::vector<int32_t>& ids, std::vector<std::string>& texts, const std::vector<Piece>& unit, int copies) {
  for (int c = 0; c < copies; ++c)
    for (const auto& p : unit) {
      ids.push_back(p.id);
      texts.push_back(p.text);
    }
}

TEST(GuardDetectors, TypographyNeedsALongerRunThanWords) {
  // A blank table row "|   |   |   |\n" (no letter or digit): 8 rows are a form, 40 rows a loop.
  const std::vector<Piece> row = {{70, "|"}, {71, "   "}, {70, "|"}, {71, "   "}, {70, "|"}, {71, "   "}, {72, "|\n"}};
  for (int copies : {8, 40}) {
    std::vector<int32_t> ids = random_tokens(20, 11);
    std::vector<std::string> texts(ids.size(), " word");
    append(ids, texts, row, copies);
    Feeder f;
    const auto events = f.run(ids, &texts);
    if (copies == 8) {
      EXPECT_TRUE(events.empty()) << events[0].type << " " << events[0].evidence;
    } else {
      ASSERT_FALSE(events.empty());
      EXPECT_EQ(events[0].type, "loop");
      EXPECT_EQ(events[0].detected_at, 20 + 96 - 1);  // at structural_min_span
    }
  }
  // A separator line of one punctuation token: a flood only at 96.
  std::vector<int32_t> ids = random_tokens(20, 12);
  std::vector<std::string> texts(ids.size(), " word");
  append(ids, texts, {{73, "="}}, 60);
  Feeder f;
  EXPECT_TRUE(f.run(ids, &texts).empty());
  append(ids, texts, {{73, "="}}, 60);
  const auto events = f.run(ids, &texts);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "flooding");
  EXPECT_EQ(events[0].detected_at, 20 + 96 - 1);
  // A release banner: rows of asterisks around a title and a status line. Where each row of
  // asterisks meets the title, the near-loop test sees a period-2 pattern that breaks on a few
  // letters; judged by its whole span it is typography, as the rows are.
  {
    std::vector<int32_t> b = random_tokens(20, 14);
    std::vector<std::string> bt(b.size(), " word");
    const std::vector<Piece> title = {{75, "\n"}, {76, " RELEASE"}, {77, " 2"}, {78, "."},
                                      {79, "4"},  {78, "."},        {80, "0"},  {75, "\n"}};
    const std::vector<Piece> status = {{75, "\n"},     {81, " All"}, {82, " 136"}, {83, " targets"},
                                       {84, " built"}, {78, "."},    {75, "\n"}};
    const std::vector<Piece> stars = {{85, "****"}, {86, "**"}};  // how a small vocabulary cuts a row
    append(b, bt, stars, 30);
    append(b, bt, title, 1);
    append(b, bt, stars, 30);
    append(b, bt, status, 1);
    append(b, bt, stars, 30);
    const auto be = f.run(b, &bt);
    EXPECT_TRUE(be.empty()) << be[0].type << " " << be[0].evidence;
  }
  // The same run of a word token floods at 16.
  std::vector<int32_t> w = random_tokens(20, 12);
  std::vector<std::string> wt(w.size(), " word");
  append(w, wt, {{74, " boom"}}, 20);
  const auto we = f.run(w, &wt);
  ASSERT_EQ(we.size(), 1u) << we[0].type;
  EXPECT_EQ(we[0].detected_at, 20 + 16 - 1);
}

TEST(GuardDetectors, ListsWithACounterNeedMoreThanProse) {
  // "Set N: 12 squats, then rest and stretch.\n": a numbered line (10 of 11 tokens repeat); 11 sets
  // are a workout (a log of eleven shards, a list of ten steps), 40 a loop.
  auto line = [](int n) {
    return std::vector<Piece>{{80, "Set"},     {static_cast<int32_t>(900 + n), " " + std::to_string(n)},
                              {81, ":"},       {82, " 12"},
                              {83, " squats"}, {84, ","},
                              {85, " then"},   {86, " rest"},
                              {88, " and"},    {89, " stretch"},
                              {87, ".\n"}};
  };
  for (int sets : {11, 40}) {
    std::vector<int32_t> ids = random_tokens(20, 13);
    std::vector<std::string> texts(ids.size(), " word");
    for (int n = 1; n <= sets; ++n) append(ids, texts, line(n), 1);
    Feeder f;
    const auto events = f.run(ids, &texts);
    if (sets == 11)
      EXPECT_TRUE(events.empty()) << events[0].type << " " << events[0].evidence;
    else
      EXPECT_TRUE(has(events, "near_loop"));
  }
  // The same shape within one line of prose (no line break) is flagged at 4 periods, as before.
  std::vector<int32_t> ids = random_tokens(20, 13);
  std::vector<std::string> texts(ids.size(), " word");
  for (int n = 1; n <= 6; ++n) {
    auto l = line(n);
    l.back().text = ".";
    append(ids, texts, l, 1);
  }
  Feeder f;
  EXPECT_TRUE(has(f.run(ids, &texts), "near_loop"));
}

// Blocks longer than max_period (the 92-line block an agent repeats): a block quoted twice is
// legitimate (a licence in two places, a table printed for two cases); a third copy that goes on
// for block_third_copy tokens is a loop, found where the first copy began.
TEST(GuardDetectors, BlockLoopsBeyondTheLongestPeriod) {
  const std::vector<int32_t> block = random_tokens(500, 21);
  std::vector<int32_t> twice = random_tokens(30, 22);
  for (int c = 0; c < 2; ++c) twice.insert(twice.end(), block.begin(), block.end());
  std::vector<int32_t> thrice = twice;
  thrice.insert(thrice.end(), block.begin(), block.begin() + 80);
  Feeder f;
  EXPECT_TRUE(f.run(twice).empty());
  const auto events = f.run(thrice);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "loop");
  EXPECT_EQ(events[0].evidence["rule"], "block");
  EXPECT_EQ(events[0].evidence["period"], 500);
  EXPECT_EQ(events[0].onset, 30);
  EXPECT_EQ(events[0].detected_at, 30 + 2 * 500 + 64 - 1);
  // Off: block_third_copy 0.
  Feeder off;
  off.cfg.block_third_copy = 0;
  EXPECT_FALSE(has(off.run(thrice), "loop"));
}

// One token per word, with its text, so that the word rule reads what the tokens say.
void words_to(std::vector<int32_t>& ids, std::vector<std::string>& texts, const std::string& line) {
  size_t i = 0;
  while (i < line.size()) {
    size_t j = line.find(' ', i + 1);
    if (j == std::string::npos) j = line.size();
    const std::string w = line.substr(i, j - i);
    ids.push_back(static_cast<int32_t>(100 + std::hash<std::string>{}(w) % 3900));
    texts.push_back(w);
    i = j;
  }
}

// A near loop at real-text scale: a 14-word sentence whose counter climbs while a word or two
// changes in each copy. No position lines up (the swapped words are one token or two), so the
// positional rule cannot see it; the word rule aligns the copies with edits and finds it by the
// fourth copy. A list whose items each bring a new name is not a loop.
TEST(GuardDetectors, NearLoopsAsWordsWithCountersAndSwaps) {
  const std::vector<std::string> swaps = {"carefully", "very slowly", "again", "one more time", "closely", "once more"};
  std::vector<int32_t> ids = random_tokens(40, 31);
  std::vector<std::string> texts(ids.size(), " word");
  for (int n = 7; n < 7 + 8; ++n)
    words_to(ids, texts,
             " Let me check step " + std::to_string(n) + " " + swaps[static_cast<size_t>(n) % swaps.size()] +
                 " because the total of the previous column might still be wrong here.");
  Feeder f;
  const auto events = f.run(ids, &texts);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].type, "near_loop");
  EXPECT_EQ(events[0].evidence.value("rule", ""), "words") << events[0].evidence;
  // Within the first copy (the copies' boundary is where the words align best), and by the fourth.
  EXPECT_GE(events[0].onset, 40 - 14);
  EXPECT_LE(events[0].onset, 40 + 14);
  EXPECT_LE(events[0].detected_at, 40 + 4 * 18);

  // Declarations in a header: the skeleton repeats, every line names a new function and a new
  // parameter. (A list whose items bring one new word in ten is still read as a loop: one of the
  // false positives docs/guard-eval/realtext.md counts.)
  const std::vector<std::string> names = {
      "add_localkeyid", "add_friendlyname_asc", "add_friendlyname_utf8", "add_cspname_asc", "add_friendlyname_uni",
      "get_attr_gen",   "get_friendlyname",     "set_attr_gen",          "parse_bag_list",  "free_bag_list"};
  std::vector<int32_t> decl_ids = random_tokens(40, 32);
  std::vector<std::string> decl_texts(decl_ids.size(), " word");
  for (const auto& name : names)
    words_to(
        decl_ids, decl_texts,
        " int PKCS12_" + name + "( PKCS12_SAFEBAG *bag , const unsigned char *" + name + "_value , int namelen );\n");
  const auto decl = f.run(decl_ids, &decl_texts);
  EXPECT_TRUE(decl.empty()) << decl[0].type << " " << decl[0].evidence;
}

// A near loop edited heavily: a word in four swapped, independently in each copy, so that no copy
// matches the one before on 0.75 of its words, but each matches the two before it together. The
// union rule catches it by the fifth copy; without it (near_words_union 0) it runs on. A table of
// collation lines, each drawn from a few upper-case names, matches the same way and passes.
TEST(GuardDetectors, HeavilyEditedCopiesMatchTheTwoBeforeThem) {
  const std::vector<std::string> unit = {"the",  "parser", "reads", "every", "token",  "of",    "the",
                                         "line", "and",    "keeps", "the",   "offset", "of",    "each",
                                         "word", "before", "it",    "calls", "the",    "checker"};
  const std::vector<std::string> pool = {"quickly", "module", "buffer", "simply", "value", "later",
                                         "again",   "index",  "cache",  "record", "field", "slowly"};
  std::mt19937 rng(17);
  std::vector<int32_t> ids = random_tokens(40, 61);
  std::vector<std::string> texts(ids.size(), " word");
  for (int copy = 0; copy < 12; ++copy) {
    std::string line = " Step " + std::to_string(copy + 3) + ":";
    for (const auto& w : unit) line += " " + (rng() % 4 == 0 ? pool[rng() % pool.size()] : w);
    words_to(ids, texts, line + ".");
  }
  Feeder pairwise;
  pairwise.cfg.near_words_union = 0;
  EXPECT_FALSE(has(pairwise.run(ids, &texts), "near_loop"));
  Feeder f;
  const auto events = f.run(ids, &texts);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].type, "near_loop");
  EXPECT_EQ(events[0].evidence.value("rule", ""), "words") << events[0].evidence;
  EXPECT_LE(events[0].detected_at, 40 + 6 * 23);  // within the sixth copy (23 tokens each)

  // Collation lines: `<U00F8> <o-stroke>;"<BASE><OBLIK>";"<MIN><MIN>";<U00F8> % LATIN SMALL ...`.
  const std::vector<std::string> letters = {"A", "E", "I", "O", "U", "N", "C", "S", "Z", "Y", "R", "L", "D", "T"};
  const std::vector<std::string> marks = {"ACUTE", "GRAVE", "CARON", "STROKE", "TILDE", "DIAERESIS", "CEDILLA"};
  const std::vector<std::string> variants = {"BASE", "VRNT1", "VRNT2", "OBLIK", "TREMA"};
  std::vector<int32_t> table_ids = random_tokens(40, 62);
  std::vector<std::string> table_texts(table_ids.size(), " word");
  for (int i = 0; i < 40; ++i) {
    const std::string& l = letters[static_cast<size_t>(i / 2) % letters.size()];
    const std::string& m = marks[static_cast<size_t>(i * 3 + i / 5) % marks.size()];
    const std::string& v = variants[static_cast<size_t>(i / 3) % variants.size()];
    const std::string cap = i % 2 ? "CAP" : "MIN";
    words_to(table_ids, table_texts,
             " <U0" + std::to_string(100 + i) + "> <" + l + "-" + m + ">;\"<BASE><" + v + ">\";\"<" + cap +
                 "><MIN>\";<U0" + std::to_string(100 + i) + "> % LATIN " + (i % 2 ? "CAPITAL" : "SMALL") +
                 " LETTER " + l + " WITH " + m + "\n");
  }
  const auto table = f.run(table_ids, &table_texts);
  EXPECT_TRUE(table.empty()) << table[0].type << " " << table[0].evidence;
}

// A near loop of a short line of code: numpy's distutils line "print('Ignoring "%s" (I think it is
// msvccompiler.py bug)' % (e))" with a counter written in and a word swapped now and then. It is 9
// words once numbers and one-letter words are left out, under the 10 of a unit, but 12 blank-
// separated fields: the short-core rule takes it over one more copy. Short lines that are legitimate
// pass: LLVM's four declarations of one template for 8, 16, 32 and 64 bits (4 copies, one short of
// the rule's 5), and a codec table whose names recur in columns (cp1252.py's SMALL then CAPITAL).
TEST(GuardDetectors, ShortCodeLinesLoopingAreNearLoopsColumnsAreNot) {
  const std::vector<std::string> swaps = {"opt", "bounds'", "Compiler'", "flags", "get"};
  std::vector<int32_t> ids = random_tokens(40, 63);
  std::vector<std::string> texts(ids.size(), " word");
  for (int copy = 0; copy < 14; ++copy) {
    std::vector<std::string> w = {"print('Ignoring", "\"%s\"", "(I", "think", "it", "line", std::to_string(copy + 4) + ",",
                                  "is", "msvccompiler.py", "bug)'", "%", "(e))"};
    const size_t words[] = {3, 4, 5, 7, 9};  // "think", "it", "line", "is", "bug)'": a word for a word
    if (copy % 3 == 1) w[words[copy % 5]] = swaps[static_cast<size_t>(copy) % swaps.size()];
    std::string line;
    for (const auto& x : w) line += " " + x;
    words_to(ids, texts, line);
  }
  Feeder f;
  f.cfg.near_min_match = 2;  // the positional rule off: real tokens rarely line up this well
  const auto events = f.run(ids, &texts);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].type, "near_loop");
  EXPECT_EQ(events[0].evidence.value("rule", ""), "words") << events[0].evidence;
  EXPECT_LT(events[0].evidence.value("unit_words", 0), 10) << events[0].evidence;

  std::vector<int32_t> decl_ids = random_tokens(40, 64);
  std::vector<std::string> decl_texts(decl_ids.size(), " word");
  for (const char* bits : {"8", "16", "32", "64"})
    words_to(decl_ids, decl_texts,
             std::string(" \n\n/// Describes a write to a uint") + bits + "_t.\nusing UInt" + bits +
                 "Write = UIntWrite<uint" + bits + "_t>;");
  words_to(decl_ids, decl_texts, " \n\n/// Describes a write to a buffer.\nstruct BufferWrite {");
  for (const auto& e : f.run(decl_ids, &decl_texts)) ADD_FAILURE() << e.type << " " << e.evidence;

  const std::vector<std::string> marks = {"GRAVE", "ACUTE", "CIRCUMFLEX", "TILDE", "DIAERESIS", "RING ABOVE"};
  std::vector<int32_t> table_ids = random_tokens(40, 65);
  std::vector<std::string> table_texts(table_ids.size(), " word");
  int code = 0xC0;
  for (const char* size : {"CAPITAL", "SMALL", "CAPITAL"})
    for (const char* letter : {"A", "E", "O"})
      for (const auto& m : marks) {
        char hex[64];
        std::snprintf(hex, sizeof hex, "\n    '\\x%02x'     #  0x%02X ->", code & 0xFF, code & 0xFF);
        ++code;
        words_to(table_ids, table_texts, std::string(hex) + " LATIN " + size + " LETTER " + letter + " WITH " + m);
      }
  for (const auto& e : f.run(table_ids, &table_texts)) ADD_FAILURE() << e.type << " " << e.evidence;
}

// Data repeats without letters: OpenSSL's `# define EXT_END { -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
// 0, 0}` (x509v3.h) and `od -A x -t x1z` rows of zero bytes are periods of " 0" "," or " 00" over
// 26-32 tokens. Like typography they need the structural floor (96 tokens) before they are a loop,
// and a window of hex rows is not a phrase said again. A chain of colons and zeros repeated past
// the floor still is a loop.
TEST(GuardDetectors, DataRepeatsWithoutLettersWaitForTheStructuralFloor) {
  std::vector<int32_t> ids = random_tokens(40, 66);
  std::vector<std::string> texts(ids.size(), " word");
  auto piece = [&](std::vector<int32_t>& to, std::vector<std::string>& tt, const std::string& p) {
    to.push_back(static_cast<int32_t>(100 + std::hash<std::string>{}(p) % 3900));
    tt.push_back(p);
  };
  for (const char* p : {"\n#", " define", " EXT", "_END", " {", " -", "1", ","}) piece(ids, texts, p);
  for (int k = 0; k < 13; ++k) {
    piece(ids, texts, " 0");
    piece(ids, texts, ",");
  }
  for (const char* p : {" 0", "}", "\n", "/*", " X", "509", "_PURPOSE", " stuff", " */\n"}) piece(ids, texts, p);
  Feeder f;
  for (const auto& e : f.run(ids, &texts)) ADD_FAILURE() << "C initializer: " << e.type << " " << e.evidence;

  std::vector<int32_t> dump_ids = random_tokens(40, 67);
  std::vector<std::string> dump_texts(dump_ids.size(), " word");
  const char* rows[] = {"00 00 00 00 00 1d 00 00 00 00 00 00 00 00 00 00", "00 00 00 00 00 00 00 00 00 00 00 00 00 f4 00 00",
                        "00 12 00 00 00 00 00 00 00 00 00 00 00 00 00 00", "00 00 00 00 00 00 00 00 00 ca 00 00 00 00 00 00"};
  for (int line = 0; line < 24; ++line) {
    char offset[16];
    std::snprintf(offset, sizeof offset, "\n%06x", 0x473 + 16 * line);
    piece(dump_ids, dump_texts, offset);
    std::string row = rows[line % 4];
    for (size_t at = 0; at < row.size(); at += 3) {  // as Llama 3 reads them: " " and "00"
      piece(dump_ids, dump_texts, " ");
      piece(dump_ids, dump_texts, row.substr(at, 2));
    }
    piece(dump_ids, dump_texts, "  >................<");
  }
  for (const auto& e : f.run(dump_ids, &dump_texts)) ADD_FAILURE() << "hex dump: " << e.type << " " << e.evidence;

  std::vector<int32_t> garbage_ids = random_tokens(40, 68);
  std::vector<std::string> garbage_texts(garbage_ids.size(), " word");
  for (int k = 0; k < 40; ++k)
    for (const char* p : {" 0", ":", " 0", ":", "00", " //"}) piece(garbage_ids, garbage_texts, p);
  const auto events = f.run(garbage_ids, &garbage_texts);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].type, "loop");
  EXPECT_GE(events[0].detected_at, 40 + 96 - 1);  // at the floor, not at 32 tokens
}

// A long near loop: a 60-word paragraph said again with a counter and a word in twelve swapped. Four
// copies of 100 words would not end within the 400 words a loop is given, so units of 40-120 words
// need three copies: caught in the third, where near_words_long 0 waits for the fourth.
TEST(GuardDetectors, LongNearLoopsAreCaughtInTheThirdCopy) {
  const std::string paragraph =
      "the daemon reads its configuration file when it starts and applies those options to every user of "
      "this system so changing any default behaviour means editing that file then restarting our service "
      "with a command given in the manual page and checking whether your changes were taken into account "
      "by the program before going on to configure logging rotation backups monitoring or remote access";
  std::vector<std::string> unit;
  for (size_t at = 0; at < paragraph.size();) {
    const size_t sp = paragraph.find(' ', at);
    unit.push_back(paragraph.substr(at, sp == std::string::npos ? std::string::npos : sp - at));
    at = sp == std::string::npos ? paragraph.size() : sp + 1;
  }
  ASSERT_GE(unit.size(), 60u);
  const std::vector<std::string> pool = {"quickly", "module", "buffer", "simply", "value", "later", "again"};
  std::vector<int32_t> ids = random_tokens(40, 69);
  std::vector<std::string> texts(ids.size(), " word");
  std::vector<size_t> copy_end;
  for (int copy = 0; copy < 5; ++copy) {
    std::string line = " Attempt " + std::to_string(copy + 2) + ":";
    for (size_t j = 0; j < unit.size(); ++j)  // a word in twelve swapped, at other places in each copy
      line += " " + ((j + 5 * static_cast<size_t>(copy)) % 12 == 0 ? pool[(j + static_cast<size_t>(copy)) % pool.size()]
                                                                     : unit[j]);
    words_to(ids, texts, line + ".");
    copy_end.push_back(ids.size());
  }
  Feeder f;
  const auto events = f.run(ids, &texts);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].type, "near_loop");
  EXPECT_LE(events[0].detected_at, static_cast<int64_t>(copy_end[2]) + 8) << events[0].evidence;
  Feeder four;
  four.cfg.near_words_long = 0;
  const auto later = four.run(ids, &texts);
  ASSERT_FALSE(later.empty());
  EXPECT_GT(later[0].detected_at, static_cast<int64_t>(copy_end[2]) + 8);
}

// GNU licence notices quoted for each file of a package (debian/copyright): 128-131 words, the
// same but for "Lesser" and a version. Past 120 words a unit needs four copies, and three notices
// pass.
TEST(GuardDetectors, ThreeLicenceNoticesPass) {
  auto notice = [](const std::string& lesser, const std::string& version) {
    return " This program is free software; you can redistribute it and/or modify it under the terms of the GNU " +
           lesser + "General Public License as published by the Free Software Foundation; either version " + version +
           " of the License, or (at your option) any later version.\n .\n This program is distributed in the hope "
           "that it will be useful, but WITHOUT ANY WARRANTY; without even the implied warranty of MERCHANTABILITY "
           "or FITNESS FOR A PARTICULAR PURPOSE. See the GNU " +
           lesser + "General Public License for more details.\n .\n You should have received a copy of the GNU " +
           lesser + "General Public License along with this program. If not, see <https://www.gnu.org/licenses/>.\n"
           " .\n On Debian systems, the complete text of the GNU " + lesser + "General Public License version " +
           version + " can be found in the file /usr/share/common-licenses/" + (lesser.empty() ? "GPL-" : "LGPL-") +
           version + ".\n\nFiles: src/*\nCopyright: 2019-2024 The Authors\nLicense:";
  };
  std::vector<int32_t> ids = random_tokens(40, 70);
  std::vector<std::string> texts(ids.size(), " word");
  words_to(ids, texts, notice("", "2") + notice("Lesser ", "2.1") + notice("", "3") + " BSD-3-clause\n");
  Feeder f;
  for (const auto& e : f.run(ids, &texts)) ADD_FAILURE() << e.type << " " << e.evidence;
}

// A locale file's list of categories: each line changes one word the text has not used before,
// so the positional near-loop rule's 12 lines at 90% are a list, not a loop.
TEST(GuardDetectors, ListLinesThatBringNewWordsAreNotALoop) {
  const std::vector<std::string> cats = {"IDENTIFICATION", "CTYPE", "COLLATE", "TIME",    "NUMERIC",   "MONETARY",
                                         "MESSAGES",       "PAPER", "NAME",    "ADDRESS", "TELEPHONE", "MEASUREMENT"};
  std::vector<int32_t> ids = random_tokens(20, 41);
  std::vector<std::string> texts(ids.size(), " word");
  for (const auto& c : cats)
    append(ids, texts,
           {{90, "category"},
            {91, " \""},
            {92, "i"},
            {93, "18"},
            {94, "n"},
            {95, ":"},
            {96, "201"},
            {97, "2"},
            {98, "\";"},
            {99, "LC"},
            {100, "_"},
            {static_cast<int32_t>(std::hash<std::string>{}(c) % 3000 + 1000), c},
            {101, "\n"}},
           1);
  Feeder f;
  const auto events = f.run(ids, &texts);
  EXPECT_TRUE(events.empty()) << events[0].type << " " << events[0].evidence;
}

// A reasoning model cycling through paraphrases of "let me check again", in a shuffled order: no
// period, varied 3-grams, but every sentence keeps coming back. A block of ten sentences quoted
// twice (a licence in two places) has each sentence only once before, and passes.
TEST(GuardDetectors, RecurringSentencesAreAPhraseLoop) {
  const std::vector<std::string> para = {" Wait, let me check again.",
                                         " Hmm, let me verify that once more.",
                                         " Actually, let me re-check this.",
                                         " Let me double-check the calculation.",
                                         " Hold on, I should confirm this again.",
                                         " Let me look at it one more time."};
  std::mt19937 rng(5);
  std::vector<int32_t> ids = random_tokens(30, 51);
  std::vector<std::string> texts(ids.size(), " word");
  texts.back() = " word.";
  for (int k = 0; k < 40; ++k) words_to(ids, texts, para[rng() % para.size()]);
  Feeder f;
  f.cfg.near_words_max = 0;  // this rule alone
  const auto events = f.run(ids, &texts);
  ASSERT_TRUE(has(events, "phrase_loop"));
  const auto& e =
      *std::find_if(events.begin(), events.end(), [](const GuardEvent& x) { return x.type == "phrase_loop"; });
  EXPECT_EQ(e.evidence.value("rule", ""), "sentences") << e.evidence;
  EXPECT_EQ(e.onset, 30);  // where the first of them was written
  // Off: phrase_sentence_run 0.
  Feeder off = f;
  off.cfg.phrase_sentence_run = 0;
  for (const auto& x : off.run(ids, &texts)) EXPECT_NE(x.evidence.value("rule", ""), "sentences");

  // Ten different sentences, quoted twice.
  std::vector<int32_t> quoted = random_tokens(30, 52);
  std::vector<std::string> qt(quoted.size(), " word");
  qt.back() = " word.";
  for (int c = 0; c < 2; ++c)
    for (int k = 0; k < 10; ++k)
      words_to(quoted, qt,
               " Clause " + std::string(1, static_cast<char>('a' + k)) + " of this licence grants the right number " +
                   std::to_string(k) + ".");
  Feeder g;
  g.cfg.block_third_copy = 0;
  for (const auto& x : g.run(quoted, &qt)) EXPECT_NE(x.evidence.value("rule", ""), "sentences") << x.evidence;
}

// The thinking of a reasoning model (guard/thinking.h): a loop inside the <think> block closes it
// at the loop's onset (ForcedText), under a policy that acts; a budget closes it at a sentence end
// within the grace; observe changes nothing.
TEST(GuardThinking, ALoopInTheThinkingIsClosedAtItsOnset) {
  auto first_inject = [](GuardConfig c, const std::vector<int32_t>& t, const std::vector<std::string>& texts,
                         int64_t* at) -> std::optional<ForcedText> {
    c.thinking.watch = true;
    c.thinking.opened = true;
    c.thinking.close = {7, 8};
    c.thinking.close_after_newline = {8};
    Guard g(c, {kEos});
    std::vector<int32_t> prompt{1}, generated;
    std::vector<float> logits(kVocab, 0.0f);
    std::string text;
    for (size_t i = 0; i < t.size(); ++i) {
      generated.push_back(t[i]);
      text += texts[i];
      std::fill(logits.begin(), logits.end(), 0.0f);
      logits[static_cast<size_t>(t[i])] = 6.0f;
      const StepVerdict v =
          g.on_step(StepView{static_cast<int64_t>(i), t[i], logits.data(), kVocab, prompt, generated, text});
      if (v.inject) {
        *at = static_cast<int64_t>(i);
        return v.inject;
      }
      if (v.stop) return std::nullopt;
    }
    return std::nullopt;
  };
  std::vector<int32_t> ids = random_tokens(20, 61);
  std::vector<std::string> texts(ids.size(), " w");
  const std::vector<int32_t> period = random_tokens(6, 62);
  for (int c = 0; c < 8; ++c)
    for (int32_t x : period) {
      ids.push_back(x);
      texts.push_back(" p");
    }
  GuardConfig stop;
  ASSERT_TRUE(set_guard_policy("stop:loop,flooding", stop).ok());
  int64_t at = -1;
  auto f = first_inject(stop, ids, texts, &at);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->keep, 20);                              // the loop's onset: its first copy is dropped too
  EXPECT_EQ(f->tokens, (std::vector<int32_t>{7, 8}));  // mid-line: the close after a line break
  EXPECT_EQ(f->min_after, 4);
  EXPECT_LE(at, 20 + 32);  // by loop_min_span tokens of it
  // Observe: nothing; reasoning_loop stop: the policy's own stop.
  GuardConfig observe;
  EXPECT_FALSE(first_inject(observe, ids, texts, &at).has_value());
  GuardConfig stopping = stop;
  stopping.thinking.answer_on_loop = false;
  EXPECT_FALSE(first_inject(stopping, ids, texts, &at).has_value());

  // A budget of 10: no loop, sentences of 5 words; closed at the first sentence end from token 10.
  std::vector<int32_t> prose = random_tokens(60, 63);
  std::vector<std::string> pt;
  for (size_t i = 0; i < prose.size(); ++i) pt.push_back(i % 5 == 4 ? " end." : " w");
  GuardConfig budget;
  budget.thinking.budget = 10;
  f = first_inject(budget, prose, pt, &at);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(at, 9);  // the 10th token ends a sentence: the budget is spent at a sentence end
  EXPECT_EQ(f->keep, 10);
  budget.thinking.budget = 11;  // then the next sentence end, 4 tokens into the grace
  f = first_inject(budget, prose, pt, &at);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->keep, 15);
  // Without a sentence end, at budget + grace.
  std::vector<std::string> run_on(prose.size(), " w");
  budget.thinking.grace = 5;
  f = first_inject(budget, prose, run_on, &at);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->keep, 16);  // budget 11 + grace 5
}

// Perpetual mode: a model whose EOS is stepped back from ends in words instead. "The End." on a line
// of its own, or a line opening with "In conclusion,", before the minimum is stepped back from to
// where it began; a sentence that merely contains the words is not; after the minimum, nothing.
TEST(GuardPerpetual, AnEndingInWordsIsSteppedBackFrom) {
  auto first_repair = [](int64_t min_tokens, const std::vector<std::string>& texts, int64_t* at) {
    GuardConfig c;
    c.perpetual_min_tokens = min_tokens;
    Guard g(c, {kEos});
    std::vector<int32_t> prompt{1}, generated;
    std::vector<float> logits(kVocab, 0.0f);
    std::string text;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto id = static_cast<int32_t>(100 + std::hash<std::string>{}(texts[i]) % 3000);
      generated.push_back(id);
      text += texts[i];
      const StepVerdict v =
          g.on_step(StepView{static_cast<int64_t>(i), id, logits.data(), kVocab, prompt, generated, text});
      if (v.repair) {
        *at = static_cast<int64_t>(i);
        return v.repair->keep;
      }
    }
    return int64_t{-1};
  };
  std::vector<std::string> story = {"Once", " upon", " a", " time", " there", " was", " a", " king", ".", "\n"};
  std::vector<std::string> ended = story;
  for (const char* t : {"The", " End", ".", " Then"}) ended.push_back(t);
  int64_t at = -1;
  EXPECT_EQ(first_repair(100, ended, &at), 10);  // back to "The"
  EXPECT_EQ(at, 12);                             // when "." closed it
  std::vector<std::string> bare = story;         // "THE END" alone on its line, closed by the break
  for (const char* t : {"THE", " END", "\n", "More"}) bare.push_back(t);
  EXPECT_EQ(first_repair(100, bare, &at), 10);
  std::vector<std::string> concl = story;
  for (const char* t : {"In", " conclusion", ",", " the", " king"}) concl.push_back(t);
  EXPECT_EQ(first_repair(100, concl, &at), 10);
  EXPECT_EQ(at, 12);
  std::vector<std::string> italian = story;  // "Fine" alone on its line, and "In conclusione,"
  for (const char* t : {"Fine", "\n", "Poi"}) italian.push_back(t);
  EXPECT_EQ(first_repair(100, italian, &at), 10);
  std::vector<std::string> conclusione = story;
  for (const char* t : {"In", " conclusione", ",", " il", " re"}) conclusione.push_back(t);
  EXPECT_EQ(first_repair(100, conclusione, &at), 10);
  std::vector<std::string> signed_off = story;
  for (const char* t : {"Best", " regards", ",", "\n", "John"}) signed_off.push_back(t);
  EXPECT_EQ(first_repair(100, signed_off, &at), 10);
  std::vector<std::string> mid = story;  // a phrase that goes on is no ending
  for (const char* t :
       {"In",   " conclusion", " of",  " the",  " first", " part", ",",    " the",     " king", ".", " The",
        " end", " of",         " the", " road", ".",      "\n",    "Fine", " weather", " came", "."})
    mid.push_back(t);
  EXPECT_EQ(first_repair(100, mid, &at), -1);
  std::vector<std::string> prose = story;  // the words inside a sentence are not an ending
  for (const char* t : {"It", " was", " the", " end", ".", " Then", " more", "."}) prose.push_back(t);
  EXPECT_EQ(first_repair(100, prose, &at), -1);
  EXPECT_EQ(first_repair(8, ended, &at), -1);  // past the minimum: the model may end
  EXPECT_EQ(first_repair(0, ended, &at), -1);  // perpetual mode off
}

TEST(GuardPolicies, ScopeNamesTheDetectorsThePolicyActsOn) {
  GuardConfig cfg;
  ASSERT_TRUE(set_guard_policy("stop:loop,flooding", cfg).ok());
  EXPECT_EQ(cfg.policy, GuardPolicy::Stop);
  EXPECT_EQ(cfg.act_on, (std::vector<std::string>{"loop", "flooding"}));
  EXPECT_EQ(guard_policy_spec(cfg), "stop:loop,flooding");
  ASSERT_TRUE(set_guard_policy("repair", cfg).ok());
  EXPECT_TRUE(cfg.act_on.empty());
  EXPECT_EQ(guard_policy_spec(cfg), "repair");
  const Status bad = set_guard_policy("stop:loops", cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("'loops' is not a detector"), std::string::npos) << bad.message();
  EXPECT_FALSE(set_guard_policy("halt", cfg).ok());
  EXPECT_FALSE(set_guard_policy("stop:", cfg).ok());
  EXPECT_EQ(guard_policy_spec(cfg), "repair");  // a failed parse changes nothing

  // Under stop:loop,flooding a near loop is observed and the generation goes on; an exact loop stops.
  auto first_verdict = [](const std::vector<int32_t>& t, const std::string& spec, std::string* type) {
    GuardConfig c;
    EXPECT_TRUE(set_guard_policy(spec, c).ok());
    Guard g(c, {kEos});
    std::vector<int32_t> prompt{1}, generated;
    std::vector<float> logits(kVocab, 0.0f);
    std::string text;
    for (size_t i = 0; i < t.size(); ++i) {
      generated.push_back(t[i]);
      std::fill(logits.begin(), logits.end(), 0.0f);
      for (int k = 0; k < 8; ++k) logits[static_cast<size_t>((t[i] + 97 * k) % kVocab)] = 6.0f;  // as Feeder
      const StepVerdict v =
          g.on_step(StepView{static_cast<int64_t>(i), t[i], logits.data(), kVocab, prompt, generated, text});
      if (v.stop) {
        *type = g.report().events.back().type;
        return static_cast<int64_t>(i);
      }
    }
    const auto ev = g.report().events;
    *type = ev.empty() ? "" : ev.back().type + "/" + ev.back().action;
    return int64_t{-1};
  };
  std::vector<int32_t> near = random_tokens(20, 14);
  for (int n = 0; n < 20; ++n)
    for (int32_t w : {500, 501, 502, 503, 1000 + n, 504}) near.push_back(w);
  std::string type;
  EXPECT_EQ(first_verdict(near, "stop:loop,flooding", &type), -1);
  EXPECT_EQ(type, "near_loop/observe");
  EXPECT_GE(first_verdict(near, "stop", &type), 0);
  EXPECT_EQ(type, "near_loop");
  std::vector<int32_t> exact = random_tokens(20, 15);
  for (int n = 0; n < 20; ++n)
    for (int32_t w : {500, 501, 502, 503, 504}) exact.push_back(w);
  EXPECT_EQ(first_verdict(exact, "stop:loop,flooding", &type), 20 + 32 - 1);
  EXPECT_EQ(type, "loop");
}

TEST(GuardPolicies, StopAndRepairVerdicts) {
  std::vector<int32_t> t = random_tokens(20, 9);
  const std::vector<int32_t> unit = {40, 41, 42, 43, 44};
  for (int r = 0; r < 10; ++r) t.insert(t.end(), unit.begin(), unit.end());
  for (GuardPolicy policy : {GuardPolicy::Stop, GuardPolicy::Repair}) {
    GuardConfig cfg;
    cfg.policy = policy;
    Guard g(cfg, {kEos});
    std::vector<int32_t> prompt{1}, generated;
    std::vector<float> logits(kVocab, 0.0f);
    std::string text;
    StepVerdict v;
    size_t i = 0;
    for (; i < t.size(); ++i) {
      generated.push_back(t[i]);
      std::fill(logits.begin(), logits.end(), 0.0f);
      logits[static_cast<size_t>(t[i])] = 12.0f;  // a confident model
      v = g.on_step(StepView{static_cast<int64_t>(i), t[i], logits.data(), kVocab, prompt, generated, text});
      if (v.stop || v.repair) break;
    }
    if (policy == GuardPolicy::Stop) {
      EXPECT_TRUE(v.stop);
      EXPECT_EQ(v.finish_reason, "repetition");
    } else {
      ASSERT_TRUE(v.repair);
      EXPECT_EQ(v.repair->keep, 20 + 5);  // the first copy stays
      EXPECT_FLOAT_EQ(v.repair->factor, 2.0f);
    }
    EXPECT_EQ(i, 20u + 32u - 1u);
  }
}

TEST(GuardOnTheBundledModel, RepairsEndTheGreedyLoopAndAreReproducible) {
  auto loaded = load_generator(CODA_MODEL_PATH, GeneratorOptions{1, 0, 4096, ""});
  ASSERT_TRUE(loaded) << loaded.message();
  GenerationRequest r;
  r.prompt = "In the beginning God";
  r.max_tokens = 300;
  r.sampling.temperature = 0;
  r.sampling.seed = 42;
  GuardConfig observe;
  auto seen = generate_guarded(*loaded->generator, r, observe);
  ASSERT_TRUE(seen);
  ASSERT_FALSE(seen->report.events.empty());  // greedy loops from the first token
  EXPECT_EQ(seen->report.events[0].type, "loop");
  EXPECT_EQ(seen->result.finish_reason, "length");
  GuardConfig stop;
  stop.policy = GuardPolicy::Stop;
  auto stopped = generate_guarded(*loaded->generator, r, stop);
  ASSERT_TRUE(stopped);
  EXPECT_EQ(stopped->result.finish_reason, "repetition");
  EXPECT_EQ(stopped->result.completion_tokens, seen->report.events[0].detected_at + 1);
  GuardConfig repair;
  repair.policy = GuardPolicy::Repair;
  repair.trace = true;
  std::string streamed;
  auto a = generate_guarded(*loaded->generator, r, repair, [&](const StreamChunk& c) {
    streamed += c.text;
    return true;
  });
  auto b = generate_guarded(*loaded->generator, r, repair);
  ASSERT_TRUE(a && b);
  EXPECT_GE(a->result.repairs, 1);
  EXPECT_EQ(a->result.tokens, b->result.tokens);  // seeded: the repair is reproducible
  EXPECT_EQ(a->report.to_json(), b->report.to_json());
  EXPECT_EQ(streamed, a->result.text);  // nothing rolled back was ever streamed
  EXPECT_EQ(a->report.repairs.size(), static_cast<size_t>(a->result.repairs));
  bool rollback_in_trace = false;
  for (const auto& line : a->trace) rollback_in_trace = rollback_in_trace || line.contains("rollback_to");
  EXPECT_TRUE(rollback_in_trace);
  // The repaired text is not the greedy loop.
  EXPECT_EQ(a->result.text.find("of Israel, and the LORD God of Israel, and the LORD God of Israel, and the LORD"),
            std::string::npos);
}

TEST(GuardOnTheBundledModel, EarlyEosIsSteppedBackFromForPerpetualGeneration) {
  auto loaded = load_generator(CODA_MODEL_PATH, GeneratorOptions{1, 0, 4096, ""});
  ASSERT_TRUE(loaded);
  GenerationRequest r;
  r.prompt = "And Moses said unto";
  r.max_tokens = 200;
  r.sampling.temperature = 0.7f;
  r.sampling.seed = 5;
  r.sampling.logit_bias[loaded->vocab->eos()] = 6.0f;  // make this model want to stop early
  GuardConfig plain;
  auto early = generate_guarded(*loaded->generator, r, plain);
  ASSERT_TRUE(early);
  ASSERT_EQ(early->result.finish_reason, "stop");
  ASSERT_LT(early->result.completion_tokens, 40);
  GuardConfig perpetual;
  perpetual.perpetual_min_tokens = 40;
  auto longer = generate_guarded(*loaded->generator, r, perpetual);
  ASSERT_TRUE(longer);
  ASSERT_FALSE(longer->report.repairs.empty());
  EXPECT_EQ(longer->report.repairs[0].reason, "early_eos");
  EXPECT_EQ(longer->report.repairs[0].keep, std::max<int64_t>(0, longer->report.repairs[0].at - 8));
  // Either it got past the minimum, or it used up the repair budget trying.
  EXPECT_TRUE(longer->result.completion_tokens >= 40 ||
              static_cast<int>(longer->report.repairs.size()) == perpetual.max_repairs);
  EXPECT_GT(longer->result.completion_tokens, early->result.completion_tokens);
}

}  // namespace
}  // namespace coda
