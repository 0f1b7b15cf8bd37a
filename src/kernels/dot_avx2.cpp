// AVX2 + FMA + F16C dot products. Every function here is compiled for those extensions through
// the target pragma below (not file-wide flags) so that no inline function shared with the rest of
// the program is ever emitted with AVX2 instructions; they run only after a CPU check.
//
// Quantized weights are multiplied with 8-bit activations (ActRowQ8, ActBlockK): integer products
// are summed exactly with maddubs/madd, then scaled in float per group of blocks. Signed x signed
// products use the sign trick: maddubs(|w|, sign(a, w)) == w * a, as maddubs wants unsigned x signed.
#include <immintrin.h>

#include <cstring>

#include "kernels/kernels.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace coda {

namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 32 unsigned bytes x 32 signed bytes -> 8 int32 lanes, lane j = sum of products of bytes 4j..4j+3.
inline __m256i mul_sum_u8_i8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

inline __m256i mul_sum_i8_i8(__m256i w, __m256i a) {
  return mul_sum_u8_i8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Sums each of 8 vectors of 8 int32 lanes: lane k of the result is the total of p[k].
inline __m256i hsum8x8(const __m256i* p) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]);
  const __m256i h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]);
  const __m256i h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i h0123 = _mm256_hadd_epi32(h01, h23);  // [0 1 2 3 | 0 1 2 3], low and high halves
  const __m256i h4567 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20), _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

// The half-float scales of 8 consecutive blocks `stride` bytes apart, as 8 floats. (Scalar loads
// into a vector: a hardware gather is slower here.)
inline __m256 fp16_scales8(const uint8_t* first, int stride) {
  uint16_t h[8];
  for (int k = 0; k < 8; ++k) std::memcpy(&h[k], first + k * stride, 2);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

// Q8_0 prefill: groups of 8 blocks, as Q4_0 below; the signs of the weights are applied once.
template <int NT>
void dot_q8_0_n(const void* w, const void* act, int64_t stride, int64_t n, float* out) {
  const auto* b = static_cast<const BlockQ8_0*>(w);
  const uint8_t* base = static_cast<const uint8_t*>(act);
  const int64_t nb = n / kQK;
  __m256 acc[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    const __m256 dw = fp16_scales8(reinterpret_cast<const uint8_t*>(b + i), sizeof(BlockQ8_0));
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const ActRowQ8 a(base + t * stride, n);
      __m256i p[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) p[k] = mul_sum_i8_i8(load32(b[i + k].qs), load32(a.q + (i + k) * kQK));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8x8(p)), _mm256_mul_ps(dw, _mm256_loadu_ps(a.d + i)), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    out[t] = hsum(acc[t]);
    const ActRowQ8 a(base + t * stride, n);
    for (int64_t j = i; j < nb; ++j)
      out[t] += hsum(_mm256_cvtepi32_ps(mul_sum_i8_i8(load32(b[j].qs), load32(a.q + j * kQK)))) * h2f(b[j].d) * a.d[j];
  }
}

// Q4_0 quants stay unsigned (0..15) for maddubs; sum((q - 8) * a) = sum(q * a) - 8 * sum(a).
inline __m256i unpack_q4_0_unsigned(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Q4_0 works on groups of 8 blocks: the 8 integer dot products are reduced together, the -8
// offset comes from the activation sums, and the 16 scales are applied with one multiply. NT
// tokens share the unpacked weights (prefill runs NT = 4).
template <int NT>
void dot_q4_0_n(const void* w, const void* act, int64_t stride, int64_t n, float* out) {
  const auto* b = static_cast<const BlockQ4_0*>(w);
  const uint8_t* base = static_cast<const uint8_t*>(act);
  const int64_t nb = n / kQK;
  __m256 acc[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i wq[8];
    for (int k = 0; k < 8; ++k) wq[k] = unpack_q4_0_unsigned(b[i + k].qs);
    const __m256 dw = fp16_scales8(reinterpret_cast<const uint8_t*>(b + i), sizeof(BlockQ4_0));
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const ActRowQ8 a(base + t * stride, n);
      __m256i p[8];
      for (int k = 0; k < 8; ++k) p[k] = mul_sum_u8_i8(wq[k], load32(a.q + (i + k) * kQK));
      const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.sum + i));
      const __m256i dots = _mm256_sub_epi32(hsum8x8(p), _mm256_slli_epi32(sums, 3));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_mul_ps(dw, _mm256_loadu_ps(a.d + i)), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    out[t] = hsum(acc[t]);
    const ActRowQ8 a(base + t * stride, n);
    for (int64_t j = i; j < nb; ++j) {
      const __m256i p = mul_sum_u8_i8(unpack_q4_0_unsigned(b[j].qs), load32(a.q + j * kQK));
      out[t] += (hsum(_mm256_cvtepi32_ps(p)) - 8.0f * static_cast<float>(a.sum[j])) * h2f(b[j].d) * a.d[j];
    }
  }
}

// Decode (one token) has its own Q8_0 and Q4_0 kernels: the templates above with NT = 1 measure
// 10-20% slower than these (bench/bench_kernels).
float dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(w);
  const ActRowQ8 a(act, n);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / kQK;
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    const __m256i p0 = mul_sum_i8_i8(load32(b[i].qs), load32(a.q + i * kQK));
    const __m256i p1 = mul_sum_i8_i8(load32(b[i + 1].qs), load32(a.q + (i + 1) * kQK));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(h2f(b[i].d) * a.d[i]), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(h2f(b[i + 1].d) * a.d[i + 1]), acc1);
  }
  for (; i < nb; ++i) {
    const __m256i p = mul_sum_i8_i8(load32(b[i].qs), load32(a.q + i * kQK));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(b[i].d) * a.d[i]), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

float dot_q4_0(const void* w, const void* act, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(w);
  const ActRowQ8 a(act, n);
  const int64_t nb = n / kQK;
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i p[8];
    for (int k = 0; k < 8; ++k) p[k] = mul_sum_u8_i8(unpack_q4_0_unsigned(b[i + k].qs), load32(a.q + (i + k) * kQK));
    const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.sum + i));
    const __m256i dots = _mm256_sub_epi32(hsum8x8(p), _mm256_slli_epi32(sums, 3));
    const __m256 scale = _mm256_mul_ps(fp16_scales8(reinterpret_cast<const uint8_t*>(b + i), sizeof(BlockQ4_0)),
                                       _mm256_loadu_ps(a.d + i));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), scale, acc);
  }
  float s = hsum(acc);
  for (; i < nb; ++i) {
    const __m256i p = mul_sum_u8_i8(unpack_q4_0_unsigned(b[i].qs), load32(a.q + i * kQK));
    s += (hsum(_mm256_cvtepi32_ps(p)) - 8.0f * static_cast<float>(a.sum[i])) * h2f(b[i].d) * a.d[i];
  }
  return s;
}

// Unpacks the 8 six-bit scales (sc) and mins (m) of a Q4_K/Q5_K super-block with 32-bit masks:
// scales j < 4 and mins j < 4 are the low 6 bits of bytes 0-3 and 4-7; for j >= 4 the low 4 bits
// come from bytes 8-11 and the high 2 bits from the top of bytes 0-3 (scales) and 4-7 (mins).
inline void unpack_scales(const uint8_t* s, uint8_t* sc, uint8_t* m) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3fu;
  const uint32_t m_lo = u[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  std::memcpy(sc, &sc_lo, 4);
  std::memcpy(sc + 4, &sc_hi, 4);
  std::memcpy(m, &m_lo, 4);
  std::memcpy(m + 4, &m_hi, 4);
}

// Word k of `v` (in both 128-bit halves) broadcast to all 16 words.
inline __m256i scale_k(__m256i v, int k) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>((2 * k) | ((2 * k + 1) << 8))));
}

// Sum over sub-blocks j of m[j] * (sum of the 32 activations of sub-block j), from the 16 bsums.
inline __m256i mins_dot(const uint8_t* m, const int16_t* bsums) {
  const __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)));
  const __m256i mm = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
  return _mm256_madd_epi16(mm, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums)));
}

// K-quants accumulate a whole super-block in int32 (integer sub-block scales applied with madd)
// and convert to float once per 256 weights. Each kernel is a template over NT, the number of
// activation rows (tokens) that share one pass over the weights: prefill runs NT = 4 so that the
// unpacking of the weights is paid once per 4 tokens; decode runs NT = 1.
template <int NT>
void dot_q4_k_n(const void* w, const void* act, int64_t stride, int64_t n, float* out) {
  const auto* b = static_cast<const BlockQ4_K*>(w);
  const ActBlockK* a[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const ActBlockK*>(static_cast<const uint8_t*>(act) + t * stride);
  const __m256i mask = _mm256_set1_epi8(0x0F);
  __m256 acc[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    alignas(16) uint8_t sc[8], m[8];
    unpack_scales(b[i].scales, sc, m);
    // The 8 scales as 16-bit words in both halves; scale_k() broadcasts word k with one shuffle.
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
    __m256i sumi[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load32(b[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(q, mask);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
      const __m256i s0 = scale_k(sc16, 2 * c), s1 = scale_k(sc16, 2 * c + 1);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(a[t][i].q + 64 * c)), s0);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(a[t][i].q + 64 * c + 32)), s1);
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p0, p1));
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * a[t][i].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * a[t][i].d), _mm256_cvtepi32_ps(mins_dot(m, a[t][i].bsums)), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

template <int NT>
void dot_q5_k_n(const void* w, const void* act, int64_t stride, int64_t n, float* out) {
  const auto* b = static_cast<const BlockQ5_K*>(w);
  const ActBlockK* a[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const ActBlockK*>(static_cast<const uint8_t*>(act) + t * stride);
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i bit = _mm256_set1_epi8(0x10);
  __m256 acc[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    alignas(16) uint8_t sc[8], m[8];
    unpack_scales(b[i].scales, sc, m);
    // The 8 scales as 16-bit words in both halves; scale_k() broadcasts word k with one shuffle.
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
    // qh bit 2c (2c+1) of byte l is the fifth bit of element l of sub-block 2c (2c+1). Shifting qh
    // left by 4 (3) puts bit 0 (1) at bit 4; the 16-bit shift crosses bytes, the mask undoes that.
    __m256i qh = load32(b[i].qh);
    __m256i sumi[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load32(b[i].qs + 32 * c);
      const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit);
      const __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit);
      qh = _mm256_srli_epi16(qh, 2);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, mask), h0);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), h1);
      const __m256i s0 = scale_k(sc16, 2 * c), s1 = scale_k(sc16, 2 * c + 1);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(a[t][i].q + 64 * c)), s0);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(a[t][i].q + 64 * c + 32)), s1);
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p0, p1));
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * a[t][i].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * a[t][i].d), _mm256_cvtepi32_ps(mins_dot(m, a[t][i].bsums)), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

// Q6_K: unsigned quants q in [0, 63] go through maddubs directly; the -32 offset is applied once
// per super-block as 32 * sum(scale_s * bsum_s).
template <int NT>
void dot_q6_k_n(const void* w, const void* act, int64_t stride, int64_t n, float* out) {
  const auto* b = static_cast<const BlockQ6_K*>(w);
  const ActBlockK* a[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const ActBlockK*>(static_cast<const uint8_t*>(act) + t * stride);
  const __m256i mask4 = _mm256_set1_epi8(0x0F);
  const __m256i mask2 = _mm256_set1_epi8(0x30);
  __m256 acc[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = h2f(b[i].d);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].scales)));
    // Scales 0..7 (first half of the super-block) and 8..15 (second half) copied to both lanes.
    const __m256i sc_half[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11)};
    __m256i sumi[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const __m256i offset = _mm256_madd_epi16(sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t][i].bsums)));
      sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
    }
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = load32(b[i].ql + 64 * half);
      const __m256i ql1 = load32(b[i].ql + 64 * half + 32);
      const __m256i qh = load32(b[i].qh + 32 * half);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, mask4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), mask2));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, mask4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), mask2));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), mask4), _mm256_and_si256(qh, mask2));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), mask4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), mask2));
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        // Words 0..7 of the maddubs result cover elements 0..15 (scale 2k), words 8..15 elements
        // 16..31 (scale 2k + 1): one shuffle puts word 2k in the low lane and 2k + 1 in the high.
        const __m256i scv = _mm256_shuffle_epi8(
            sc_half[half], _mm256_setr_epi8(4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1,
                                            4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1,
                                            4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2,
                                            4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3,
                                            4 * k + 2, 4 * k + 3));
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const __m256i p16 = _mm256_maddubs_epi16(q[k], load32(a[t][i].q + 128 * half + 32 * k));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p16, scv));
        }
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * a[t][i].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

template <DotFn F>
void four(const void* w, const void* act, int64_t stride, int64_t n, float* out) {
  for (int t = 0; t < 4; ++t) out[t] = F(w, static_cast<const uint8_t*>(act) + t * stride, n);
}

template <void (*F)(const void*, const void*, int64_t, int64_t, float*)>
float single(const void* w, const void* act, int64_t n) {
  float out;
  F(w, act, 0, n, &out);
  return out;
}

float dot_f32_avx2(const float* x, const float* y, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

float dot_f32_w(const void* w, const void* act, int64_t n) {
  return dot_f32_avx2(static_cast<const float*>(w), static_cast<const float*>(act), n);
}

float dot_f16(const void* w, const void* act, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(w);
  const auto* x = static_cast<const float*>(act);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))),
                         _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i + 8))),
                         _mm256_loadu_ps(x + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8)
    a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))),
                         _mm256_loadu_ps(x + i), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += h2f(h[i]) * x[i];
  return s;
}

inline __m256 load_bf16(const uint16_t* p) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

float dot_bf16(const void* w, const void* act, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(w);
  const auto* x = static_cast<const float*>(act);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(load_bf16(h + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(load_bf16(h + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16(h + i), _mm256_loadu_ps(x + i), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(h[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    s += f * x[i];
  }
  return s;
}

void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

uint64_t stream_read_avx2(const uint8_t* p, int64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
  __m256i a2 = _mm256_setzero_si256(), a3 = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm256_xor_si256(a0, load32(p + i));
    a1 = _mm256_xor_si256(a1, load32(p + i + 32));
    a2 = _mm256_xor_si256(a2, load32(p + i + 64));
    a3 = _mm256_xor_si256(a3, load32(p + i + 96));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3)));
  uint64_t acc = lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
  for (; i < n; ++i) acc ^= p[i];
  return acc;
}

KernelTable make_avx2() {
  KernelTable t{};
  t.name = "avx2";
  t.dot[static_cast<int>(DType::F32)] = dot_f32_w;
  t.dot[static_cast<int>(DType::F16)] = dot_f16;
  t.dot[static_cast<int>(DType::BF16)] = dot_bf16;
  t.dot[static_cast<int>(DType::Q8_0)] = dot_q8_0;
  t.dot[static_cast<int>(DType::Q4_0)] = dot_q4_0;
  t.dot[static_cast<int>(DType::Q4_K)] = single<dot_q4_k_n<1>>;
  t.dot[static_cast<int>(DType::Q5_K)] = single<dot_q5_k_n<1>>;
  t.dot[static_cast<int>(DType::Q6_K)] = single<dot_q6_k_n<1>>;
  t.dot4[static_cast<int>(DType::F32)] = four<dot_f32_w>;
  t.dot4[static_cast<int>(DType::F16)] = four<dot_f16>;
  t.dot4[static_cast<int>(DType::BF16)] = four<dot_bf16>;
  t.dot4[static_cast<int>(DType::Q8_0)] = dot_q8_0_n<4>;
  t.dot4[static_cast<int>(DType::Q4_0)] = dot_q4_0_n<4>;
  t.dot4[static_cast<int>(DType::Q4_K)] = dot_q4_k_n<4>;
  t.dot4[static_cast<int>(DType::Q5_K)] = dot_q5_k_n<4>;
  t.dot4[static_cast<int>(DType::Q6_K)] = dot_q6_k_n<4>;
  t.dot_f32 = dot_f32_avx2;
  t.axpy_f32 = axpy_avx2;
  t.stream_read = stream_read_avx2;
  return t;
}

}  // namespace

const KernelTable* avx2_kernels_unchecked() {
  static const KernelTable table = make_avx2();
  return &table;
}

}  // namespace coda

#pragma GCC pop_options
