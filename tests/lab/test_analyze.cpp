// Block-wise analysis: block means by hand, rollbacks in traces, EOS contexts, the outputs' shapes.
#include <gtest/gtest.h>

#include "lab/analyze.h"

namespace coda {
namespace {

TEST(Analyze, BlockMeansOverSequencesThatReachTheBlock) {
  auto step = [](int64_t i, double eos, double s, double h, double v, int32_t rank = 9) {
    TraceStep t;
    t.i = i;
    t.eos_prob = eos;
    t.surprisal = s;
    t.entropy = h;
    t.varentropy = v;
    t.eos_rank = rank;
    return t;
  };
  // Sequence A: 4 steps; sequence B: 2 steps. Blocks of 2.
  std::vector<std::vector<TraceStep>> traces = {
      {step(0, 0.1, 1, 2, 3), step(1, 0.3, 3, 4, 5), step(2, 0.5, 5, 6, 7, 1), step(3, 0.7, 7, 8, 9)},
      {step(0, 0.2, 2, 2, 2), step(1, 0.4, 4, 4, 4)}};
  traces[0][2].top = {{"</s>", -0.7}, {"x", -1.0}};
  const Analysis a = analyze_traces(traces, 2, 5);
  ASSERT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(a.blocks[0].sequences, 2);
  EXPECT_EQ(a.blocks[0].steps, 4);
  EXPECT_DOUBLE_EQ(a.blocks[0].eos_prob, (0.1 + 0.3 + 0.2 + 0.4) / 4);
  EXPECT_DOUBLE_EQ(a.blocks[0].surprisal, (1 + 3 + 2 + 4) / 4.0);
  EXPECT_EQ(a.blocks[1].sequences, 1);
  EXPECT_DOUBLE_EQ(a.blocks[1].entropy, 7.0);
  EXPECT_DOUBLE_EQ(a.blocks[1].varentropy, 8.0);
  ASSERT_EQ(a.eos_contexts.size(), 1u);  // only step 2 of A had EOS in the top 5
  EXPECT_EQ(a.eos_contexts[0].i, 2);
  EXPECT_EQ(a.eos_contexts[0].top.size(), 2u);
  const std::string csv = a.to_csv();
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "block,first_token,sequences,steps,eos_prob,information_content,entropy,varentropy");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);
  const std::string html = a.to_html("t <1>");
  EXPECT_NE(html.find("t &lt;1&gt;"), std::string::npos);
  EXPECT_EQ(std::count(html.begin(), html.end(), '<') - std::count(html.begin(), html.end(), '>'), 0);
}

TEST(Analyze, AlignedOnTheEndBlocksCountBackFromEachEos) {
  // A ends after 5 steps, B after 8; each one's last step is its EOS (probability 1 there, 0 before).
  auto seq = [](int n) {
    std::vector<TraceStep> t(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) {
      t[static_cast<size_t>(k)].i = k;
      t[static_cast<size_t>(k)].eos_prob = k == n - 1 ? 1.0 : 0.0;
      t[static_cast<size_t>(k)].entropy = k;  // the step's index, to check which steps each block took
    }
    return t;
  };
  const Analysis a = analyze_traces({seq(5), seq(8)}, 2, 5, true);
  // Back from the end in blocks of 2: A = {0}, {1,2}, {3,4}; B = {0,1}, {2,3}, {4,5}, {6,7}.
  ASSERT_EQ(a.blocks.size(), 4u);
  const int64_t want_block[] = {-4, -3, -2, -1};
  const int64_t want_steps[] = {2, 3, 4, 4}, want_seqs[] = {1, 2, 2, 2};
  const double want_entropy[] = {(0 + 1) / 2.0, (0 + 2 + 3) / 3.0, (1 + 2 + 4 + 5) / 4.0, (3 + 4 + 6 + 7) / 4.0};
  for (size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(a.blocks[b].block, want_block[b]);
    EXPECT_EQ(a.blocks[b].steps, want_steps[b]) << b;
    EXPECT_EQ(a.blocks[b].sequences, want_seqs[b]) << b;
    EXPECT_DOUBLE_EQ(a.blocks[b].entropy, want_entropy[b]) << b;
  }
  EXPECT_DOUBLE_EQ(a.blocks[3].eos_prob, 0.5);  // both EOS steps in the last block, of its 4 steps
  EXPECT_DOUBLE_EQ(a.blocks[2].eos_prob, 0.0);
  EXPECT_EQ(a.to_json()["aligned_on"], "end");
  EXPECT_NE(a.to_html("t").find("end (EOS)"), std::string::npos);
}

TEST(Analyze, RollbacksInATraceDropTheStepsTheyUndid) {
  std::vector<nlohmann::ordered_json> lines = {{{"i", 0}, {"token", 5}, {"entropy", 1.0}},
                                               {{"i", 1}, {"token", 6}},
                                               {{"i", 2}, {"token", 7}},
                                               {{"rollback_to", 1}},
                                               {{"i", 1}, {"token", 9}},
                                               {{"i", 2}, {"token", 10}}};
  const auto steps = trace_from_json(lines);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].token, 5);
  EXPECT_EQ(steps[1].token, 9);
  EXPECT_EQ(steps[2].token, 10);
  EXPECT_FALSE(read_trace("/nonexistent/trace.jsonl"));
}

}  // namespace
}  // namespace coda
