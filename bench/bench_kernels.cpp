// Microbenchmarks of the dot-product kernels (one 4096-element row, as in a 4K-wide matmul), SIMD vs
// scalar. Run: ./build/bench/bench_kernels
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/kernels.h"

namespace coda {
namespace {

void BM_Dot(benchmark::State& state, DType t, int level) {
  const int64_t n = 4096;
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  std::vector<float> w(n), x(n);
  for (auto& v : w) v = d(rng);
  for (auto& v : x) v = d(rng);
  std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(t, n)));
  ref::quantize_row(t, w.data(), q.data(), n);
  std::vector<uint8_t> act(static_cast<size_t>(act_row_bytes(t, n)));
  prepare_act(t, x.data(), act.data(), n);
  const void* a = act.data();
  const KernelTable* k = level == 2 ? avx512_kernels() : level == 1 ? avx2_kernels() : &scalar_kernels();
  if (k == nullptr) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(k->dot[static_cast<int>(t)](q.data(), a, n));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(q.size()));
}

#define CODA_BENCH_TYPE(T)                            \
  BENCHMARK_CAPTURE(BM_Dot, T##_avx512, DType::T, 2); \
  BENCHMARK_CAPTURE(BM_Dot, T##_avx2, DType::T, 1);   \
  BENCHMARK_CAPTURE(BM_Dot, T##_scalar, DType::T, 0);

CODA_BENCH_TYPE(F32)
CODA_BENCH_TYPE(F16)
CODA_BENCH_TYPE(BF16)
CODA_BENCH_TYPE(Q8_0)
CODA_BENCH_TYPE(Q4_0)
CODA_BENCH_TYPE(Q4_K)
CODA_BENCH_TYPE(Q5_K)
CODA_BENCH_TYPE(Q6_K)

}  // namespace
}  // namespace coda

BENCHMARK_MAIN();
