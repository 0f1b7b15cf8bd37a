// `coda bench`'s runner on the in-process engine (the bundled model through the same scheduler as
// coda serve): what the records count equals what the engine's own metrics report.
#include <gtest/gtest.h>

#include "lab/load_bench.h"

namespace coda::lab {
namespace {

TEST(LoadRun, InProcessFinishReasonsEqualTheEnginesMetrics) {
  GeneratorOptions go;
  go.threads = 1;
  auto loaded = load_generator(CODA_MODEL_PATH, go);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EngineTarget target(*loaded->generator, {});
  auto prompts = builtin_prompts("exam,technical", "en,it");
  ASSERT_TRUE(prompts.ok());
  LoadOptions o;
  o.rate_per_min = 0;
  o.requests = 24;
  o.sets = 2;
  o.max_tokens = 48;  // short enough that some requests end by length
  o.sampling = {{"temperature", 0.9}};
  o.seed = 3;
  auto run = run_load(target, *prompts, o, {}, nullptr);
  ASSERT_EQ(run.records.size(), 48u);
  const auto s = summarize(run, o, target.describe());
  EXPECT_EQ(s["completed"], 48);
  int64_t total = 0;
  for (const char* r : {"stop", "length", "repetition", "degenerate", "abort"}) {
    EXPECT_EQ(s["finish_reasons"][r].get<int64_t>(),
              static_cast<int64_t>(target.metrics().value("coda:request_success_total", r)))
        << r;
    total += s["finish_reasons"][r].get<int64_t>();
  }
  EXPECT_EQ(total, 48);
  EXPECT_GT(s["finish_reasons"]["length"].get<int64_t>(), 0);  // failures exist to count
  EXPECT_EQ(s["failures"], s["finish_reasons"]["length"]);
  // Seeded runs reproduce: same seed, same texts.
  EngineTarget again(*loaded->generator, {});
  auto run2 = run_load(again, *prompts, o, {}, nullptr);
  for (size_t i = 0; i < run.records.size(); ++i) EXPECT_EQ(run.records[i].out.text, run2.records[i].out.text) << i;
}

}  // namespace
}  // namespace coda::lab
