// Microbenchmarks of the dot-product kernels (one 4096-element row, as in a 4K-wide matmul), SIMD vs
// scalar, and of the packed GEMM tiles (16 rows x 64 tokens, in cache). Run: ./build/bench/bench_kernels
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/repack.h"

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

// The same row against 8 tokens (batched decode of 8 streams, a prefill tile of unpacked rows):
// through the 8-token kernel where the table has one (`eight`), else two 4-token calls. Items are
// multiply-adds (8 x 4,096 per iteration).
void BM_DotTokens(benchmark::State& state, DType t, int level, bool eight) {
  const int64_t n = 4096;
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  std::vector<float> w(n), x(n);
  for (auto& v : w) v = d(rng);
  std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(t, n)));
  ref::quantize_row(t, w.data(), q.data(), n);
  const int64_t stride = act_row_bytes(t, n);
  std::vector<uint8_t> act(static_cast<size_t>(8 * stride));
  for (int k = 0; k < 8; ++k) {
    for (auto& v : x) v = d(rng);
    prepare_act(t, x.data(), act.data() + k * stride, n);
  }
  const KernelTable* k = level == 2 ? avx512_kernels() : avx2_kernels();
  if (k == nullptr || (eight && k->dot8[static_cast<int>(t)] == nullptr)) {
    state.SkipWithError("this CPU lacks the instruction set, or the table has no 8-token kernel for the type");
    return;
  }
  float out[8];
  for (auto _ : state) {
    if (eight) {
      k->dot8[static_cast<int>(t)](q.data(), act.data(), stride, n, out);
    } else {
      k->dot4[static_cast<int>(t)](q.data(), act.data(), stride, n, out);
      k->dot4[static_cast<int>(t)](q.data(), act.data() + 4 * stride, stride, n, out + 4);
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * 8 * n);
}
BENCHMARK_CAPTURE(BM_DotTokens, Q6_K_avx2_dot4x2, DType::Q6_K, 1, false);
BENCHMARK_CAPTURE(BM_DotTokens, Q6_K_avx2_dot8, DType::Q6_K, 1, true);
BENCHMARK_CAPTURE(BM_DotTokens, Q6_K_avx512_dot4x2, DType::Q6_K, 2, false);
BENCHMARK_CAPTURE(BM_DotTokens, Q6_K_avx512_dot8, DType::Q6_K, 2, true);

// One packed group of 16 rows (or a pair, 32 rows, through gemm2) x `cols` (first argument) against 64 or 512 tokens
// (second) of activations: the prefill GEMM's inner work with everything in cache. Items are multiply-adds, so items/s
// compares with the CPU's int8 peak (one 512-bit vpdpbusd is 64 of them). One token is decode: bytes/s is then how
// fast the tile consumes weights from cache, the ceiling on its streaming rate from memory.
void BM_Gemm(benchmark::State& state, DType t, bool paired) {
  const int64_t cols = state.range(0), tokens = state.range(1);
  const KernelTable* k = &kernels();
  const GemmFn gemm = paired ? k->gemm2[static_cast<int>(t)] : k->gemm[static_cast<int>(t)];
  if (gemm == nullptr) {
    state.SkipWithError("no packed GEMM for this type on this CPU");
    return;
  }
  const int rows = paired ? 2 * kPackRows : kPackRows;
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  const int64_t row_bytes = dtype_row_bytes(t, cols);
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes * rows));
  std::vector<float> w(static_cast<size_t>(cols));
  for (int r = 0; r < rows; ++r) {
    for (auto& v : w) v = d(rng);
    ref::quantize_row(t, w.data(), q.data() + r * row_bytes, cols);
  }
  const int64_t gb = packed_group_bytes(t, cols);
  std::vector<uint8_t> group(static_cast<size_t>(gb * rows / kPackRows));
  for (int h = 0; h < rows / kPackRows; ++h)
    repack_group(t, q.data() + h * kPackRows * row_bytes, cols, group.data() + h * gb);
  const ActFormat at = gemm_act_format(*k, t);
  const int64_t act_bytes = act_row_bytes(at, cols);
  std::vector<uint8_t> act(static_cast<size_t>(act_bytes * tokens));
  for (int64_t b = 0; b < tokens; ++b) {
    for (auto& v : w) v = d(rng);
    prepare_act(at, w.data(), act.data() + b * act_bytes, cols);
  }
  std::vector<float> y(static_cast<size_t>(rows * tokens));
  for (auto _ : state) {
    gemm(group.data(), cols, act.data(), act_bytes, tokens, y.data(), rows);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * rows * tokens * cols);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(group.size()));  // weight bytes read
}
BENCHMARK_CAPTURE(BM_Gemm, Q8_0, DType::Q8_0, false)
    ->Args({2048, 64})
    ->Args({8192, 64})
    ->Args({2048, 512})
    ->Args({8192, 512})
    ->Args({8192, 1});
BENCHMARK_CAPTURE(BM_Gemm, Q4_0, DType::Q4_0, false)
    ->Args({2048, 64})
    ->Args({8192, 64})
    ->Args({2048, 512})
    ->Args({8192, 512})
    ->Args({8192, 1});
BENCHMARK_CAPTURE(BM_Gemm, Q8_0_pair, DType::Q8_0, true)
    ->Args({2048, 64})
    ->Args({8192, 64})
    ->Args({2048, 512})
    ->Args({8192, 512})
    ->Args({8192, 1});
BENCHMARK_CAPTURE(BM_Gemm, Q4_0_pair, DType::Q4_0, true)
    ->Args({2048, 64})
    ->Args({8192, 64})
    ->Args({2048, 512})
    ->Args({8192, 512})
    ->Args({8192, 1});
BENCHMARK_CAPTURE(BM_Gemm, Q4_K, DType::Q4_K, false)
    ->Args({2048, 64})
    ->Args({8192, 64})
    ->Args({2048, 512})
    ->Args({8192, 512})
    ->Args({8192, 1});
BENCHMARK_CAPTURE(BM_Gemm, Q4_K_pair, DType::Q4_K, true)
    ->Args({2048, 64})
    ->Args({8192, 64})
    ->Args({2048, 512})
    ->Args({8192, 512})
    ->Args({8192, 1});
BENCHMARK_CAPTURE(BM_Gemm, Q6_K, DType::Q6_K, false)
    ->Args({2048, 64})
    ->Args({8192, 64})
    ->Args({2048, 512})
    ->Args({8192, 512})
    ->Args({8192, 1});
BENCHMARK_CAPTURE(BM_Gemm, Q3_K, DType::Q3_K, false)->Args({2048, 64})->Args({8192, 512})->Args({8192, 1});
BENCHMARK_CAPTURE(BM_Gemm, Q2_K, DType::Q2_K, false)->Args({2048, 64})->Args({8192, 512})->Args({8192, 1});
BENCHMARK_CAPTURE(BM_Gemm, IQ4_XS, DType::IQ4_XS, false)->Args({2048, 64})->Args({8192, 512})->Args({8192, 1});
BENCHMARK_CAPTURE(BM_Gemm, Q5_0, DType::Q5_0, false)->Args({2048, 64})->Args({8192, 512})->Args({8192, 1});

// Attention of G query vectors (first argument: 4 is one decoding row of a 4-head group, 32 a block of 8
// prefill rows) over `len` cached positions (second) of one key/value head, half-float cache, head_dim 64, the
// cache of one head contiguous as KvCache lays it out. Items are multiply-adds (scores and values together).
void BM_Attention(benchmark::State& state, int level) {
  const int64_t G = state.range(0), len = state.range(1), hd = 64;
  const KernelTable* k = level == 2 ? avx512_kernels() : level == 1 ? avx2_kernels() : &scalar_kernels();
  if (k == nullptr) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  std::vector<float> q(static_cast<size_t>(G * hd)), kv(static_cast<size_t>(len * hd)),
      out(static_cast<size_t>(G * hd));
  std::vector<float> scores(static_cast<size_t>(G * len));
  for (auto& v : q) v = d(rng);
  for (auto& v : kv) v = d(rng);
  std::vector<uint16_t> k16(kv.size()), v16(kv.size());
  k->f32_to_f16(kv.data(), k16.data(), len * hd);
  for (auto& v : kv) v = d(rng);
  k->f32_to_f16(kv.data(), v16.data(), len * hd);
  const int64_t part = state.range(2);
  for (auto _ : state) {
    if (part != 2) k->attn_scores_f16(q.data(), G, k16.data(), len, hd, 0.125f, scores.data(), len);
    std::fill(out.begin(), out.end(), 0.0f);  // the values kernel adds to the output
    if (part != 1) k->attn_values_f16(scores.data(), G, len, v16.data(), hd, len, hd, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * (part == 0 ? 2 : 1) * G * len * hd);
}
BENCHMARK_CAPTURE(BM_Attention, avx512, 2)->ArgsProduct({{4, 32, 64}, {256, 4096}, {0, 1, 2}});
BENCHMARK_CAPTURE(BM_Attention, avx2, 1)->ArgsProduct({{4, 32, 64}, {256, 4096}, {0, 1, 2}});

// The same over a Q8_0 cache (--cache-type-k/-v q8_0): queries quantized once per call as the
// forward pass does per job, keys in q8 blocks, value rows of 64 int8 values and 2 scales.
void BM_AttentionQ8(benchmark::State& state, int level) {
  const int64_t G = state.range(0), len = state.range(1), hd = 64;
  const KernelTable* k = level == 2 ? avx512_kernels() : level == 1 ? avx2_kernels() : &scalar_kernels();
  if (k == nullptr) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  std::vector<float> q(static_cast<size_t>(G * hd)), row(static_cast<size_t>(hd)), out(static_cast<size_t>(G * hd));
  std::vector<float> scores(static_cast<size_t>(G * len));
  for (auto& v : q) v = d(rng);
  const int64_t qa_stride = act_row_bytes(ActFormat::Q8_32, hd), vr = hd + hd / 16;
  std::vector<uint8_t> qa(static_cast<size_t>(G * qa_stride));
  std::vector<uint8_t> kb(static_cast<size_t>((len + 15) / 16 * q8_key_block_bytes(hd))),
      vb(static_cast<size_t>(len * vr));
  for (auto& b : kb) b = static_cast<uint8_t>(rng() % 200 + 28);
  for (int64_t j = 0; j < (len + 15) / 16 * 16; ++j)
    for (int64_t b = 0; b < hd / 32; ++b) {
      const uint16_t s = 0x2000;  // a half float of 2^-7
      std::memcpy(kb.data() + j / 16 * q8_key_block_bytes(hd) + q8_key_scale_offset(j, b, hd), &s, 2);
    }
  std::vector<uint8_t> qrow(static_cast<size_t>(vr));
  std::vector<uint16_t> vs(static_cast<size_t>(hd / 32 * len));
  for (int64_t j = 0; j < len; ++j) {
    for (auto& v : row) v = d(rng);
    quantize_kv_row_q8(row.data(), qrow.data(), hd);
    store_q8_value_row(qrow.data(), vb.data(), vs.data(), len, j, hd);
  }
  const int64_t part = state.range(2);
  // Values alone weigh softmax-like weights in (0, 1] (the integer kernel skips a run of zeros).
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  if (part == 2)
    for (auto& s : scores) s = std::exp(-8.0f * unit(rng));
  for (auto _ : state) {
    if (part != 2) {
      for (int64_t h = 0; h < G; ++h)
        k->prepare_act(ActFormat::Q8_32, q.data() + h * hd, qa.data() + h * qa_stride, hd);
      k->attn_scores_q8(qa.data(), qa_stride, G, kb.data(), len, hd, 0.125f, scores.data(), len);
    }
    std::fill(out.begin(), out.end(), 0.0f);
    if (part != 1) k->attn_values_q8(scores.data(), G, len, vb.data(), vs.data(), len, len, hd, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * (part == 0 ? 2 : 1) * G * len * hd);
}
BENCHMARK_CAPTURE(BM_AttentionQ8, avx512, 2)->ArgsProduct({{4, 64}, {256, 4096}, {0, 1, 2}});
BENCHMARK_CAPTURE(BM_AttentionQ8, avx2, 1)->ArgsProduct({{4, 64}, {256, 4096}, {0, 1, 2}});

// The attention softmax over one chunk's row of scores: exp_sum (base e) against exp2_sum (base 2,
// the attention's since stop 44), 256 scores as one row of a chunk, in L1.
void BM_ExpSum(benchmark::State& state, int level, bool two) {
  const KernelTable* k = level == 2 ? avx512_kernels() : level == 1 ? avx2_kernels() : &scalar_kernels();
  if (k == nullptr) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-20.0f, 0.0f);
  std::vector<float> x(256), y(256);
  for (auto& v : x) v = u(rng);
  for (auto _ : state) {
    benchmark::DoNotOptimize((two ? k->exp2_sum : k->exp_sum)(x.data(), y.data(), 256, 0.0f));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 256);
}
BENCHMARK_CAPTURE(BM_ExpSum, e_avx512, 2, false);
BENCHMARK_CAPTURE(BM_ExpSum, two_avx512, 2, true);
BENCHMARK_CAPTURE(BM_ExpSum, e_avx2, 1, false);
BENCHMARK_CAPTURE(BM_ExpSum, two_avx2, 1, true);

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
CODA_BENCH_TYPE(Q3_K)
CODA_BENCH_TYPE(Q2_K)
CODA_BENCH_TYPE(IQ4_XS)
CODA_BENCH_TYPE(IQ4_NL)
CODA_BENCH_TYPE(Q4_1)
CODA_BENCH_TYPE(Q5_0)
CODA_BENCH_TYPE(Q5_1)

}  // namespace
}  // namespace coda

BENCHMARK_MAIN();
