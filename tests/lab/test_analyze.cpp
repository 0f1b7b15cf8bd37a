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
