// The system plane's readings of a deployment: Prometheus text and llama.cpp's GET /slots, as the
// servers send them (bodies written from llama-server's and ik_llama.cpp's slot formats).
#include <gtest/gtest.h>

#include <string>

#include "lab/diagnose.h"

namespace coda::lab {
namespace {

TEST(DiagnoseSlots, LlamaServerCountsTheFullestBusySlot) {
  // llama-server (2026): is_processing, and n_prompt_tokens holds the prompt and the tokens generated.
  SystemSample s;
  ASSERT_TRUE(fold_slots(R"([{"id":0,"n_ctx":2048,"is_processing":true,"n_prompt_tokens":512},
                             {"id":1,"n_ctx":2048,"is_processing":false,"n_prompt_tokens":2040},
                             {"id":2,"n_ctx":2048,"is_processing":true,"n_prompt_tokens":1024}])",
                         s));
  EXPECT_TRUE(s.slots_available);
  EXPECT_EQ(s.slots_total, 3);
  EXPECT_EQ(s.slots_busy_peak, 2);
  EXPECT_DOUBLE_EQ(s.slot_context_peak, 0.5);  // the idle slot's cached 2040 tokens are not a request
  EXPECT_EQ(s.slot_n_ctx, 2048);
  // A later reading keeps the peaks.
  ASSERT_TRUE(fold_slots(R"([{"id":0,"n_ctx":2048,"is_processing":true,"n_prompt_tokens":1536},
                             {"id":1,"n_ctx":2048,"is_processing":false},
                             {"id":2,"n_ctx":2048,"is_processing":false}])",
                         s));
  EXPECT_EQ(s.slots_busy_peak, 2);
  EXPECT_DOUBLE_EQ(s.slot_context_peak, 0.75);
}

TEST(DiagnoseSlots, OlderShapesStateAndNPast) {
  SystemSample s;
  // ik_llama.cpp: state (0 idle) and no token count: busy slots, no share.
  ASSERT_TRUE(fold_slots(R"([{"id":0,"n_ctx":4096,"state":1},{"id":1,"n_ctx":4096,"state":0}])", s));
  EXPECT_EQ(s.slots_busy_peak, 1);
  EXPECT_LT(s.slot_context_peak, 0);
  // n_past, where a server says it, is the sequence's length.
  ASSERT_TRUE(fold_slots(R"([{"id":0,"n_ctx":4096,"state":1,"n_past":4000,"n_prompt_tokens":10}])", s));
  EXPECT_NEAR(s.slot_context_peak, 4000.0 / 4096, 1e-12);
}

TEST(DiagnoseSlots, WhatIsNotAListOfSlotsIsRefused) {
  SystemSample s;
  EXPECT_FALSE(fold_slots(R"({"detail":"Not Found"})", s));  // vLLM's 404 body
  EXPECT_FALSE(fold_slots("[]", s));
  EXPECT_FALSE(fold_slots("[1, 2]", s));
  EXPECT_FALSE(fold_slots(R"([{"id":0}])", s));  // no n_ctx: not a slot
  EXPECT_FALSE(fold_slots("not json", s));
  EXPECT_FALSE(s.slots_available);
  // A zero or absurd n_ctx gives no share rather than a division by zero.
  EXPECT_TRUE(fold_slots(R"([{"id":0,"n_ctx":0,"is_processing":true,"n_prompt_tokens":5}])", s));
  EXPECT_LT(s.slot_context_peak, 0);
}

TEST(DiagnoseMetrics, LlamaCppNamesWithoutAKvGauge) {
  // llama-server --metrics (2026): requests_processing and requests_deferred, no KV gauge.
  const auto m = parse_prometheus(
      "# HELP llamacpp:requests_processing Number of requests processing.\n"
      "# TYPE llamacpp:requests_processing gauge\n"
      "llamacpp:requests_processing 2\n"
      "llamacpp:requests_deferred 3\n");
  SystemSample s;
  fold_metrics(m, m, s);
  EXPECT_EQ(s.source, "llama.cpp");
  EXPECT_DOUBLE_EQ(s.waiting_peak, 3);
  EXPECT_LT(s.kv_usage_peak, 0);
  // ik_llama.cpp keeps the gauge.
  fold_metrics(parse_prometheus("llamacpp:kv_cache_usage_ratio 0.25\n"), m, s);
  EXPECT_DOUBLE_EQ(s.kv_usage_peak, 0.25);
}

}  // namespace
}  // namespace coda::lab
