// GEMM over packed weights (repack.h) with 256-bit AVX2: the prefill and decode kernels of CPUs
// without AVX-512 VNNI (Zen 3, Haswell to Alder Lake).
//
// The packed layout puts one row per 32-bit lane of a 64-byte chunk; a 256-bit register holds half
// a chunk (bytes 0..31 of each chunk are rows 0..7, 32..63 rows 8..15). A tile is both halves (16
// rows) x T tokens for Q8_0, Q4_0 and Q4_K, and one half (8 rows) x T tokens for Q6_K, whose
// unpacking needs more registers; a Q6_K group is then two passes. Each half-chunk of weights is
// loaded (and for 4-bit types unpacked) once per tile, then every token multiplies it with a
// broadcast of 4 of its activation bytes, as the AVX-512 tiles do with vpdpbusd.
//
// AVX2 has no vpdpbusd. vpmaddubsw multiplies unsigned by signed bytes and adds pairs into int16
// lanes, saturating; vpmaddwd then adds pairs of int16 into int32. The formats are arranged so that
// nothing saturates and vpmaddwd runs as rarely as possible:
//   - 4-bit weights (Q4_0, Q4_K: 0..15) times activations (|a| <= 128) give pairs of at most 3,840,
//     so the int16 lanes take 8 chunks (a whole 32-value block) before one vpmaddwd, which for Q4_K
//     multiplies by the sub-block scale at the same time.
//   - Q6_K's 6-bit weights (0..63) give pairs of at most 16,128: two chunks per vpmaddwd.
//   - Q8_0's weights are stored as q + 128, too wide for an unsigned operand whose pairs must stay
//     below 32,768; they are turned back into signed bytes, and the product is |w| x (a with w's
//     sign), pairs of at most 32,512, so every chunk has its vpmaddwd.
// The offsets of unsigned weights (Q4_0's 8, Q6_K's 32) and Q4_K's minimums come back through the
// per-block activation sums, once per block, as in the AVX-512 tiles; every integer sum is exact, so
// results differ from the scalar reference only in float rounding. Run only on CPUs with AVX2, FMA
// and F16C (dispatch.cpp).
#include <immintrin.h>

#include <cstring>

#include "kernels/blocks.h"
#include "kernels/gemm_prefetch.h"
#include "kernels/repack.h"
#include "kernels/unroll.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace coda {

namespace {

// Tokens per tile. 16 registers hold the int16 and int32 sums of T tokens (and for Q8_0/Q4_0 their
// float sums), the unpacked weights and the constants; 4 tokens fit for every type.
constexpr int kTileTokens = 4;

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline __m256i bcast4(const void* p) {  // 4 bytes in every 32-bit lane
  return _mm256_set1_epi32(load_i32(p));
}

// Adds v to the accumulator `acc` in program order. GCC reassociates chains of integer adds into
// trees; in these tiles it then computed all 32 products of a sub-block first and spilled them to
// the stack (Q4_K prefill at a third of its speed). The empty asm makes each sum a value the compiler
// must produce before the next add, so the chain stays a chain, in registers.
inline void accumulate16(__m256i& acc, __m256i v) {
  acc = _mm256_add_epi16(acc, v);
  __asm__("" : "+x"(acc));
}
inline void accumulate32(__m256i& acc, __m256i v) {
  acc = _mm256_add_epi32(acc, v);
  __asm__("" : "+x"(acc));
}

// The low and high nibbles of one chunk's H halves (32 bytes each, at p and p + 32) as bytes.
template <int H>
inline void load_nibbles(const uint8_t* p, __m256i (&lo)[H], __m256i (&hi)[H]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  CODA_UNROLL
  for (int i = 0; i < H; ++i) {
    const __m256i v = load256(p + 32 * i);
    lo[i] = _mm256_and_si256(v, low4);
    hi[i] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
  }
}

// 8 half-float scales (rows 8h .. 8h + 7 of a group's 16) as floats.
inline __m256 half_scales(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Adds the tile's 8-row results to y, or stores them for the first block: the K-quant tiles keep
// their float sums in y (in L1), so the registers hold the integer sums of T tokens instead.
inline void add_rows(float* y, int64_t y_stride, int i, int t, __m256 v, bool first) {
  float* p = y + t * y_stride + 8 * i;
  _mm256_storeu_ps(p, first ? v : _mm256_add_ps(_mm256_loadu_ps(p), v));
}

// 8 per-row byte scales, each repeated in both int16 halves of its row's 32-bit lane (the second
// operand of vpmaddwd, so one instruction adds a lane's two partial sums times the row's scale).
template <bool kSigned>
inline __m256i row_scales16(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i twice = _mm_unpacklo_epi8(b, b);
  return kSigned ? _mm256_cvtepi8_epi16(twice) : _mm256_cvtepu8_epi16(twice);
}

// The signed byte scales of a Q6_K or Q3_K packed super-block (at g + 32: one byte per sub-block
// and row) for rows 8h .. 8h + 7, sub-blocks 2k and 2k + 1 interleaved as int16 pairs per row lane,
// so that one vpmaddwd against (bsums[2k], bsums[2k + 1]) adds two terms of sum_j scale_j x bsum_j.
inline void scale_pairs(const uint8_t* g, int h, __m256i (&pairs)[8]) {
  CODA_UNROLL
  for (int k = 0; k < 8; ++k) {
    const __m128i s0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 32 + 16 * (2 * k) + 8 * h));
    const __m128i s1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 32 + 16 * (2 * k + 1) + 8 * h));
    pairs[k] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s1));
  }
}

// Per row, sum_j scale_j x bsum_j over the 16 sub-blocks (the weights' offset times each scale).
inline __m256i scaled_bsums(const __m256i (&pairs)[8], const int16_t* bsums) {
  __m256i off = _mm256_setzero_si256();
  CODA_UNROLL
  for (int k = 0; k < 8; ++k) off = _mm256_add_epi32(off, _mm256_madd_epi16(pairs[k], bcast4(bsums + 2 * k)));
  return off;
}

// Q2_K's scale bytes of sub-blocks 2(j / 2) and 2(j / 2) + 1 for rows 8h .. 8h + 7 (the pair
// layout of repack.h), widened to int16: per row lane, (byte of the even sub-block, byte of the
// odd one), each with the scale in its low nibble and m in its high one.
inline __m256i q2_k_pair(const uint8_t* g, int j, int h) {
  return _mm256_cvtepu8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kQ2KPackedScales + 32 * (j / 2) + 16 * h)));
}

// Sub-block j's scales (e = j % 2) from its pair, each repeated in both int16 halves of its row's lane.
inline __m256i q2_k_scales(__m256i pair, int e) {
  const __m256i own = e == 0 ? _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(pair, 0xA0), 0xA0)
                             : _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(pair, 0xF5), 0xF5);
  return _mm256_and_si256(own, _mm256_set1_epi16(0x0F));
}

// The tiles below cover H halves (1 or 2; rows 8h0 .. 8(h0 + H) - 1) x T tokens. Both halves at
// once read each 64-byte line of weights once per tile, in order, and let one activation broadcast
// serve two weight registers. One half per pass read every line twice: a Q4_K ffn_down group (76 KB
// at 8,192 columns) does not stay in L1, so every tile of 4 tokens fetched it twice from L2 (Zen 3,
// Q4_K_M pp512: 87-91 -> 101-117 tokens/s; Q4_0: 114-125 -> 132-150).
template <int H, int T>
inline void store_rows(float* y, int64_t y_stride, const __m256 (&acc)[H][T]) {
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    CODA_UNROLL
    for (int i = 0; i < H; ++i) _mm256_storeu_ps(y + t * y_stride + 8 * i, acc[i][t]);
  }
}

// Q8_0 (kBits 8), Q4_0 (4) and Q5_0 (5): blocks of 32 values, activations as ActBlockQ8. Q5_0's
// fifth bits (one more chunk, repack.h) are shifted to bit 4 and ORed in, and its values made signed
// (q - 16) for the sign trick: |q - 16| <= 16 keeps 8 byte-pair sums of a block within int16
// (8 x 2 x 16 x 127 = 32,512), where the unsigned 0..31 would overflow.
template <int H, int T, int kBits>
void tile_q8(const uint8_t* g, int64_t cols, int h0, const uint8_t* act, int64_t act_stride, float* y,
             int64_t y_stride) {
  constexpr bool kQ4 = kBits == 4;
  const int64_t nb = cols / kQK;
  constexpr int64_t kBlockBytes = kBits == 8 ? 32 + 512 : kBits == 5 ? kQ50PackedBlockBytes : 32 + 256;
  const ActBlockQ8* a[T];
  __m256 acc[H][T];
  // Both halves of more than one token: the integer sums of 2T pairs fill the registers, so the
  // float sums live in L1 (one load and store per block).
  constexpr bool kSumsInL1 = H == 2 && T > 1;
  alignas(32) float mem[kSumsInL1 ? H : 1][kSumsInL1 ? T : 1][8] = {};
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const ActBlockQ8*>(act + t * act_stride);
    CODA_UNROLL
    for (int i = 0; i < H; ++i) acc[i][t] = _mm256_setzero_ps();
  }
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b, g += kBlockBytes) {
    if constexpr (T > 1) prefetch_next_share<kBlockBytes>(g + nb * kBlockBytes);
    const uint8_t* q = g + 32 + 32 * h0;  // the first half's bytes of the block's first chunk
    __m256i s[H][T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      CODA_UNROLL
      for (int i = 0; i < H; ++i) s[i][t] = _mm256_setzero_si256();
    }
    if constexpr (kQ4) {
      CODA_UNROLL
      for (int p = 0; p < 4; ++p) {  // chunk p: low nibbles are values 4p.., high ones 16 + 4p..
        __m256i lo[H], hi[H];
        load_nibbles<H>(q + 64 * p, lo, hi);
        CODA_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m256i xl = bcast4(a[t][b].q + 4 * p), xh = bcast4(a[t][b].q + 16 + 4 * p);
          CODA_UNROLL
          for (int i = 0; i < H; ++i) {
            accumulate16(s[i][t], _mm256_maddubs_epi16(lo[i], xl));
            accumulate16(s[i][t], _mm256_maddubs_epi16(hi[i], xh));
          }
        }
      }
      CODA_UNROLL
      for (int t = 0; t < T; ++t) {  // sum((q - 8) a) = sum(q a) - 8 sum(a), wrapping on garbage input
        const __m256i off = _mm256_set1_epi32(static_cast<int32_t>(8u * static_cast<uint32_t>(a[t][b].sum)));
        CODA_UNROLL
        for (int i = 0; i < H; ++i) s[i][t] = _mm256_sub_epi32(_mm256_madd_epi16(s[i][t], ones16), off);
      }
    } else if constexpr (kBits == 5) {
      const __m256i bit4 = _mm256_set1_epi8(0x10), sixteen = _mm256_set1_epi8(16);
      __m256i high[H];
      CODA_UNROLL
      for (int i = 0; i < H; ++i) high[i] = load256(g + kQ50PackedHighBits + 32 * (h0 + i));
      CODA_UNROLL
      for (int p = 0; p < 4; ++p) {  // chunk p: low nibbles are values 4p.., high ones 16 + 4p..
        __m256i lo[H], hi[H];
        load_nibbles<H>(q + 64 * p, lo, hi);
        __m256i mag[2][H];
        CODA_UNROLL
        for (int i = 0; i < H; ++i) {
          const __m256i h = high[i];
          lo[i] = _mm256_sub_epi8(_mm256_or_si256(lo[i], _mm256_and_si256(_mm256_slli_epi16(h, 4 - p), bit4)), sixteen);
          hi[i] = _mm256_sub_epi8(_mm256_or_si256(hi[i], _mm256_and_si256(p == 0 ? h : _mm256_srli_epi16(h, p), bit4)),
                                  sixteen);
          mag[0][i] = _mm256_abs_epi8(lo[i]);
          mag[1][i] = _mm256_abs_epi8(hi[i]);
        }
        CODA_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m256i xl = bcast4(a[t][b].q + 4 * p), xh = bcast4(a[t][b].q + 16 + 4 * p);
          CODA_UNROLL
          for (int i = 0; i < H; ++i) {
            accumulate16(s[i][t], _mm256_maddubs_epi16(mag[0][i], _mm256_sign_epi8(xl, lo[i])));
            accumulate16(s[i][t], _mm256_maddubs_epi16(mag[1][i], _mm256_sign_epi8(xh, hi[i])));
          }
        }
      }
      CODA_UNROLL
      for (int t = 0; t < T; ++t) {
        CODA_UNROLL
        for (int i = 0; i < H; ++i) s[i][t] = _mm256_madd_epi16(s[i][t], ones16);
      }
    } else {
      CODA_UNROLL
      for (int c = 0; c < 8; ++c) {
        __m256i w[H], mag[H];
        CODA_UNROLL
        for (int i = 0; i < H; ++i) {
          w[i] = _mm256_xor_si256(load256(q + 64 * c + 32 * i), bias);  // the signed quants again
          mag[i] = _mm256_abs_epi8(w[i]);
        }
        CODA_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m256i x = bcast4(a[t][b].q + 4 * c);
          CODA_UNROLL
          for (int i = 0; i < H; ++i)
            accumulate32(s[i][t], _mm256_madd_epi16(_mm256_maddubs_epi16(mag[i], _mm256_sign_epi8(x, w[i])), ones16));
        }
      }
    }
    CODA_UNROLL
    for (int i = 0; i < H; ++i) {
      const __m256 dw = half_scales(g + 16 * (h0 + i));
      CODA_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(a[t][b].d));
        if constexpr (kSumsInL1) {
          _mm256_store_ps(mem[i][t], _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i][t]), scale, _mm256_load_ps(mem[i][t])));
        } else {
          acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i][t]), scale, acc[i][t]);
        }
      }
    }
  }
  if constexpr (kSumsInL1) {
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      CODA_UNROLL
      for (int i = 0; i < H; ++i) acc[i][t] = _mm256_load_ps(mem[i][t]);
    }
  }
  store_rows<H, T>(y, y_stride, acc);
}

// Q4_K and Q5_K (kQ5): super-blocks of 256 with 8 sub-block scales and mins; activations as
// ActBlockK. The loop over sub-blocks stays rolled (unrolled, the compiler hoisted work across
// sub-blocks and spilled the int16 sums); which nibble a sub-block takes is a shift by a count in a
// register. Q5_K's fifth bit (bit j of high-bit chunk p for sub-block j, repack.h) is shifted to bit
// 4 and ORed in; its byte pairs reach 2 x 31 x 127, so its int16 sums take 4 chunks, not 8, before
// vpmaddwd.
template <int H, int T, bool kQ5 = false>
void tile_q4_k(const uint8_t* g, int64_t cols, int h0, const uint8_t* act, int64_t act_stride, float* y,
               int64_t y_stride) {
  const int64_t nsb = cols / kQKK;
  constexpr int64_t kGroupBytes = kq4k_packed_block_bytes(kQ5);
  constexpr int kRun = kQ5 ? 4 : 8;  // chunks per int16 sum
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nsb; ++sb, g += kGroupBytes) {
    if constexpr (T > 1) prefetch_next_share<kGroupBytes>(g + nsb * kGroupBytes);
    const ActBlockK* a[T];
    __m256i s32[H][T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      a[t] = reinterpret_cast<const ActBlockK*>(act + t * act_stride) + sb;
      CODA_UNROLL
      for (int i = 0; i < H; ++i) s32[i][t] = _mm256_setzero_si256();
    }
    if constexpr (H * T <= 2) {
      // Decode: the two sub-blocks that share each byte (low and high nibbles) in one pass, so each
      // weight byte is loaded once and unpacked with immediate shifts; the register file has room
      // for the two sets of sums when the tile is this small. Q5_K's fifth bits of sub-blocks 2c and
      // 2c + 1 are bits 2c and 2c + 1 of the same high-bit byte.
      for (int c = 0; c < 4; ++c) {
        const uint8_t* q = g + kKQuantPackedNibbles + c * 512 + 32 * h0;
        const uint8_t* qh = g + kKQuantPackedHighBits + 32 * h0;
        const __m128i lo_up = _mm_cvtsi32_si128(c < 2 ? 4 - 2 * c : 0);
        const __m128i lo_down = _mm_cvtsi32_si128(c > 2 ? 2 * c - 4 : 0);
        const __m128i hi_up = _mm_cvtsi32_si128(c < 2 ? 3 - 2 * c : 0);
        const __m128i hi_down = _mm_cvtsi32_si128(c >= 2 ? 2 * c - 3 : 0);
        for (int p0 = 0; p0 < 8; p0 += kRun) {
          __m256i lo16[H][T], hi16[H][T];
          CODA_UNROLL
          for (int t = 0; t < T; ++t) {
            CODA_UNROLL
            for (int i = 0; i < H; ++i) lo16[i][t] = hi16[i][t] = _mm256_setzero_si256();
          }
          CODA_UNROLL
          for (int p = p0; p < p0 + kRun; ++p) {
            __m256i lo[H], hi[H];
            load_nibbles<H>(q + 64 * p, lo, hi);
            if constexpr (kQ5) {
              const __m256i bit4 = _mm256_set1_epi8(0x10);
              CODA_UNROLL
              for (int i = 0; i < H; ++i) {
                const __m256i hq = load256(qh + 64 * p + 32 * i);
                lo[i] = _mm256_or_si256(lo[i],
                                        _mm256_and_si256(_mm256_srl_epi16(_mm256_sll_epi16(hq, lo_up), lo_down), bit4));
                hi[i] = _mm256_or_si256(hi[i],
                                        _mm256_and_si256(_mm256_srl_epi16(_mm256_sll_epi16(hq, hi_up), hi_down), bit4));
              }
            }
            CODA_UNROLL
            for (int t = 0; t < T; ++t) {
              const __m256i xl = bcast4(a[t]->q + 64 * c + 4 * p), xh = bcast4(a[t]->q + 64 * c + 32 + 4 * p);
              CODA_UNROLL
              for (int i = 0; i < H; ++i) {
                accumulate16(lo16[i][t], _mm256_maddubs_epi16(lo[i], xl));
                accumulate16(hi16[i][t], _mm256_maddubs_epi16(hi[i], xh));
              }
            }
          }
          CODA_UNROLL
          for (int i = 0; i < H; ++i) {
            const __m256i sl = row_scales16<false>(g + 64 + 16 * (2 * c) + 8 * (h0 + i));
            const __m256i sh = row_scales16<false>(g + 64 + 16 * (2 * c + 1) + 8 * (h0 + i));
            CODA_UNROLL
            for (int t = 0; t < T; ++t)
              accumulate32(s32[i][t],
                           _mm256_add_epi32(_mm256_madd_epi16(lo16[i][t], sl), _mm256_madd_epi16(hi16[i][t], sh)));
          }
        }
      }
    } else {
      // Both halves x T tokens: the int16 sums of 2T row-token pairs fill the registers, so the
      // int32 sums live in L1 (one load and store per sub-block).
      constexpr bool kSumsInL1 = H == 2;
      alignas(32) int32_t mem[kSumsInL1 ? H : 1][kSumsInL1 ? T : 1][8] = {};
      for (int j = 0; j < 8; ++j) {
        const uint8_t* q = g + kKQuantPackedNibbles + (j / 2) * 512 + 32 * h0;
        const uint8_t* qh = g + kKQuantPackedHighBits + 32 * h0;
        const __m128i shift = _mm_cvtsi32_si128(4 * (j % 2));  // odd sub-blocks are the high nibbles
        // Bit j to bit 4: left by 4 - j or right by j - 4 (at most 4 and 3: no bit leaves its byte).
        const __m128i up = _mm_cvtsi32_si128(j < 4 ? 4 - j : 0), down = _mm_cvtsi32_si128(j > 4 ? j - 4 : 0);
        for (int p0 = 0; p0 < 8; p0 += kRun) {
          __m256i s16[H][T];
          CODA_UNROLL
          for (int t = 0; t < T; ++t) {
            CODA_UNROLL
            for (int i = 0; i < H; ++i) s16[i][t] = _mm256_setzero_si256();
          }
          CODA_UNROLL
          for (int p = p0; p < p0 + kRun; ++p) {
            __m256i w[H];
            CODA_UNROLL
            for (int i = 0; i < H; ++i) {
              w[i] = _mm256_and_si256(_mm256_srl_epi16(load256(q + 64 * p + 32 * i), shift), low4);
              if constexpr (kQ5) {
                const __m256i hi = _mm256_srl_epi16(_mm256_sll_epi16(load256(qh + 64 * p + 32 * i), up), down);
                w[i] = _mm256_or_si256(w[i], _mm256_and_si256(hi, _mm256_set1_epi8(0x10)));
              }
            }
            CODA_UNROLL
            for (int t = 0; t < T; ++t) {
              const __m256i x = bcast4(a[t]->q + 32 * j + 4 * p);
              CODA_UNROLL
              for (int i = 0; i < H; ++i) accumulate16(s16[i][t], _mm256_maddubs_epi16(w[i], x));
            }
          }
          CODA_UNROLL
          for (int i = 0; i < H; ++i) {
            const __m256i sc = row_scales16<false>(g + 64 + 16 * j + 8 * (h0 + i));
            CODA_UNROLL
            for (int t = 0; t < T; ++t) {
              if constexpr (kSumsInL1) {
                auto* m = reinterpret_cast<__m256i*>(mem[i][t]);
                _mm256_store_si256(m, _mm256_add_epi32(_mm256_load_si256(m), _mm256_madd_epi16(s16[i][t], sc)));
              } else {
                accumulate32(s32[i][t], _mm256_madd_epi16(s16[i][t], sc));
              }
            }
          }
        }
      }
      if constexpr (kSumsInL1) {
        CODA_UNROLL
        for (int t = 0; t < T; ++t) {
          CODA_UNROLL
          for (int i = 0; i < H; ++i) s32[i][t] = _mm256_load_si256(reinterpret_cast<const __m256i*>(mem[i][t]));
        }
      }
    }
    // The minimums: per row, sum over sub-blocks of m_j x (sum of sub-block j's 32 activation
    // quants), as int16 pairs (m_2p, m_2p+1) x (A_2p, A_2p+1).
    CODA_UNROLL
    for (int i = 0; i < H; ++i) {
      const int h = h0 + i;
      const __m256 d = half_scales(g + 16 * h);
      const __m256 dmin = half_scales(g + 32 + 16 * h);
      CODA_UNROLL
      for (int t = 0; t < T; ++t) {
        __m256i mi = _mm256_setzero_si256();
        CODA_UNROLL
        for (int p = 0; p < 4; ++p) {
          const __m256i mins =
              _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 192 + 32 * p + 16 * h)));
          const int16_t* bs = a[t]->bsums + 4 * p;
          const uint32_t lo = static_cast<uint16_t>(bs[0] + bs[1]), hi = static_cast<uint16_t>(bs[2] + bs[3]);
          mi = _mm256_add_epi32(mi, _mm256_madd_epi16(mins, _mm256_set1_epi32(static_cast<int32_t>(lo | (hi << 16)))));
        }
        const __m256 blk =
            _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mi), dmin, _mm256_mul_ps(_mm256_cvtepi32_ps(s32[i][t]), d));
        add_rows(y, y_stride, i, t, _mm256_mul_ps(blk, _mm256_set1_ps(a[t]->d)), sb == 0);
      }
    }
  }
}

// Q6_K: super-blocks of 256 with 16 signed sub-block scales; activations as ActBlockK. The 6-bit
// quants are the unsigned operand; the -32 offset comes back once per super-block as
// 32 x sum over sub-blocks of scale_j x (sum of sub-block j's 16 activation quants). The bit
// positions of value 32v + 4c + i are as in the AVX-512 tile (repack.h); the loop over sub-blocks
// stays rolled, with the shifts that pick a sub-block's bits as counts in registers.
template <int H, int T>
void tile_q6_k(const uint8_t* g, int64_t cols, int h0, const uint8_t* act, int64_t act_stride, float* y,
               int64_t y_stride) {
  const int64_t nsb = cols / kQKK;
  constexpr int64_t kGroupBytes = 32 + 256 + 16 * (kQKK / 2 + kQKK / 4);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i top2 = _mm256_set1_epi8(0x30);
  for (int64_t sb = 0; sb < nsb; ++sb, g += kGroupBytes) {
    if constexpr (T > 1) prefetch_next_share<kGroupBytes>(g + nsb * kGroupBytes);
    const uint8_t* ql = g + 32 + 256 + 32 * h0;
    const uint8_t* qh = ql + 16 * kQKK / 2;
    const ActBlockK* a[T];
    __m256i s32[H][T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      a[t] = reinterpret_cast<const ActBlockK*>(act + t * act_stride) + sb;
      CODA_UNROLL
      for (int i = 0; i < H; ++i) s32[i][t] = _mm256_setzero_si256();
    }
    for (int j = 0; j < 16; ++j) {  // sub-block j: values 16j .. 16j + 15, chunks 4 (j % 2) ..
      const int v = j / 2, e = v % 4;
      // Low 4 bits: the low (e < 2) or high nibble; top 2 bits: the field at bit 2e, moved to bit 4.
      const __m128i lo_right = _mm_cvtsi32_si128(e >= 2 ? 4 : 0);
      const __m128i hi_left = _mm_cvtsi32_si128(e <= 2 ? 4 - 2 * e : 0);
      const __m128i hi_right = _mm_cvtsi32_si128(e == 3 ? 2 : 0);
      const uint8_t* lrow = ql + 8 * (2 * (v / 4) + v % 2) * 64;
      const uint8_t* hrow = qh + 8 * (v / 4) * 64;
      __m256i sc[H];
      CODA_UNROLL
      for (int i = 0; i < H; ++i) sc[i] = row_scales16<true>(g + 32 + 16 * j + 8 * (h0 + i));
      CODA_UNROLL
      for (int half = 0; half < 2; ++half) {  // two chunks per vpmaddwd: pairs reach 16,128
        __m256i w[H][2];
        CODA_UNROLL
        for (int i = 0; i < H; ++i) {
          CODA_UNROLL
          for (int k = 0; k < 2; ++k) {
            const int64_t c = 4 * (j % 2) + 2 * half + k;
            const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(load256(lrow + c * 64 + 32 * i), lo_right), low4);
            const __m256i hi = _mm256_srl_epi16(_mm256_sll_epi16(load256(hrow + c * 64 + 32 * i), hi_left), hi_right);
            w[i][k] = _mm256_or_si256(lo, _mm256_and_si256(hi, top2));
          }
        }
        CODA_UNROLL
        for (int t = 0; t < T; ++t) {
          const int8_t* x = a[t]->q + 16 * j + 8 * half;
          const __m256i x0 = bcast4(x), x1 = bcast4(x + 4);
          CODA_UNROLL
          for (int i = 0; i < H; ++i) {
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w[i][0], x0), _mm256_maddubs_epi16(w[i][1], x1));
            accumulate32(s32[i][t], _mm256_madd_epi16(p, sc[i]));
          }
        }
      }
    }
    // The offset: per row, 32 x sum_j scale_j x bsum_j, with the scales of sub-blocks 2k, 2k + 1
    // interleaved as int16 pairs against the activation sums (bsums[2k], bsums[2k + 1]).
    CODA_UNROLL
    for (int i = 0; i < H; ++i) {
      const int h = h0 + i;
      __m256i pairs[8];
      scale_pairs(g, h, pairs);
      const __m256 d = half_scales(g + 16 * h);
      CODA_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m256i total = _mm256_sub_epi32(s32[i][t], _mm256_slli_epi32(scaled_bsums(pairs, a[t]->bsums), 5));
        add_rows(y, y_stride, i, t, _mm256_mul_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, _mm256_set1_ps(a[t]->d))),
                 sb == 0);
      }
    }
  }
}

// Q3_K and Q2_K (layout in repack.h, bit positions as in the AVX-512 tile): per sub-block j of 16
// values, four 32-byte chunks of 2-bit fields (and Q3_K's third bits from hmask) give the unsigned
// quants (Q3_K: q + 4 in 0..7; Q2_K: 0..3). Four chunks' vpmaddubsw pairs stay within int16 (4 x 2 x
// 7 x 127), so one vpmaddwd per sub-block applies the row's scale. Q3_K takes back its +4 as
// 4 x sum_j scale_j x bsum_j per row, as Q6_K takes back its 32; Q2_K subtracts dmin x sum_j
// m_j x bsum_j, two sub-blocks per vpmaddwd.
template <int H, int T, bool kQ3>
void tile_q2_q3_k(const uint8_t* g, int64_t cols, int h0, const uint8_t* act, int64_t act_stride, float* y,
                  int64_t y_stride) {
  const int64_t nsb = cols / kQKK;
  constexpr int64_t kGroupBytes = kQ3 ? kQ3KPackedBlockBytes : kQ2KPackedBlockBytes;
  const __m256i two_bits = _mm256_set1_epi8(0x03);
  const __m256i bit2 = _mm256_set1_epi8(0x04);
  for (int64_t sb = 0; sb < nsb; ++sb, g += kGroupBytes) {
    if constexpr (T > 1) prefetch_next_share<kGroupBytes>(g + nsb * kGroupBytes);
    const uint8_t* qs = g + (kQ3 ? kQ3KPackedQuants : kQ2KPackedQuants) + 32 * h0;
    const ActBlockK* a[T];
    __m256i s32[H][T];
    __m256i mins[H][T];  // Q2_K: sum_j m_j x bsum_j per row
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      a[t] = reinterpret_cast<const ActBlockK*>(act + t * act_stride) + sb;
      CODA_UNROLL
      for (int i = 0; i < H; ++i) s32[i][t] = mins[i][t] = _mm256_setzero_si256();
    }
    for (int j = 0; j < 16; ++j) {
      const int h = j / 8, p = j % 8 / 2, e = j % 2;
      const __m128i lo_right = _mm_cvtsi32_si128(2 * p);
      const int b = 4 * h + p;  // Q3_K: the third bit's position in hmask, moved to bit 2
      const __m128i hi_right = _mm_cvtsi32_si128(b >= 2 ? b - 2 : 0);
      const __m128i hi_left = _mm_cvtsi32_si128(b < 2 ? 2 - b : 0);
      __m256i sc[H];
      CODA_UNROLL
      for (int i = 0; i < H; ++i) {
        if constexpr (kQ3) {
          sc[i] = row_scales16<true>(g + 32 + 16 * j + 8 * (h0 + i));
        } else {
          const __m256i pair = q2_k_pair(g, j, h0 + i);
          sc[i] = q2_k_scales(pair, e);
          if (e == 0) {
            const __m256i m = _mm256_srli_epi16(pair, 4);
            CODA_UNROLL
            for (int t = 0; t < T; ++t)
              mins[i][t] = _mm256_add_epi32(mins[i][t], _mm256_madd_epi16(m, bcast4(a[t]->bsums + j)));
          }
        }
      }
      __m256i w[H][4];
      CODA_UNROLL
      for (int i = 0; i < H; ++i) {
        CODA_UNROLL
        for (int cc = 0; cc < 4; ++cc) {
          const __m256i q = load256(qs + (8 * h + 4 * e + cc) * 64 + 32 * i);
          const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(q, lo_right), two_bits);
          if constexpr (kQ3) {
            const __m256i hm = load256(g + kQ3KPackedHighBits + (4 * e + cc) * 64 + 32 * (h0 + i));
            const __m256i hi = _mm256_and_si256(_mm256_sll_epi16(_mm256_srl_epi16(hm, hi_right), hi_left), bit2);
            w[i][cc] = _mm256_or_si256(lo, hi);
          } else {
            w[i][cc] = lo;
          }
        }
      }
      CODA_UNROLL
      for (int t = 0; t < T; ++t) {
        const int8_t* x = a[t]->q + 16 * j;
        const __m256i x0 = bcast4(x), x1 = bcast4(x + 4), x2 = bcast4(x + 8), x3 = bcast4(x + 12);
        CODA_UNROLL
        for (int i = 0; i < H; ++i) {
          const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(w[i][0], x0), _mm256_maddubs_epi16(w[i][1], x1));
          const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(w[i][2], x2), _mm256_maddubs_epi16(w[i][3], x3));
          accumulate32(s32[i][t], _mm256_madd_epi16(_mm256_add_epi16(p01, p23), sc[i]));
        }
      }
    }
    CODA_UNROLL
    for (int i = 0; i < H; ++i) {
      const int hh = h0 + i;
      const __m256 d = half_scales(g + 16 * hh);
      if constexpr (kQ3) {
        // The +4: per row, 4 x sum_j scale_j x bsum_j.
        __m256i pairs[8];
        scale_pairs(g, hh, pairs);
        CODA_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m256i total = _mm256_sub_epi32(s32[i][t], _mm256_slli_epi32(scaled_bsums(pairs, a[t]->bsums), 2));
          add_rows(y, y_stride, i, t,
                   _mm256_mul_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, _mm256_set1_ps(a[t]->d))), sb == 0);
        }
      } else {
        const __m256 dmin = half_scales(g + 32 + 16 * hh);
        CODA_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m256 blk =
              _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins[i][t]), dmin, _mm256_mul_ps(_mm256_cvtepi32_ps(s32[i][t]), d));
          add_rows(y, y_stride, i, t, _mm256_mul_ps(blk, _mm256_set1_ps(a[t]->d)), sb == 0);
        }
      }
    }
  }
}

// Prefetch distance of the one-token Q6_K, Q3_K, Q2_K and IQ4_XS tiles (see tile_q6_k_one).
constexpr int64_t kOneTokenPrefetchBytes = 4096;

// IQ4_XS (layout in repack.h, value 32s + 4p + i of a row in the low nibble of byte i of chunk
// 4s + p, value 32s + 16 + 4p + i in its high nibble): one pshufb turns 32 bytes of indices into
// the signed levels. vpmaddubsw wants one unsigned operand, and the levels plus 128 (up to 241)
// would saturate its pair sums, so the sign moves to the activations (|level| x sign(x, level):
// pairs reach 2 x 127 x 127). Each product pair then takes the row's sub-block scale in one
// vpmaddwd; the one-token pass prefetches as Q3_K's (kOneTokenPrefetchBytes ahead, a line a chunk).
template <int H, int T>
void tile_iq4_xs(const uint8_t* g, int64_t cols, int h0, const uint8_t* act, int64_t act_stride, float* y,
                 int64_t y_stride) {
  const int64_t nsb = cols / kQKK;
  constexpr int64_t kGroupBytes = kIQ4XSPackedBlockBytes;
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels)));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nsb; ++sb, g += kGroupBytes) {
    if constexpr (T > 1) prefetch_next_share<kGroupBytes>(g + nsb * kGroupBytes);
    const uint8_t* qs = g + kIQ4XSPackedQuants + 32 * h0;
    const ActBlockK* a[T];
    __m256i s32[H][T];
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      a[t] = reinterpret_cast<const ActBlockK*>(act + t * act_stride) + sb;
      CODA_UNROLL
      for (int i = 0; i < H; ++i) s32[i][t] = _mm256_setzero_si256();
    }
    for (int sub = 0; sub < 8; ++sub) {
      __m256i sc[H];
      CODA_UNROLL
      for (int i = 0; i < H; ++i) sc[i] = row_scales16<true>(g + 32 + 16 * sub + 8 * (h0 + i));
      CODA_UNROLL
      for (int p = 0; p < 4; ++p) {
        if constexpr (T == 1) {
          const int line = 8 * sub + 2 * p;  // 32 chunk visits x 2 halves cover the group's 34 lines
          if (64 * line < kGroupBytes)
            _mm_prefetch(reinterpret_cast<const char*>(g + kOneTokenPrefetchBytes + 64 * line), _MM_HINT_T0);
          if (64 * (line + 1) < kGroupBytes)
            _mm_prefetch(reinterpret_cast<const char*>(g + kOneTokenPrefetchBytes + 64 * (line + 1)), _MM_HINT_T0);
        }
        __m256i w[H][2];
        CODA_UNROLL
        for (int i = 0; i < H; ++i) {
          const __m256i q = load256(qs + (4 * sub + p) * 64 + 32 * i);
          w[i][0] = _mm256_shuffle_epi8(table, _mm256_and_si256(q, low4));
          w[i][1] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
        }
        CODA_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m256i x[2] = {bcast4(a[t]->q + 32 * sub + 4 * p), bcast4(a[t]->q + 32 * sub + 16 + 4 * p)};
          CODA_UNROLL
          for (int i = 0; i < H; ++i) {
            CODA_UNROLL
            for (int k = 0; k < 2; ++k) {
              const __m256i pr = _mm256_maddubs_epi16(_mm256_abs_epi8(w[i][k]), _mm256_sign_epi8(x[k], w[i][k]));
              accumulate32(s32[i][t], _mm256_madd_epi16(pr, sc[i]));
            }
          }
        }
      }
    }
    CODA_UNROLL
    for (int i = 0; i < H; ++i) {
      const __m256 d = half_scales(g + 16 * (h0 + i));
      CODA_UNROLL
      for (int t = 0; t < T; ++t)
        add_rows(y, y_stride, i, t,
                 _mm256_mul_ps(_mm256_cvtepi32_ps(s32[i][t]), _mm256_mul_ps(d, _mm256_set1_ps(a[t]->d))), sb == 0);
    }
  }
}

// Q3_K and Q2_K for one token (decode), rows 8h0 .. 8(h0 + halves) - 1. A 2-bit chunk holds four
// sub-blocks' fields (shifts 0, 2, 4, 6), so it is loaded once and gives all four, with Q3_K's
// hmask chunk loaded once for them too; the tile above reloads both for every sub-block.
template <bool kQ3>
void tile_q2_q3_k_one(const uint8_t* g, int64_t cols, int h0, int halves, const uint8_t* act, float* y) {
  const int64_t nsb = cols / kQKK;
  constexpr int64_t kGroupBytes = kQ3 ? kQ3KPackedBlockBytes : kQ2KPackedBlockBytes;
  const __m256i two_bits = _mm256_set1_epi8(0x03);
  const __m256i bit2 = _mm256_set1_epi8(0x04);
  for (int64_t sb = 0; sb < nsb; ++sb, g += kGroupBytes) {
    const ActBlockK* a = reinterpret_cast<const ActBlockK*>(act) + sb;
    const uint8_t* qs = g + (kQ3 ? kQ3KPackedQuants : kQ2KPackedQuants);
    for (int i = 0; i < halves; ++i) {
      const int hh = h0 + i;
      __m256i s32 = _mm256_setzero_si256();
      __m256i mins = _mm256_setzero_si256();  // Q2_K: sum_j m_j x bsum_j per row
      CODA_UNROLL
      for (int h = 0; h < 2; ++h) {
        CODA_UNROLL
        for (int e = 0; e < 2; ++e) {
          __m256i p16[4];
          CODA_UNROLL
          for (int p = 0; p < 4; ++p) p16[p] = _mm256_setzero_si256();
          CODA_UNROLL
          for (int cc = 0; cc < 4; ++cc) {
            // The group kOneTokenPrefetchBytes ahead, one line per chunk (32 chunks cover a group's
            // 21 or 29 lines): without it the packed decode ran at 20-22 (Q3_K_M) and 24.5 tokens/s
            // (Q2_K); all lines at the top of the super-block gave 26 and 30.5, spread out 28 and 33
            // (Intel Xeon, CODA_KERNELS=avx2).
            const int line = 16 * i + 8 * h + 4 * e + cc;
            if (64 * line < kGroupBytes)
              _mm_prefetch(reinterpret_cast<const char*>(g + kOneTokenPrefetchBytes + 64 * line), _MM_HINT_T0);
            const __m256i q = load256(qs + (8 * h + 4 * e + cc) * 64 + 32 * hh);
            const __m256i hm = kQ3 ? load256(g + kQ3KPackedHighBits + (4 * e + cc) * 64 + 32 * hh) : q;
            CODA_UNROLL
            for (int p = 0; p < 4; ++p) {
              const int j = 8 * h + 2 * p + e;
              __m256i w = _mm256_and_si256(p == 0 ? q : _mm256_srli_epi16(q, 2 * p), two_bits);
              if constexpr (kQ3) {
                const int b = 4 * h + p;
                w = _mm256_or_si256(
                    w, _mm256_and_si256(b >= 2 ? _mm256_srli_epi16(hm, b - 2) : _mm256_slli_epi16(hm, 2 - b), bit2));
              }
              p16[p] = _mm256_add_epi16(p16[p], _mm256_maddubs_epi16(w, bcast4(a->q + 16 * j + 4 * cc)));
            }
          }
          CODA_UNROLL
          for (int p = 0; p < 4; ++p) {
            const int j = 8 * h + 2 * p + e;
            __m256i sc;
            if constexpr (kQ3) {
              sc = row_scales16<true>(g + 32 + 16 * j + 8 * hh);
            } else {
              const __m256i pair = q2_k_pair(g, j, hh);
              sc = q2_k_scales(pair, e);
              if (e == 0)
                mins = _mm256_add_epi32(mins, _mm256_madd_epi16(_mm256_srli_epi16(pair, 4), bcast4(a->bsums + j)));
            }
            accumulate32(s32, _mm256_madd_epi16(p16[p], sc));
          }
        }
      }
      const __m256 d = half_scales(g + 16 * hh);
      __m256 blk;
      if constexpr (kQ3) {
        __m256i pairs[8];
        scale_pairs(g, hh, pairs);
        blk = _mm256_mul_ps(
            _mm256_cvtepi32_ps(_mm256_sub_epi32(s32, _mm256_slli_epi32(scaled_bsums(pairs, a->bsums), 2))), d);
      } else {
        blk = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), half_scales(g + 32 + 16 * hh),
                               _mm256_mul_ps(_mm256_cvtepi32_ps(s32), d));
      }
      add_rows(y, 0, i, 0, _mm256_mul_ps(blk, _mm256_set1_ps(a->d)), sb == 0);
    }
  }
}

// Q6_K for one token (decode), rows 8h0 .. 8(h0 + halves) - 1. The tile above unpacks per sub-block, so it
// reads each byte of the high bits four times and each low byte twice, and one token cannot share
// that work; here each chunk of high bits and the two chunks of low bits that complete it are read
// once and give the weights of four sub-blocks (value 32v + 4c + i for v = 4V .. 4V + 3), two chunks
// per vpmaddwd as before.
// The prefetch (kOneTokenPrefetchBytes ahead): without it the tile did not overlap its arithmetic
// (about 18 GB/s per core from cache, below the dot kernel's 21) with the stream from memory, and
// a Q4_0 file's Q6_K output matrix decoded at 16-17 tokens/s against the dot kernel's 18-19; with
// 2, 4 and 8 KiB: 17-19, 19.0-19.3, 15.6-20.1 (Zen 3, alternating runs). The one-token tiles of the
// 4-bit and 8-bit types do not prefetch: on Zen 3 it made them slower (docs/performance.md).

void tile_q6_k_one(const uint8_t* g, int64_t cols, int h0, int halves, const uint8_t* act, float* y) {
  const int64_t nsb = cols / kQKK;
  constexpr int64_t kGroupBytes = 32 + 256 + 16 * (kQKK / 2 + kQKK / 4);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i top2 = _mm256_set1_epi8(0x30);
  for (int64_t sb = 0; sb < nsb; ++sb, g += kGroupBytes) {
    // Both halves of a super-block before the next one: one pass over the group keeps the stream
    // from memory continuous (two passes left it idle while the second half ran from L2).
    for (int64_t o = 0; o < kGroupBytes; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(g + kOneTokenPrefetchBytes + o), _MM_HINT_T0);
    for (int i = 0; i < halves; ++i) {
      const int h = h0 + i;
      const uint8_t* ql = g + 32 + 256 + 32 * h;
      const uint8_t* qh = ql + 16 * kQKK / 2;
      const ActBlockK* a = reinterpret_cast<const ActBlockK*>(act) + sb;
      __m256i s32 = _mm256_setzero_si256();
      for (int V = 0; V < 2; ++V) {
        CODA_UNROLL
        for (int cp = 0; cp < 4; ++cp) {  // chunks 2cp, 2cp + 1: sub-block 2v + cp / 2 of each v
          __m256i p[4];
          CODA_UNROLL
          for (int e = 0; e < 4; ++e) p[e] = _mm256_setzero_si256();
          CODA_UNROLL
          for (int k = 0; k < 2; ++k) {
            const int c = 2 * cp + k;
            const __m256i hq = load256(qh + (8 * V + c) * 64);
            const __m256i l0 = load256(ql + (8 * (2 * V) + c) * 64);      // v % 4 = 0 (low), 2 (high)
            const __m256i l1 = load256(ql + (8 * (2 * V + 1) + c) * 64);  // v % 4 = 1 (low), 3 (high)
            const __m256i w[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(hq, 4), top2)),
                _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(hq, 2), top2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(hq, top2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                _mm256_and_si256(_mm256_srli_epi16(hq, 2), top2))};
            CODA_UNROLL
            for (int e = 0; e < 4; ++e)
              accumulate16(p[e], _mm256_maddubs_epi16(w[e], bcast4(a->q + 32 * (4 * V + e) + 4 * c)));
          }
          CODA_UNROLL
          for (int e = 0; e < 4; ++e) {
            const int j = 2 * (4 * V + e) + cp / 2;
            accumulate32(s32, _mm256_madd_epi16(p[e], row_scales16<true>(g + 32 + 16 * j + 8 * h)));
          }
        }
      }
      __m256i off = _mm256_setzero_si256();
      CODA_UNROLL
      for (int k = 0; k < 8; ++k) {
        const __m128i s0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 32 + 16 * (2 * k) + 8 * h));
        const __m128i s1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 32 + 16 * (2 * k + 1) + 8 * h));
        off = _mm256_add_epi32(
            off, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s1)), bcast4(a->bsums + 2 * k)));
      }
      const __m256i total = _mm256_sub_epi32(s32, _mm256_slli_epi32(off, 5));
      const __m256 v =
          _mm256_mul_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(half_scales(g + 16 * h), _mm256_set1_ps(a->d)));
      _mm256_storeu_ps(y + 8 * i, sb == 0 ? v : _mm256_add_ps(_mm256_loadu_ps(y + 8 * i), v));
    }
  }
}

// F16 and BF16 weights (repack.h: column by column, 16 rows' values in 32 bytes): both halves of a
// column widen exactly to two registers of floats (vcvtph2ps; BF16 is the high half of a float), and
// each token's activation, broadcast from memory, meets them in two multiply-adds. Every lane sums
// its row in column order with one chain, whatever the tile, as the AVX-512 tile does: the two
// tables give the same bits, and a token's result does not depend on the tokens beside it.
constexpr int kHalfTileTokens = 6;  // 12 accumulators, 2 weight registers, 1 broadcast

template <bool kBf16>
inline __m256 widen_half_column(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kBf16) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(h);
  }
}

template <int T, bool kBf16>
void tile_half(const uint8_t* g, int64_t cols, const uint8_t* act, int64_t act_stride, float* y, int64_t y_stride) {
  constexpr int64_t kColumnBytes = 2 * kPackRows;
  const float* a[T];
  __m256 acc[2][T];
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const float*>(act + t * act_stride);
    acc[0][t] = acc[1][t] = _mm256_setzero_ps();
  }
  for (int64_t c = 0; c < cols; ++c, g += kColumnBytes) {
    const __m256 w0 = widen_half_column<kBf16>(g), w1 = widen_half_column<kBf16>(g + 16);
    CODA_UNROLL
    for (int t = 0; t < T; ++t) {
      const __m256 x = _mm256_broadcast_ss(a[t] + c);
      acc[0][t] = _mm256_fmadd_ps(w0, x, acc[0][t]);
      acc[1][t] = _mm256_fmadd_ps(w1, x, acc[1][t]);
    }
  }
  CODA_UNROLL
  for (int t = 0; t < T; ++t) {
    _mm256_storeu_ps(y + t * y_stride, acc[0][t]);
    _mm256_storeu_ps(y + t * y_stride + 8, acc[1][t]);
  }
}

template <bool kBf16>
void run_half_tiles(const uint8_t* g, int64_t cols, const void* act, int64_t act_stride, int64_t n_tokens, float* y,
                    int64_t y_stride) {
  using HalfTileFn = void (*)(const uint8_t*, int64_t, const uint8_t*, int64_t, float*, int64_t);
  static constexpr HalfTileFn kByCount[kHalfTileTokens + 1] = {nullptr,
                                                               tile_half<1, kBf16>,
                                                               tile_half<2, kBf16>,
                                                               tile_half<3, kBf16>,
                                                               tile_half<4, kBf16>,
                                                               tile_half<5, kBf16>,
                                                               tile_half<6, kBf16>};
  const auto* a = static_cast<const uint8_t*>(act);
  int64_t b = 0;
  for (; b + kHalfTileTokens <= n_tokens; b += kHalfTileTokens)
    kByCount[kHalfTileTokens](g, cols, a + b * act_stride, act_stride, y + b * y_stride, y_stride);
  if (b < n_tokens) kByCount[n_tokens - b](g, cols, a + b * act_stride, act_stride, y + b * y_stride, y_stride);
}

using TileFn = void (*)(const uint8_t*, int64_t, int, const uint8_t*, int64_t, float*, int64_t);

// One token takes both halves of the group at once. More tokens pass over the group in tiles of
// kTileTokens: with both halves at once where the type's tile has the registers (kBothHalves),
// else each half in turn, so a half's weights stay in L1/L2 across its tiles.
template <template <int, int> class Tile, bool kBothHalves = false>
void run_tiles(const uint8_t* g, int64_t cols, const void* act, int64_t act_stride, int64_t n_tokens, float* y,
               int64_t y_stride) {
  static_assert(kTileTokens == 4);
  const auto* a = static_cast<const uint8_t*>(act);
  if (n_tokens == 1) {
    Tile<2, 1>::run(g, cols, 0, a, act_stride, y, y_stride);
    return;
  }
  if constexpr (kBothHalves) {
    static constexpr TileFn kBoth[5] = {nullptr, Tile<2, 1>::run, Tile<2, 2>::run, Tile<2, 3>::run, Tile<2, 4>::run};
    int64_t b = 0;
    plan_passes(n_tokens, (n_tokens + kTileTokens - 1) / kTileTokens);
    for (; b + kTileTokens <= n_tokens; b += kTileTokens, ++tl_pass_plan.pass)
      kBoth[kTileTokens](g, cols, 0, a + b * act_stride, act_stride, y + b * y_stride, y_stride);
    if (b < n_tokens) kBoth[n_tokens - b](g, cols, 0, a + b * act_stride, act_stride, y + b * y_stride, y_stride);
  } else {  // (in the else, so the 8-row tiles are compiled only for the types that use them)
    static constexpr TileFn kByCount[5] = {nullptr, Tile<1, 1>::run, Tile<1, 2>::run, Tile<1, 3>::run,
                                           Tile<1, 4>::run};
    plan_passes(n_tokens, 2 * ((n_tokens + kTileTokens - 1) / kTileTokens));
    for (int h = 0; h < 2; ++h) {
      int64_t b = 0;
      for (; b + kTileTokens <= n_tokens; b += kTileTokens, ++tl_pass_plan.pass)
        kByCount[kTileTokens](g, cols, h, a + b * act_stride, act_stride, y + b * y_stride + 8 * h, y_stride);
      if (b < n_tokens) {
        kByCount[n_tokens - b](g, cols, h, a + b * act_stride, act_stride, y + b * y_stride + 8 * h, y_stride);
        ++tl_pass_plan.pass;
      }
    }
  }
}

template <int H, int T>
struct Q8Tile {
  static void run(const uint8_t* g, int64_t c, int h, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    tile_q8<H, T, 8>(g, c, h, a, s, y, ys);
  }
};
template <int H, int T>
struct Q40Tile {
  static void run(const uint8_t* g, int64_t c, int h, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    tile_q8<H, T, 4>(g, c, h, a, s, y, ys);
  }
};
template <int H, int T>
struct Q50Tile {
  static void run(const uint8_t* g, int64_t c, int h, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    tile_q8<H, T, 5>(g, c, h, a, s, y, ys);
  }
};
template <int H, int T>
struct Q4KTile {
  static void run(const uint8_t* g, int64_t c, int h, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    tile_q4_k<H, T>(g, c, h, a, s, y, ys);
  }
};
template <int H, int T>
struct Q5KTile {
  static void run(const uint8_t* g, int64_t c, int h, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    tile_q4_k<H, T, true>(g, c, h, a, s, y, ys);
  }
};
template <int H, int T>
struct Q6KTile {
  static void run(const uint8_t* g, int64_t c, int h, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    if constexpr (T == 1) {
      tile_q6_k_one(g, c, h, H, a, y);
    } else {
      tile_q6_k<H, T>(g, c, h, a, s, y, ys);
    }
  }
};

// The Q3_K (kQ3 true) and Q2_K tiles, by halves and token count.
template <bool kQ3>
struct TwoBitTiles {
  template <int H, int T>
  struct Tile {
    static void run(const uint8_t* g, int64_t c, int h, const uint8_t* a, int64_t s, float* y, int64_t ys) {
      if constexpr (T == 1) {
        tile_q2_q3_k_one<kQ3>(g, c, h, H, a, y);
      } else {
        tile_q2_q3_k<H, T, kQ3>(g, c, h, a, s, y, ys);
      }
    }
  };
};

template <int H, int T>
struct IQ4XSTile {
  static void run(const uint8_t* g, int64_t c, int h, const uint8_t* a, int64_t s, float* y, int64_t ys) {
    tile_iq4_xs<H, T>(g, c, h, a, s, y, ys);
  }
};

}  // namespace

void install_gemm_avx2(KernelTable& t) {
  t.gemm[static_cast<int>(DType::Q8_0)] = run_tiles<Q8Tile, true>;
  t.gemm[static_cast<int>(DType::Q4_0)] = run_tiles<Q40Tile, true>;
  t.gemm[static_cast<int>(DType::Q5_0)] = run_tiles<Q50Tile, true>;
  t.gemm[static_cast<int>(DType::Q4_K)] = run_tiles<Q4KTile, true>;
  t.gemm[static_cast<int>(DType::Q5_K)] = run_tiles<Q5KTile, true>;
  t.gemm[static_cast<int>(DType::Q6_K)] = run_tiles<Q6KTile>;
  t.gemm[static_cast<int>(DType::Q3_K)] = run_tiles<TwoBitTiles<true>::Tile>;
  t.gemm[static_cast<int>(DType::Q2_K)] = run_tiles<TwoBitTiles<false>::Tile>;
  t.gemm[static_cast<int>(DType::IQ4_XS)] = run_tiles<IQ4XSTile>;
  t.gemm[static_cast<int>(DType::F16)] = run_half_tiles<false>;
  t.gemm[static_cast<int>(DType::BF16)] = run_half_tiles<true>;
  // Repacked by default: Q8_0, Q4_0 and Q4_K, whose one-token tiles decode as fast as the unpacked
  // dot kernels (Zen 3, 1B files, tokens/s packed against unpacked: Q4_0 22.7 / 21.9, Q8_0
  // 13.4-13.8 / 13.8, Q4_K_M with its Q4_K packed 18.7-19.4 / 18.7-19.5) while prefill gains
  // 1.5-2x. Q6_K stays opt-in (CODA_REPACK=all): its tile prefills faster too, but with it packed,
  // decode of the same Q4_K_M file fell to about 15 tokens/s (its output matrix is Q6_K), and that
  // of a Q4_0 file with a Q6_K output from 23.7 to 17.5. With the prefetch above the Q4_0 file is
  // level (19.0-19.3 against 17.8-19.0) but Q4_K_M is still a little behind (16.3-17.8 against
  // 18.0-18.6), so the default waits for a faster one-token tile. Q5_K likewise (stop 45): on the
  // Intel Xeon with CODA_KERNELS=avx2, packing it raised Q5_K_M prefill by about 30% while decode,
  // one-token path included, fell by about 20% (docs/performance.md); Zen 3 is not measured.
  t.repack_by_default[static_cast<int>(DType::Q8_0)] = true;
  t.repack_by_default[static_cast<int>(DType::Q4_0)] = true;
  // Q5_0 (stop 46) runs Q4_0's tile with its fifth bits: on the Intel Xeon with CODA_KERNELS=avx2,
  // 1B pp256 49-51 -> 115-119 tokens/s and tg32 16.5-17.0 -> 20.3-20.6 packed, so it is packed by
  // default like Q4_0; Zen 3 is not measured.
  t.repack_by_default[static_cast<int>(DType::Q5_0)] = true;
  // Q3_K and Q2_K (stop 47): on the Intel Xeon with CODA_KERNELS=avx2, 1B files, packed against
  // the dot kernels, alternated: pp256 100-101 -> 113 (Q3_K_M) and 87-88 -> 120-123 tokens/s
  // (Q2_K), tg32 24.9-25.0 -> 27.0-27.4 and 25.6-26.1 -> 31.9-32.3. Zen 3 is not measured.
  t.repack_by_default[static_cast<int>(DType::Q3_K)] = true;
  t.repack_by_default[static_cast<int>(DType::Q2_K)] = true;
  // IQ4_XS likewise (stop 47): 1B --pure IQ4_XS, pp256 76-80 -> 112 tokens/s, tg32 20.2-20.7 -> 25.4-25.9.
  t.repack_by_default[static_cast<int>(DType::IQ4_XS)] = true;
  t.repack_by_default[static_cast<int>(DType::Q4_K)] = true;
  t.repack_by_default[static_cast<int>(DType::F16)] = true;
  t.repack_by_default[static_cast<int>(DType::BF16)] = true;
}

}  // namespace coda

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
