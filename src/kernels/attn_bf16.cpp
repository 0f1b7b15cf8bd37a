// vdpbf16ps for the weighted sum of a BF16 value cache: each instruction multiplies the weights of
// two positions with their two interleaved value rows (kernels.h, bf16_value_index) and adds both
// products to 16 float lanes, 32 multiply-adds where a float FMA does 16. Built for AVX512_BF16
// and called only where the CPU has it (attn_bf16.h).
#include "kernels/attn_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/fp16.h"
#include "kernels/kernels.h"
#include "kernels/unroll.h"

namespace coda {

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#endif

namespace {

constexpr int64_t kPositions = 256;  // weights rounded per head and run of positions, on the stack
constexpr int kHeads = 6;            // 6 heads x 4 column vectors = 24 accumulators

// NH heads x 64 columns over `pairs` pairs of positions: per pair, 4 loads of interleaved values
// and NH broadcasts of a pair of weights feed 4 x NH vdpbf16ps.
template <int NH>
void values_64(const uint16_t* pb, int64_t pb_stride, const uint16_t* v, int64_t pairs, int64_t hd, float* out) {
  __m512 acc[NH][4];
  CODA_UNROLL
  for (int h = 0; h < NH; ++h)
    for (int x = 0; x < 4; ++x) acc[h][x] = _mm512_loadu_ps(out + h * hd + 16 * x);
  for (int64_t t = 0; t < pairs; ++t) {
    const uint16_t* vt = v + t * 2 * hd;
    __m512bh vx[4];
    CODA_UNROLL
    for (int x = 0; x < 4; ++x) vx[x] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(vt + 32 * x));
    CODA_UNROLL
    for (int h = 0; h < NH; ++h) {
      int32_t w2;
      std::memcpy(&w2, pb + h * pb_stride + 2 * t, 4);
      const auto w = reinterpret_cast<__m512bh>(_mm512_set1_epi32(w2));
      CODA_UNROLL
      for (int x = 0; x < 4; ++x) acc[h][x] = _mm512_dpbf16_ps(acc[h][x], vx[x], w);
    }
  }
  CODA_UNROLL
  for (int h = 0; h < NH; ++h)
    for (int x = 0; x < 4; ++x) _mm512_storeu_ps(out + h * hd + 16 * x, acc[h][x]);
}

void values_tile(int nh, const uint16_t* pb, int64_t pb_stride, const uint16_t* v, int64_t pairs, int64_t hd,
                 float* out) {
  for (int64_t c = 0; c < hd; c += 64) {
    const uint16_t* vc = v + 2 * c;
    float* oc = out + c;
    switch (nh) {
      case 6: values_64<6>(pb, pb_stride, vc, pairs, hd, oc); break;
      case 5: values_64<5>(pb, pb_stride, vc, pairs, hd, oc); break;
      case 4: values_64<4>(pb, pb_stride, vc, pairs, hd, oc); break;
      case 3: values_64<3>(pb, pb_stride, vc, pairs, hd, oc); break;
      case 2: values_64<2>(pb, pb_stride, vc, pairs, hd, oc); break;
      default: values_64<1>(pb, pb_stride, vc, pairs, hd, oc); break;
    }
  }
}

}  // namespace

void attn_values_bf16_dpbf16(const float* p, int64_t G, int64_t s_stride, const uint16_t* v, int64_t len, int64_t hd,
                             float* out) {
  if (hd % 64 != 0) {  // no model of the family has such heads; the definition, lane by lane
    for (int64_t h = 0; h < G; ++h)
      for (int64_t j = 0; j < len; ++j) {
        const float w = bf16_to_float(float_to_bf16(p[h * s_stride + j]));
        for (int64_t i = 0; i < hd; ++i) out[h * hd + i] += w * bf16_to_float(v[bf16_value_index(j, i, hd)]);
      }
    return;
  }
  constexpr int64_t stride = kPositions + 2;
  alignas(64) uint16_t pb[kHeads * stride];
  for (int64_t j0 = 0; j0 < len; j0 += kPositions) {
    const int64_t n = std::min(kPositions, len - j0), pairs = (n + 1) / 2;
    for (int64_t h0 = 0; h0 < G; h0 += kHeads) {
      const int nh = static_cast<int>(std::min<int64_t>(kHeads, G - h0));
      for (int h = 0; h < nh; ++h) {
        const float* ph = p + (h0 + h) * s_stride + j0;
        uint16_t* row = pb + h * stride;
        for (int64_t j = 0; j < n; j += 16) {
          const auto m = static_cast<__mmask16>(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1u);
          const __m256bh r = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, ph + j));
          _mm256_mask_storeu_epi16(row + j, m, reinterpret_cast<__m256i>(r));
        }
        row[n] = 0;  // the weight of an odd run's unpaired partner
      }
      values_tile(nh, pb, stride, v + j0 * hd, pairs, hd, out + h0 * hd);
    }
  }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

}  // namespace coda
