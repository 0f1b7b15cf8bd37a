// GEMM over packed weights (repack.h) with 512-bit AVX-512 VNNI: one output row per 32-bit lane.
//
// A tile is 16 weight rows x T tokens. Each block of weights is loaded (and for 4-bit types
// unpacked) once per tile, then every token multiplies it with dpbusd against a broadcast of 4 of
// its activation bytes, taken straight from memory. The weights are the unsigned operand: Q8_0's
// are stored as q + 128 and Q4_0's and Q4_K's nibbles are unsigned already; the offset comes back
// through the per-block activation sums. Scales are applied per block with one convert and one
// FMA per token, for all 16 rows at once. Run only on CPUs with AVX-512 F/BW/VL/VNNI (dispatch.cpp).
// GCC 12's AVX-512 intrinsic headers start some conversions from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports inside the headers (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/blocks.h"
#include "kernels/gemm_prefetch.h"
#include "kernels/repack.h"
#include "kernels/unroll.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif

namespace coda {

namespace {

constexpr int kTileTokens = 8;         // 16 was 3-10% slower on Zen 4 (register pressure)
constexpr int kQ8PairTileTokens = 6;   // two groups x 6 tokens: 12 int and 12 float accumulators
constexpr int kQ40PairTileTokens = 4;  // Q4_0 unpacks nibbles too: 6 tokens ran 20% slower than 4
constexpr int kPairTileTokens = 4;     // two groups x 4 tokens: 8 int and 16 float accumulators
constexpr int kIQ4XSPairTileTokens = 4;  // as kPairTileTokens: 5 and 6 ran no faster on Zen 5

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __m512i load512(const uint8_t* p) {
  return _mm512_loadu_si512(p);
}

// Decode (one token) reads each weight byte once and does little arithmetic with it, so it is bound
// by how fast the weights stream in. Prefetching a fixed distance ahead in each group's stream keeps
// more lines in flight than the hardware prefetchers alone do. Prefill tiles reuse every line for
// several tokens; with a short batch they fetch the next unit instead (gemm_prefetch.h). Past the
// end of a matrix the hints touch nothing (a prefetch never faults). The hints fill L2, not L1
// (prefetcht1): a line asked for this far ahead would wait in L1's few fill buffers and evict lines
// still in use. On Zen 4 (2 threads, 1B models, docs/performance.md) L2 at 4 KiB against L1 at 2 KiB
// decoded Q4_K at 38-43 against 33-36 tokens/s, Q6_K at 27-37 against 19, Q4_0 at 42-50 against 36-42.
constexpr int64_t kDecodePrefetchBytes = 4096;

template <int64_t kBytes>
inline void prefetch_span(const uint8_t* p) {
  CODA_UNROLL
  for (int64_t o = 0; o < kBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T1);
}

// -offset x sum in every lane: the start of a block's integer sum, taking back the weights' offset
// (unsigned weights are signed ones + offset). Wrapping arithmetic: non-finite activations quantize
// to extreme sums (garbage in, no UB).
inline __m512i offset_start(int32_t offset, int32_t sum) {
  return _mm512_set1_epi32(static_cast<int32_t>(0u - static_cast<uint32_t>(offset) * static_cast<uint32_t>(sum)));
}

// Q8_0 (kQ4 false) and Q4_0 (kQ4 true): blocks of 32 values, activations as ActBlockQ8 rows (one
// pointer per token reaches quants, scale and sum: 8 tokens fit in the general registers).
// kBits 5 is Q5_0: Q4_0's nibbles with the fifth bits of 4 values per row in each byte of one more
// chunk (bit p: value 4p + i, bit 4 + p: value 16 + 4p + i, for byte i; repack.h), shifted to bit 4.
template <int T, int kBits>
void tile_q8(const uint8_t* g, int64_t cols, const uint8_t* act, int64_t act_stride, float* y, int64_t y_stride) {
  constexpr bool kQ4 = kBits != 8;
  const int64_t nb = cols / kQK;
  constexpr int64_t kBlockBytes = kBits == 8 ? 32 + 512 : kBits == 5 ? kQ50PackedBlockBytes : 32 + 256;
  constexpr int32_t kOffset = kBits == 8 ? 128 : kBits == 5 ? 16 : 8;  // taken back through the sums
  const ActBlockQ8* a[T];
  __m512 acc[T];
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const ActBlockQ8*>(act + t * act_stride);
    acc[t] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += kBlockBytes) {
    if constexpr (T > 1) prefetch_next_share<kBlockBytes>(g + nb * kBlockBytes);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    __m512i w[8];
    if constexpr (kQ4) {
      const __m512i h = kBits == 5 ? load512(g + kQ50PackedHighBits) : _mm512_setzero_si512();
      CODA_UNROLL
      for (int p = 0; p < 4; ++p) {
        const __m512i v = load512(g + 32 + 64 * p);
        w[p] = _mm512_and_si512(v, low4);                            // values 4p .. 4p + 3
        w[p + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);  // values 16 + 4p ..
        if constexpr (kBits == 5) {  // bit p (4 + p) of each high-bit byte to bit 4, ORed in
          const __m512i bit4 = _mm512_set1_epi8(0x10);
          w[p] = _mm512_ternarylogic_epi32(w[p], _mm512_slli_epi16(h, 4 - p), bit4, 0xF8);
          w[p + 4] = _mm512_ternarylogic_epi32(w[p + 4], p == 0 ? h : _mm512_srli_epi16(h, p), bit4, 0xF8);
        }
      }
    } else {
      CODA_UNROLL
      for (int c = 0; c < 8; ++c) w[c] = load512(g + 32 + 64 * c);
    }
    // Chunk-major, token-minor: the T accumulation chains interleave, so each vpdpbusd's latency
    // (5 cycles on Ice Lake) hides behind the other tokens' instead of stalling its own chain.
    __m512i s[T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) s[t] = offset_start(kOffset, a[t][b].sum);
    CODA_UNROLL
    for (int c = 0; c < 8; ++c) {
      CODA_UNROLL
      for (int t = 0; t < T; ++t)
        s[t] = _mm512_dpbusd_epi32(s[t], w[c], _mm512_set1_epi32(load_i32(a[t][b].q + 4 * c)));
    }
    CODA_UNROLL
    for (int t = 0; t < T; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(dw, _mm512_set1_ps(a[t][b].d)), acc[t]);
  }
  CODA_UNROLL
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Q8_0/Q4_0 over two adjacent groups (32 rows) and up to kQ8PairTileTokens (Q4_0: kQ40PairTileTokens) tokens: each
// activation broadcast feeds two vpdpbusd, one per group. On Ice Lake a vpdpbusd loop whose every operand comes from a
// memory broadcast runs at about 1.8 G/s, one with register operands at 6.4 G/s, so the broadcasts, not the
// multiply-adds, bound the single-group tile.
template <int T, bool kQ4>
void tile_q8_pair(const uint8_t* g, int64_t cols, const uint8_t* act, int64_t act_stride, float* y, int64_t y_stride) {
  const int64_t nb = cols / kQK;
  constexpr int64_t kBlockBytes = kQ4 ? 32 + 256 : 32 + 512;
  constexpr int32_t kOffset = kQ4 ? 8 : 128;
  const int64_t second = nb * kBlockBytes;  // the second group follows the whole first group
  const ActBlockQ8* a[T];
  __m512 acc[2][T];
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const ActBlockQ8*>(act + t * act_stride);
    acc[0][t] = acc[1][t] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += kBlockBytes) {
    if constexpr (T == 1) {
      prefetch_span<kBlockBytes>(g + kDecodePrefetchBytes);
      prefetch_span<kBlockBytes>(g + second + kDecodePrefetchBytes);
    } else {
      prefetch_next_share<kBlockBytes>(g + 2 * second);
      prefetch_next_share<kBlockBytes>(g + 3 * second);
    }
    __m512i s[2][T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) s[0][t] = s[1][t] = offset_start(kOffset, a[t][b].sum);
    CODA_UNROLL
    for (int c = 0; c < 8; ++c) {
      __m512i w[2];
      CODA_UNROLL
      for (int h = 0; h < 2; ++h) {
        const uint8_t* gh = g + h * second;
        if constexpr (kQ4) {
          const __m512i v = load512(gh + 32 + 64 * (c % 4));  // chunk c: low nibbles, c + 4: high
          w[h] = _mm512_and_si512(c < 4 ? v : _mm512_srli_epi16(v, 4), low4);
        } else {
          w[h] = load512(gh + 32 + 64 * c);
        }
      }
      CODA_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m512i x = _mm512_set1_epi32(load_i32(a[t][b].q + 4 * c));
        s[0][t] = _mm512_dpbusd_epi32(s[0][t], w[0], x);
        s[1][t] = _mm512_dpbusd_epi32(s[1][t], w[1], x);
      }
    }
    CODA_UNROLL
    for (int h = 0; h < 2; ++h) {
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + h * second)));
      CODA_UNROLL
      for (int t = 0; t < T; ++t)
        acc[h][t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[h][t]), _mm512_mul_ps(dw, _mm512_set1_ps(a[t][b].d)), acc[h][t]);
    }
  }
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    _mm512_storeu_ps(y + t * y_stride, acc[0][t]);
    _mm512_storeu_ps(y + t * y_stride + 16, acc[1][t]);
  }
}

// Q4_K's mins: per row, the sum over sub-blocks of m_j x (sum of the 32 activation quants of
// sub-block j), as int16 pairs (m_2p, m_2p+1) x (A_2p, A_2p+1) with dpwssd. The group's min pairs
// start at byte 192 (repack.h).
inline void load_q4k_mins(const uint8_t* g, __m512i mins[4]) {
  CODA_UNROLL
  for (int p = 0; p < 4; ++p)
    mins[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 192 + 32 * p)));
}

inline __m512i q4k_min_sums(const __m512i mins[4], const int16_t* bs) {
  __m512i mi = _mm512_setzero_si512();
  CODA_UNROLL
  for (int p = 0; p < 4; ++p) {
    const int32_t lo = bs[4 * p] + bs[4 * p + 1], hi = bs[4 * p + 2] + bs[4 * p + 3];
    const int32_t pair =
        static_cast<int32_t>((static_cast<uint32_t>(lo) & 0xFFFFu) | (static_cast<uint32_t>(hi) << 16));
    mi = _mm512_dpwssd_epi32(mi, mins[p], _mm512_set1_epi32(pair));
  }
  return mi;
}

// The weights of chunk p of sub-block j as unsigned bytes: the nibble (low for even j, high for odd)
// of quant chunk 8(j / 2) + p, and for Q5_K the fifth bit, bit j of high-bit chunk p, moved to bit 4
// (16-bit shifts by at most 4 left or 3 right keep every byte's bit 4 within its own byte).
template <bool kQ5>
inline __m512i kquant_weights(const uint8_t* g, int j, int p) {
  const __m512i v = load512(g + kKQuantPackedNibbles + (j / 2) * 512 + 64 * p);
  const __m512i lo = _mm512_and_si512(j % 2 ? _mm512_srli_epi16(v, 4) : v, _mm512_set1_epi8(0x0F));
  if constexpr (!kQ5) {
    return lo;
  } else {
    const __m512i hq = load512(g + kKQuantPackedHighBits + 64 * p);
    const __m512i hi = j < 4    ? _mm512_slli_epi16(hq, static_cast<unsigned>(4 - j))
                       : j == 4 ? hq
                                : _mm512_srli_epi16(hq, static_cast<unsigned>(j - 4));
    return _mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi8(0x10), 0xF8);  // lo | (hi & 0x10)
  }
}

// Q4_K and Q5_K: super-blocks of 256 with 8 sub-block scales and mins, activations as ActBlockK.
template <int T, bool kQ5>
void tile_q4_k(const uint8_t* g, int64_t cols, const uint8_t* act, int64_t act_stride, float* y, int64_t y_stride) {
  const int64_t nsb = cols / kQKK;
  constexpr int64_t kGroupBytes = kq4k_packed_block_bytes(kQ5);
  __m512 acc[T];
  CODA_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb, g += kGroupBytes) {
    if constexpr (T > 1) prefetch_next_share<kGroupBytes>(g + nsb * kGroupBytes);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32)));
    const ActBlockK* a[T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) a[t] = reinterpret_cast<const ActBlockK*>(act + t * act_stride) + sb;
    __m512 sum[T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_ps();
    CODA_UNROLL
    for (int j = 0; j < 8; ++j) {
      const __m512 scale = _mm512_mul_ps(
          d,
          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 64 + 16 * j)))));
      __m512i w[8];
      CODA_UNROLL
      for (int p = 0; p < 8; ++p) w[p] = kquant_weights<kQ5>(g, j, p);
      __m512i s[T];
      CODA_UNROLL
      for (int t = 0; t < T; ++t) s[t] = _mm512_setzero_si512();
      CODA_UNROLL
      for (int p = 0; p < 8; ++p) {
        CODA_UNROLL
        for (int t = 0; t < T; ++t)
          s[t] = _mm512_dpbusd_epi32(s[t], w[p], _mm512_set1_epi32(load_i32(a[t]->q + 32 * j + 4 * p)));
      }
      CODA_UNROLL
      for (int t = 0; t < T; ++t) sum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), scale, sum[t]);
    }
    __m512i mins[4];
    load_q4k_mins(g, mins);
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      const __m512i mi = q4k_min_sums(mins, a[t]->bsums);
      const __m512 blk = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mi), dmin, sum[t]);
      acc[t] = _mm512_fmadd_ps(blk, _mm512_set1_ps(a[t]->d), acc[t]);
    }
  }
  CODA_UNROLL
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Q6_K: super-blocks of 256 with 16 signed sub-block scales; activations as ActBlockK. The 6-bit
// quants are the unsigned operand (0..63); the -32 offset starts each sub-block's sum from
// -32 x (sum of its 16 activation quants). Value 32v + 4c + i of a row takes its low 4 bits from
// ql chunk 8u + c (u = 2(v / 4) + v % 2; high nibble when v % 4 >= 2) and its top 2 bits from
// bits 2(v % 4).. of qh chunk 8(v / 4) + c (repack.h).
template <int T>
void tile_q6_k(const uint8_t* g, int64_t cols, const uint8_t* act, int64_t act_stride, float* y, int64_t y_stride) {
  const int64_t nsb = cols / kQKK;
  constexpr int64_t kGroupBytes = 32 + 256 + 16 * (kQKK / 2 + kQKK / 4);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i top2 = _mm512_set1_epi8(0x30);
  __m512 acc[T];
  CODA_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb, g += kGroupBytes) {
    // One stream instead of a pair's two: twice the distance keeps as many bytes in flight (Zen 5,
    // 1B Q4_K_M decode: 2 KiB 50-52 tokens/s, 3.3-6.6 KiB 52-58).
    if constexpr (T > 1) prefetch_next_share<kGroupBytes>(g + nsb * kGroupBytes);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    const uint8_t* ql = g + 32 + 256;
    const uint8_t* qh = ql + 16 * kQKK / 2;
    const ActBlockK* a[T];
    __m512 sum[T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      a[t] = reinterpret_cast<const ActBlockK*>(act + t * act_stride) + sb;
      sum[t] = _mm512_setzero_ps();
    }
    CODA_UNROLL
    for (int j = 0; j < 16; ++j) {  // sub-block j: values 16j .. 16j + 15, chunks c = 4 (j % 2) ..
      if constexpr (T == 1) prefetch_block_step<kGroupBytes, 16>(g + 2 * kDecodePrefetchBytes, j);
      const int v = j / 2, e = v % 4;
      const __m512 scale = _mm512_mul_ps(
          d,
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * j)))));
      __m512i w[4];
      CODA_UNROLL
      for (int cc = 0; cc < 4; ++cc) {
        const int c = 4 * (j % 2) + cc;
        const __m512i lq = load512(ql + (8 * (2 * (v / 4) + v % 2) + c) * 64);
        const __m512i hq = load512(qh + (8 * (v / 4) + c) * 64);
        const __m512i lo = _mm512_and_si512(e >= 2 ? _mm512_srli_epi16(lq, 4) : lq, low4);
        const __m512i hi = e == 0   ? _mm512_slli_epi16(hq, 4)
                           : e == 1 ? _mm512_slli_epi16(hq, 2)
                           : e == 2 ? hq
                                    : _mm512_srli_epi16(hq, 2);
        w[cc] = _mm512_ternarylogic_epi32(lo, hi, top2, 0xF8);  // lo | (hi & 0x30)
      }
      __m512i s[T];
      CODA_UNROLL
      for (int t = 0; t < T; ++t) s[t] = _mm512_set1_epi32(-32 * static_cast<int32_t>(a[t]->bsums[j]));
      CODA_UNROLL
      for (int cc = 0; cc < 4; ++cc) {
        CODA_UNROLL
        for (int t = 0; t < T; ++t)
          s[t] = _mm512_dpbusd_epi32(s[t], w[cc], _mm512_set1_epi32(load_i32(a[t]->q + 16 * j + 4 * cc)));
      }
      CODA_UNROLL
      for (int t = 0; t < T; ++t) sum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), scale, sum[t]);
    }
    CODA_UNROLL
    for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(sum[t], _mm512_set1_ps(a[t]->d), acc[t]);
  }
  CODA_UNROLL
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Q3_K and Q2_K: super-blocks of 256 with 16 sub-blocks of 16, as Q6_K, and their 2-bit fields
// in the same order: value 16j + 4cc + i of a row (sub-block j = 8h + 2p + e, e = j % 2) is bits
// 2p..2p+1 of byte i of qs chunk 8h + 4e + cc; Q3_K's third bit is bit 4h + p of byte i of hmask
// chunk 4e + cc (repack.h). The unsigned quants (Q3_K: q + 4 in 0..7; Q2_K: 0..3) meet broadcasts
// of 4 activation quants in vpdpbusd. Q3_K starts each sub-block's sum at -4 x its activation sum;
// Q2_K subtracts dmin x sum over sub-blocks of m x activation sum, two sub-blocks per vpdpwssd.
template <int T, bool kQ3>
void tile_q2_q3_k(const uint8_t* g, int64_t cols, const uint8_t* act, int64_t act_stride, float* y, int64_t y_stride) {
  const int64_t nsb = cols / kQKK;
  constexpr int64_t kGroupBytes = kQ3 ? kQ3KPackedBlockBytes : kQ2KPackedBlockBytes;
  const __m512i two_bits = _mm512_set1_epi8(0x03);
  const __m512i bit2 = _mm512_set1_epi8(0x04);
  __m512 acc[T];
  CODA_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb, g += kGroupBytes) {
    if constexpr (T > 1) prefetch_next_share<kGroupBytes>(g + nsb * kGroupBytes);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    const uint8_t* qs = g + (kQ3 ? kQ3KPackedQuants : kQ2KPackedQuants);
    const ActBlockK* a[T];
    __m512 sum[T];
    __m512i mins[T];  // Q2_K: sum over sub-blocks of m x activation sum, per row
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      a[t] = reinterpret_cast<const ActBlockK*>(act + t * act_stride) + sb;
      sum[t] = _mm512_setzero_ps();
      mins[t] = _mm512_setzero_si512();
    }
    __m512i pair = _mm512_setzero_si512();  // Q2_K: the scale bytes of sub-blocks j - j % 2 and + 1
    CODA_UNROLL
    for (int j = 0; j < 16; ++j) {
      if constexpr (T == 1) prefetch_block_step<kGroupBytes, 16>(g + 2 * kDecodePrefetchBytes, j);
      const int h = j / 8, p = j % 8 / 2, e = j % 2;
      __m512 scale;
      if constexpr (kQ3) {
        scale = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * j)))));
      } else {
        if (e == 0) {
          pair =
              _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + kQ2KPackedScales + 16 * j)));
          const __m512i m = _mm512_srli_epi16(pair, 4);
          CODA_UNROLL
          for (int t = 0; t < T; ++t)
            mins[t] = _mm512_dpwssd_epi32(mins[t], m, _mm512_set1_epi32(load_i32(a[t]->bsums + j)));
        }
        const __m512i sc = _mm512_and_si512(e == 0 ? pair : _mm512_srli_epi32(pair, 16), _mm512_set1_epi32(0x0F));
        scale = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
      }
      __m512i w[4];
      CODA_UNROLL
      for (int cc = 0; cc < 4; ++cc) {
        const __m512i q = load512(qs + (8 * h + 4 * e + cc) * 64);
        const __m512i lo = p == 0 ? q : _mm512_srli_epi16(q, 2 * p);
        if constexpr (kQ3) {
          const __m512i hm = load512(g + kQ3KPackedHighBits + (4 * e + cc) * 64);
          const int b = 4 * h + p;  // to bit 2; the 16-bit shifts spill only into bits the mask clears
          const __m512i hi =
              _mm512_and_si512(b >= 2 ? _mm512_srli_epi16(hm, b - 2) : _mm512_slli_epi16(hm, 2 - b), bit2);
          w[cc] = _mm512_ternarylogic_epi32(lo, hi, two_bits, 0xEC);  // (lo & 3) | hi
        } else {
          w[cc] = _mm512_and_si512(lo, two_bits);
        }
      }
      __m512i s[T];
      CODA_UNROLL
      for (int t = 0; t < T; ++t)
        s[t] = kQ3 ? _mm512_set1_epi32(-4 * static_cast<int32_t>(a[t]->bsums[j])) : _mm512_setzero_si512();
      CODA_UNROLL
      for (int cc = 0; cc < 4; ++cc) {
        CODA_UNROLL
        for (int t = 0; t < T; ++t)
          s[t] = _mm512_dpbusd_epi32(s[t], w[cc], _mm512_set1_epi32(load_i32(a[t]->q + 16 * j + 4 * cc)));
      }
      CODA_UNROLL
      for (int t = 0; t < T; ++t) sum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), scale, sum[t]);
    }
    const __m512 dmin =
        kQ3 ? _mm512_setzero_ps() : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32)));
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      if constexpr (!kQ3) sum[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins[t]), dmin, sum[t]);
      acc[t] = _mm512_fmadd_ps(sum[t], _mm512_set1_ps(a[t]->d), acc[t]);
    }
  }
  CODA_UNROLL
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// IQ4_XS: 8 sub-blocks of 32 per super-block. One pshufb per nibble half turns 64 bytes of
// indices into the levels plus 128 (unsigned, 1..241: the vpdpbusd operand); each sub-block's sum
// starts at -128 x its activation sum. Value 32s + 4p + i of a row is the low nibble of byte i of
// chunk 4s + p, value 32s + 16 + 4p + i its high nibble (repack.h).
// NG groups of 16 rows (the second follows the whole first, as for Q4_K's pair tile): with two,
// each activation broadcast feeds two vpdpbusd. Up to kIQ4XSPairTileTokens tokens with two
// (AMD Zen 5, 2 threads, 1B IQ4_XS pp512: 334-337 tokens/s with one group x 8 tokens, 397-401
// with two x 4; docs/performance.md, stop 48).
template <int NG, int T>
void tile_iq4_xs(const uint8_t* g, int64_t cols, const uint8_t* act, int64_t act_stride, float* y, int64_t y_stride) {
  const int64_t nsb = cols / kQKK;
  const int64_t second = nsb * kIQ4XSPackedBlockBytes;
  alignas(16) uint8_t levels[16];
  for (int k = 0; k < 16; ++k) levels[k] = static_cast<uint8_t>(kIq4Levels[k] + 128);
  const __m512i table = _mm512_maskz_broadcast_i32x4(0xFFFF, _mm_load_si128(reinterpret_cast<const __m128i*>(levels)));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[NG][T];
  CODA_UNROLL
  for (int h = 0; h < NG; ++h) {
    CODA_UNROLL
    for (int t = 0; t < T; ++t) acc[h][t] = _mm512_setzero_ps();
  }
  for (int64_t sb = 0; sb < nsb; ++sb, g += kIQ4XSPackedBlockBytes) {
    const ActBlockK* a[T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) a[t] = reinterpret_cast<const ActBlockK*>(act + t * act_stride) + sb;
    __m512 d[NG], sum[NG][T];
    CODA_UNROLL
    for (int h = 0; h < NG; ++h) {
      d[h] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + h * second)));
      CODA_UNROLL
      for (int t = 0; t < T; ++t) sum[h][t] = _mm512_setzero_ps();
    }
    CODA_UNROLL
    for (int s = 0; s < 8; ++s) {
      if constexpr (T == 1) {
        CODA_UNROLL
        for (int h = 0; h < NG; ++h)
          prefetch_block_step<kIQ4XSPackedBlockBytes, 8>(g + h * second + 2 * kDecodePrefetchBytes / NG, s);
      }
      __m512i acc_i[NG][T];
      CODA_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m512i start =
            _mm512_set1_epi32(-128 * (static_cast<int32_t>(a[t]->bsums[2 * s]) + a[t]->bsums[2 * s + 1]));
        CODA_UNROLL
        for (int h = 0; h < NG; ++h) acc_i[h][t] = start;
      }
      CODA_UNROLL
      for (int p = 0; p < 4; ++p) {
        __m512i lo[NG], hi[NG];
        CODA_UNROLL
        for (int h = 0; h < NG; ++h) {
          const __m512i q = load512(g + h * second + kIQ4XSPackedQuants + (4 * s + p) * 64);
          lo[h] = _mm512_shuffle_epi8(table, _mm512_and_si512(q, low4));
          hi[h] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), low4));
        }
        CODA_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m512i xl = _mm512_set1_epi32(load_i32(a[t]->q + 32 * s + 4 * p));
          const __m512i xh = _mm512_set1_epi32(load_i32(a[t]->q + 32 * s + 16 + 4 * p));
          CODA_UNROLL
          for (int h = 0; h < NG; ++h) {
            acc_i[h][t] = _mm512_dpbusd_epi32(acc_i[h][t], lo[h], xl);
            acc_i[h][t] = _mm512_dpbusd_epi32(acc_i[h][t], hi[h], xh);
          }
        }
      }
      CODA_UNROLL
      for (int h = 0; h < NG; ++h) {
        const __m512 scale = _mm512_mul_ps(d[h], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                                     reinterpret_cast<const __m128i*>(g + h * second + 32 + 16 * s)))));
        CODA_UNROLL
        for (int t = 0; t < T; ++t) sum[h][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc_i[h][t]), scale, sum[h][t]);
      }
    }
    CODA_UNROLL
    for (int h = 0; h < NG; ++h) {
      CODA_UNROLL
      for (int t = 0; t < T; ++t) acc[h][t] = _mm512_fmadd_ps(sum[h][t], _mm512_set1_ps(a[t]->d), acc[h][t]);
    }
  }
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    CODA_UNROLL
    for (int h = 0; h < NG; ++h) _mm512_storeu_ps(y + t * y_stride + 16 * h, acc[h][t]);
  }
}

// Q4_K over two adjacent groups (32 rows) and up to 4 tokens: each activation broadcast feeds two
// vpdpbusd, one per group. With one group, every vpdpbusd needs its own broadcast, and on Ice Lake
// the broadcasts take the same two vector ports as the multiply-adds (a register-only vpdpbusd
// loop runs twice as fast as one that broadcasts from memory).
template <int T, bool kQ5>
void tile_q4_k_pair(const uint8_t* g, int64_t cols, const uint8_t* act, int64_t act_stride, float* y,
                    int64_t y_stride) {
  const int64_t nsb = cols / kQKK;
  constexpr int64_t kGroupBytes = kq4k_packed_block_bytes(kQ5);
  const int64_t second = nsb * kGroupBytes;  // the second group follows the whole first group
  __m512 acc[2][T];
  CODA_UNROLL
  for (int t = 0; t < T; ++t) acc[0][t] = acc[1][t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb, g += kGroupBytes) {
    const uint8_t* gg[2] = {g, g + second};
    if constexpr (T > 1) {
      prefetch_next_share<kGroupBytes>(gg[0] + 2 * second);
      prefetch_next_share<kGroupBytes>(gg[1] + 2 * second);
    }
    const ActBlockK* a[T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) a[t] = reinterpret_cast<const ActBlockK*>(act + t * act_stride) + sb;
    __m512 sum[2][T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) sum[0][t] = sum[1][t] = _mm512_setzero_ps();
    CODA_UNROLL
    for (int j = 0; j < 8; ++j) {
      if constexpr (T == 1) {
        prefetch_block_step<kGroupBytes, 8>(gg[0] + kDecodePrefetchBytes, j);
        prefetch_block_step<kGroupBytes, 8>(gg[1] + kDecodePrefetchBytes, j);
      }
      __m512i s[2][T];
      CODA_UNROLL
      for (int t = 0; t < T; ++t) s[0][t] = s[1][t] = _mm512_setzero_si512();
      CODA_UNROLL
      for (int p = 0; p < 8; ++p) {
        __m512i w[2];
        CODA_UNROLL
        for (int h = 0; h < 2; ++h) w[h] = kquant_weights<kQ5>(gg[h], j, p);
        CODA_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m512i x = _mm512_set1_epi32(load_i32(a[t]->q + 32 * j + 4 * p));
          s[0][t] = _mm512_dpbusd_epi32(s[0][t], w[0], x);
          s[1][t] = _mm512_dpbusd_epi32(s[1][t], w[1], x);
        }
      }
      CODA_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m512 scale = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gg[h]))),
                                           _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                               reinterpret_cast<const __m128i*>(gg[h] + 64 + 16 * j)))));
        CODA_UNROLL
        for (int t = 0; t < T; ++t) sum[h][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[h][t]), scale, sum[h][t]);
      }
    }
    CODA_UNROLL
    for (int h = 0; h < 2; ++h) {
      const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gg[h] + 32)));
      __m512i mins[4];
      load_q4k_mins(gg[h], mins);
      CODA_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m512i mi = q4k_min_sums(mins, a[t]->bsums);
        const __m512 blk = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mi), dmin, sum[h][t]);
        acc[h][t] = _mm512_fmadd_ps(blk, _mm512_set1_ps(a[t]->d), acc[h][t]);
      }
    }
  }
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    _mm512_storeu_ps(y + t * y_stride, acc[0][t]);
    _mm512_storeu_ps(y + t * y_stride + 16, acc[1][t]);
  }
}

// F16 and BF16 weights (repack.h: column by column, 16 rows' values in 32 bytes): one load widens
// a column of 16 rows to floats exactly (vcvtph2ps; BF16 is the high half of a float), and each
// token's activation, broadcast from memory, meets it in one multiply-add. Every lane sums its row
// in column order with one chain of multiply-adds, whatever the tile: a token's result does not
// depend on how many tokens share the tile (decode and prefill, batched or not, give the same bits).
template <bool kBf16>
inline __m512 widen_column(const uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (kBf16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
  } else {
    return _mm512_maskz_cvtph_ps(0xFFFF, h);
  }
}

// NG groups (1 or 2; the second follows the whole first) x T tokens: NG x T accumulators. Per
// column NG widened loads and T broadcasts feed NG x T multiply-adds, so two groups of 8 tokens keep
// the FMA units, not the loads, the limit.
template <int NG, int T, bool kBf16>
void tile_half(const uint8_t* g, int64_t cols, const uint8_t* act, int64_t act_stride, float* y, int64_t y_stride) {
  constexpr int64_t kColumnBytes = 2 * kPackRows;
  const int64_t second = cols * kColumnBytes;
  const float* a[T];
  __m512 acc[NG][T];
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const float*>(act + t * act_stride);
    CODA_UNROLL
    for (int h = 0; h < NG; ++h) acc[h][t] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < cols; ++c, g += kColumnBytes) {
    if constexpr (T == 1) {  // decode streams the weights: one prefetch per line and group
      if ((c & 1) == 0) {
        CODA_UNROLL
        for (int h = 0; h < NG; ++h) prefetch_span<64>(g + h * second + kDecodePrefetchBytes);
      }
    }
    __m512 w[NG];
    CODA_UNROLL
    for (int h = 0; h < NG; ++h) w[h] = widen_column<kBf16>(g + h * second);
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      const __m512 x = _mm512_set1_ps(a[t][c]);
      CODA_UNROLL
      for (int h = 0; h < NG; ++h) acc[h][t] = _mm512_fmadd_ps(w[h], x, acc[h][t]);
    }
  }
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    CODA_UNROLL
    for (int h = 0; h < NG; ++h) _mm512_storeu_ps(y + t * y_stride + h * kPackRows, acc[h][t]);
  }
}

using TileFn = void (*)(const uint8_t*, int64_t, const uint8_t*, int64_t, float*, int64_t);

template <template <int> class Tile, int kTile = kTileTokens>
void run_tiles(const uint8_t* g, int64_t cols, const void* act, int64_t act_stride, int64_t n_tokens, float* y,
               int64_t y_stride) {
  static_assert(kTile >= 1 && kTile <= 8);
  static constexpr TileFn kByCount[9] = {nullptr,      Tile<1>::run, Tile<2>::run, Tile<3>::run, Tile<4>::run,
                                         Tile<5>::run, Tile<6>::run, Tile<7>::run, Tile<8>::run};
  const auto* a = static_cast<const uint8_t*>(act);
  int64_t b = 0;
  plan_passes(n_tokens, (n_tokens + kTile - 1) / kTile);
  for (; b + kTile <= n_tokens; b += kTile, ++tl_pass_plan.pass)
    kByCount[kTile](g, cols, a + b * act_stride, act_stride, y + b * y_stride, y_stride);
  if (b < n_tokens) kByCount[n_tokens - b](g, cols, a + b * act_stride, act_stride, y + b * y_stride, y_stride);
}

template <int T>
struct Q8Tile {
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    tile_q8<T, 8>(g, c, a, s, y, ys);
  }
};
template <int T>
struct Q40Tile {
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    tile_q8<T, 4>(g, c, a, s, y, ys);
  }
};
template <int T>
struct Q8PairTile {
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    if constexpr (T <= kQ8PairTileTokens) tile_q8_pair<T, false>(g, c, a, s, y, ys);
  }
};
template <int T>
struct Q40PairTile {
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    if constexpr (T <= kQ40PairTileTokens) tile_q8_pair<T, true>(g, c, a, s, y, ys);
  }
};
// The Q4_K (kQ5 false) and Q5_K tiles of one group or two, by token count.
template <bool kQ5>
struct KQuantTiles {
  template <int T>
  struct Tile {
    static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
      tile_q4_k<T, kQ5>(g, c, a, s, y, ys);
    }
  };
  template <int T>
  struct PairTile {
    static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
      if constexpr (T <= kPairTileTokens) tile_q4_k_pair<T, kQ5>(g, c, a, s, y, ys);
    }
  };
};
template <int T>
struct Q6KTile {
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    tile_q6_k<T>(g, c, a, s, y, ys);
  }
};

// The Q3_K (kQ3 true) and Q2_K tiles, by token count.
template <bool kQ3>
struct TwoBitTiles {
  template <int T>
  struct Tile {
    static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
      tile_q2_q3_k<T, kQ3>(g, c, a, s, y, ys);
    }
  };
};

template <int T>
struct Q50Tile {
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    tile_q8<T, 5>(g, c, a, s, y, ys);
  }
};
// The IQ4_XS tiles of one group or two, by token count.
template <int NG>
struct IQ4XSTiles {
  template <int T>
  struct Tile {
    static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
      if constexpr (NG == 1 || T <= kIQ4XSPairTileTokens) tile_iq4_xs<NG, T>(g, c, a, s, y, ys);
    }
  };
};

// The F16 and BF16 tiles of one group or two, by token count (run_tiles' template argument).
template <int NG, bool kBf16>
struct HalfTiles {
  template <int T>
  struct Tile {
    static void run(const uint8_t* g, int64_t c, const uint8_t* a, int64_t s, float* y, int64_t ys) {
      tile_half<NG, T, kBf16>(g, c, a, s, y, ys);
    }
  };
};

}  // namespace

void install_gemm_avx512(KernelTable& t) {
  t.gemm[static_cast<int>(DType::Q8_0)] = run_tiles<Q8Tile>;
  t.gemm[static_cast<int>(DType::Q4_0)] = run_tiles<Q40Tile>;
  t.gemm[static_cast<int>(DType::Q4_K)] = run_tiles<KQuantTiles<false>::Tile>;
  t.gemm[static_cast<int>(DType::Q5_K)] = run_tiles<KQuantTiles<true>::Tile>;
  t.gemm[static_cast<int>(DType::Q6_K)] = run_tiles<Q6KTile>;
  t.gemm[static_cast<int>(DType::Q3_K)] = run_tiles<TwoBitTiles<true>::Tile>;
  t.gemm[static_cast<int>(DType::Q2_K)] = run_tiles<TwoBitTiles<false>::Tile>;
  t.gemm[static_cast<int>(DType::IQ4_XS)] = run_tiles<IQ4XSTiles<1>::Tile>;
  t.gemm2[static_cast<int>(DType::IQ4_XS)] = run_tiles<IQ4XSTiles<2>::Tile, kIQ4XSPairTileTokens>;
  t.gemm[static_cast<int>(DType::Q5_0)] = run_tiles<Q50Tile>;
  t.gemm2[static_cast<int>(DType::Q4_K)] = run_tiles<KQuantTiles<false>::PairTile, kPairTileTokens>;
  t.gemm2[static_cast<int>(DType::Q5_K)] = run_tiles<KQuantTiles<true>::PairTile, kPairTileTokens>;
  t.gemm2[static_cast<int>(DType::Q8_0)] = run_tiles<Q8PairTile, kQ8PairTileTokens>;
  t.gemm2[static_cast<int>(DType::Q4_0)] = run_tiles<Q40PairTile, kQ40PairTileTokens>;
  t.gemm[static_cast<int>(DType::F16)] = run_tiles<HalfTiles<1, false>::Tile>;
  t.gemm[static_cast<int>(DType::BF16)] = run_tiles<HalfTiles<1, true>::Tile>;
  t.gemm2[static_cast<int>(DType::F16)] = run_tiles<HalfTiles<2, false>::Tile>;
  t.gemm2[static_cast<int>(DType::BF16)] = run_tiles<HalfTiles<2, true>::Tile>;
  for (const DType d : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q3_K, DType::Q2_K,
                        DType::IQ4_XS, DType::Q5_0, DType::F16, DType::BF16})
    t.repack_by_default[static_cast<int>(d)] = true;
}

}  // namespace coda

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
