// Cost of one sampling step over a Llama-3-sized vocabulary (128,256 logits) with a 1,000-token
// history, per chain configuration. Compare with a decode step (docs/performance.md).
// Run: ./build/bench/bench_sampling
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "sampling/chain.h"

namespace coda {
namespace {

void run(benchmark::State& state, const SamplingParams& p) {
  const int32_t n = 128256;
  // Zipf-like logits (a language model's next-token distribution is heavy at the top), shuffled.
  std::mt19937 rng(1);
  std::vector<float> logits(n);
  for (int32_t i = 0; i < n; ++i) logits[static_cast<size_t>(i)] = -1.2f * std::log(static_cast<float>(i + 1));
  std::shuffle(logits.begin(), logits.end(), rng);
  TokenHistory h;
  for (int i = 0; i < 1000; ++i) h.generated.push_back(static_cast<int32_t>(rng() % n));
  SamplerVocab v;
  v.n_vocab = n;
  v.eos_ids = {n - 1};
  auto chain = SamplerChain::create(p, v);
  SamplerRng srng(p.seed);
  for (auto _ : state) benchmark::DoNotOptimize(chain->sample(logits.data(), n, h, srng));
}

void BM_Greedy(benchmark::State& s) {
  SamplingParams p;
  p.temperature = 0;
  run(s, p);
}
// What a request gets when it sets nothing (OpenAI/vLLM defaults: temperature 1, top_p 1).
void BM_ServerDefault(benchmark::State& s) {
  run(s, SamplingParams{});
}
void BM_TemperatureOnly(benchmark::State& s) {
  SamplingParams p;
  p.temperature = 0.8f;
  run(s, p);
}
// llama.cpp's usual settings: penalties, top-k 40, top-p 0.95, min-p 0.05, temperature 0.8.
void BM_FullDefaultChain(benchmark::State& s) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.repetition_window = 64;
  p.frequency_penalty = 0.1f;
  run(s, p);
}
// Every processor on at once: the upper bound of what a request can ask for.
void BM_EveryProcessor(benchmark::State& s) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.dynatemp_range = 0.3f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.typical_p = 0.95f;
  p.top_n_sigma = 2.0f;
  p.repetition_penalty = 1.1f;
  p.repetition_window = 64;
  p.frequency_penalty = 0.1f;
  p.presence_penalty = 0.1f;
  p.dry_multiplier = 0.8f;
  p.dry_window = 1024;
  p.xtc_probability = 0.5f;
  p.no_repeat_ngram_size = 4;
  p.min_tokens = 4;
  p.ignore_eos = true;
  run(s, p);
}
void BM_TopPWithoutTopK(benchmark::State& s) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  run(s, p);
}

BENCHMARK(BM_Greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ServerDefault)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TemperatureOnly)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FullDefaultChain)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EveryProcessor)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopPWithoutTopK)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace coda

BENCHMARK_MAIN();
