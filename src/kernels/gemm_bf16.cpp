// The packed BF16 GEMM with AVX512_BF16's vdpbf16ps (Zen 4, Zen 5, Sapphire Rapids; not Ice Lake or
// Zen 3). Each instruction multiplies 16 rows' pairs of adjacent columns with one token's pair of
// activations and adds both products to 16 float lanes: 32 multiply-adds where the float tile in
// gemm_avx512.cpp does 16 and first widens every weight. It takes activations rounded to bfloat16
// (ActFormat::BF16, once per matrix: rounding them here per group cost a third of the time), as
// llama.cpp does for BF16 weights; bf16 x bf16 products are exact in float.
//
// The packed layout stays repack.h's (16 rows' values per column, column after column): one vpermw
// per pair of columns interleaves them into (column c, column c + 1) per row.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/fp16.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"
#include "kernels/unroll.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#endif

namespace coda {
namespace {

constexpr int kTokens = 8;                 // tokens per tile: 2 groups x 8 = 16 accumulators
constexpr int64_t kDecodePrefetch = 2048;  // bytes ahead of the weight stream at one token

// NG groups (1 or 2; the second `cols` columns of 32 bytes after the first) x T tokens.
template <int NG, int T>
void tile(const uint8_t* g, int64_t cols, const uint16_t* a, int64_t a_stride, float* y, int64_t y_stride) {
  const int64_t second = cols * 2 * kPackRows;
  // Word i of the result: row i / 2 of column c + (i & 1), i.e. word 16 (i & 1) + i / 2 of the
  // 64 bytes that hold columns c and c + 1.
  alignas(64) static const uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i perm = _mm512_load_si512(kInterleave);
  __m512 acc[NG][T];
  CODA_UNROLL
  for (int h = 0; h < NG; ++h) CODA_UNROLL
  for (int t = 0; t < T; ++t) acc[h][t] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 2 <= cols; c += 2, g += 4 * kPackRows) {
    if constexpr (T == 1) {  // decode streams the weights
      CODA_UNROLL
      for (int h = 0; h < NG; ++h)
        _mm_prefetch(reinterpret_cast<const char*>(g + h * second + kDecodePrefetch), _MM_HINT_T0);
    }
    __m512bh w[NG];
    CODA_UNROLL
    for (int h = 0; h < NG; ++h)
      w[h] = reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(perm, _mm512_loadu_si512(g + h * second)));
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      int32_t pair;
      std::memcpy(&pair, a + t * a_stride + c, 4);
      const auto x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      CODA_UNROLL
      for (int h = 0; h < NG; ++h) acc[h][t] = _mm512_dpbf16_ps(acc[h][t], w[h], x);
    }
  }
  if (c < cols) {  // an odd last column: its 32 bytes, paired with zeros
    __m512bh w[NG];
    CODA_UNROLL
    for (int h = 0; h < NG; ++h)
      w[h] =
          reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(perm, _mm512_maskz_loadu_epi16(0xFFFF, g + h * second)));
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      int32_t pair;
      std::memcpy(&pair, a + t * a_stride + c, 4);  // the row's padding zero is the partner
      const auto x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      CODA_UNROLL
      for (int h = 0; h < NG; ++h) acc[h][t] = _mm512_dpbf16_ps(acc[h][t], w[h], x);
    }
  }
  CODA_UNROLL
  for (int t = 0; t < T; ++t) CODA_UNROLL
  for (int h = 0; h < NG; ++h) _mm512_storeu_ps(y + t * y_stride + h * kPackRows, acc[h][t]);
}

// `act`: rows of ActFormat::BF16 (prepare_act rounded them once for every group of the matrix).
template <int NG>
void run(const uint8_t* g, int64_t cols, const void* act, int64_t act_stride, int64_t n_tokens, float* y,
         int64_t y_stride) {
  using TileFn = void (*)(const uint8_t*, int64_t, const uint16_t*, int64_t, float*, int64_t);
  static constexpr TileFn kByCount[kTokens + 1] = {nullptr,     tile<NG, 1>, tile<NG, 2>, tile<NG, 3>, tile<NG, 4>,
                                                   tile<NG, 5>, tile<NG, 6>, tile<NG, 7>, tile<NG, 8>};
  const auto* a = static_cast<const uint16_t*>(act);
  const int64_t stride = act_stride / 2;
  for (int64_t b = 0; b < n_tokens; b += kTokens) {
    const int n = static_cast<int>(std::min<int64_t>(kTokens, n_tokens - b));
    kByCount[n](g, cols, a + b * stride, stride, y + b * y_stride, y_stride);
  }
}

// An F16 value as bfloat16 bits where it is one: its float's low 16 bits are zero. For the lanes
// the vector passes below leave aside (zeros, subnormals, the tail), so the exact scalar
// conversion is cheap enough.
bool half_lane_to_bf16(uint16_t h, uint16_t* out) {
  const uint32_t f = float_to_bits(fp16_to_float(h));
  if ((f & 0xffffu) != 0) return false;
  *out = static_cast<uint16_t>(f >> 16);
  return true;
}

bool half_to_bf16_exact(uint16_t* v, int64_t n) {
  const __m512i low3 = _mm512_set1_epi16(7), exp_mask = _mm512_set1_epi16(0x7c00);
  // Pass 1: every value must be one. A normal (or inf/NaN) half is one when its 3 low mantissa bits
  // are zero; so is a subnormal with them zero (at most 7 significant bits); a subnormal with one
  // set is looked at alone.
  int64_t i = 0;
  uint16_t scratch;
  for (; i + 32 <= n; i += 32) {
    const __m512i x = _mm512_loadu_si512(v + i);
    const __mmask32 low = _mm512_test_epi16_mask(x, low3);
    const __mmask32 sub = _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, exp_mask), _mm512_setzero_si512());
    if ((low & ~sub) != 0) return false;
    for (__mmask32 m = low & sub; m != 0; m &= m - 1)
      if (!half_lane_to_bf16(v[i + __builtin_ctz(m)], &scratch)) return false;
  }
  for (int64_t j = i; j < n; ++j)
    if (!half_lane_to_bf16(v[j], &scratch)) return false;
  // Pass 2: convert. Lanes with a zero exponent keep the scalar path.
  const __m512i sign = _mm512_set1_epi16(static_cast<int16_t>(0x8000)), mant = _mm512_set1_epi16(0x3ff);
  const __m512i bias = _mm512_set1_epi16(112 << 7), inf_exp = _mm512_set1_epi16(0x7f80);
  for (i = 0; i + 32 <= n; i += 32) {
    const __m512i x = _mm512_loadu_si512(v + i);
    const __m512i e = _mm512_and_si512(x, exp_mask);
    const __mmask32 sub = _mm512_cmpeq_epi16_mask(e, _mm512_setzero_si512());
    const __mmask32 inf = _mm512_cmpeq_epi16_mask(e, exp_mask);
    // (e >> 10) << 7 = e >> 3; plus 112 << 7 rebiases; inf/NaN take the all-ones exponent.
    __m512i be = _mm512_add_epi16(_mm512_srli_epi16(e, 3), bias);
    be = _mm512_mask_mov_epi16(be, inf, inf_exp);
    const __m512i y = _mm512_or_si512(_mm512_or_si512(_mm512_and_si512(x, sign), be),
                                      _mm512_srli_epi16(_mm512_and_si512(x, mant), 3));
    _mm512_mask_storeu_epi16(v + i, static_cast<__mmask32>(~sub), y);
    for (__mmask32 m = sub; m != 0; m &= m - 1) {
      uint16_t& lane = v[i + __builtin_ctz(m)];
      half_lane_to_bf16(lane, &lane);
    }
  }
  for (int64_t j = i; j < n; ++j) half_lane_to_bf16(v[j], &v[j]);
  return true;
}

}  // namespace

void install_gemm_bf16(KernelTable& t) {
  t.gemm[static_cast<int>(DType::BF16)] = run<1>;
  t.gemm2[static_cast<int>(DType::BF16)] = run<2>;
  t.gemm_bf16_rounds_activations = true;
  t.half_to_bf16_exact = half_to_bf16_exact;
}

}  // namespace coda

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
