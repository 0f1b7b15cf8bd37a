// Block layouts of the quantized GGUF weight formats, and coda's activation block.
//
// The layouts are the ggml/GGUF format (facts of the file format): every block starts with its
// scale(s) as IEEE half floats, followed by packed integer quants. See docs/formats.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace coda {

constexpr int kQK = 32;    // elements per block of the 32-element formats
constexpr int kQKK = 256;  // elements per K-quant super-block

// Q8_0: x = d * q, q in [-127, 127].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};

// Q4_0: x = d * (q - 8), q in [0, 15]; byte j holds element j (low nibble) and j + 16 (high).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};

// Q4_K: 8 sub-blocks of 32 with 6-bit scale sc and 6-bit min m packed in `scales`;
// x = d * sc * q - dmin * m, q in [0, 15]. qs[32c + l] holds sub-block 2c (low nibble) and
// 2c + 1 (high nibble), element l.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};

// Q5_K: as Q4_K with a fifth bit per element: bit (2c) of qh[l] for sub-block 2c, bit 2c + 1 for
// sub-block 2c + 1; q in [0, 31].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales; x = d * scales[i / 16] * (q - 32),
// q in [0, 63] split into 4 low bits (ql) and 2 high bits (qh).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};

// Q3_K: 16 sub-blocks of 16 with 6-bit scales s (stored biased by 32: scale = s - 32); a 3-bit
// signed quant per element, x = d * (s - 32) * (q - 4 * (1 - h)), q in [0, 3] from qs and the high
// bit h from hmask. Element 128 * half + 32 * j + l (l < 32) takes bits 2j..2j+1 of qs[32 * half +
// l] and bit 4 * half + j of hmask[l]; its sub-block is 8 * half + 2 * j + l / 16. Scale s: low 4
// bits from scales[s % 8] (nibble s / 8), high 2 bits from scales[8 + s % 4] (bits 2 * (s / 4)).
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};

// Q2_K: 16 sub-blocks of 16, each with a 4-bit scale (low nibble of scales[s]) and a 4-bit min
// (high nibble); x = d * sc * q - dmin * m, q in [0, 3], laid out in qs as Q3_K's low bits.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};

// The older 32-value formats of Llama 2 era files. Q4_1: x = d * q + m, q in [0, 15], nibbles as
// Q4_0's. Q5_0: x = d * (q - 16) and Q5_1: x = d * q + m, q in [0, 31]: the low 4 bits as Q4_0's
// nibbles, the fifth bit of element j in bit j of the 32-bit qh (little-endian bytes).
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};

struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// IQ4_NL and IQ4_XS: 4-bit indices into a fixed table of 16 non-uniform levels (kIq4Levels).
// IQ4_NL: blocks of 32, x = d * level[q]; byte j holds elements j (low nibble) and j + 16 (high),
// as Q4_0. IQ4_XS: super-blocks of 256 of 8 such sub-blocks (sub-block s in qs[16s..16s+15]),
// each with a 6-bit scale ls biased by 32: low 4 bits in nibble s % 2 of scales_l[s / 2], high 2
// bits in bits 2s..2s+1 of scales_h; x = d * (ls - 32) * level[q].
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];
};

struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockIQ4_XS) == 136);

// Activations multiplied with Q8_0/Q4_0 weights are quantized to 8 bits per 32 elements
// (x ~= d * q). A row of n activations is stored as structure-of-arrays: n int8 quants, then n/32
// float scales, then n/32 int32 sums of the quants. The kernels load the scales and sums of 8
// blocks with one vector load and apply them once per 8 blocks; the sums fold the Q4_0 offset.
struct ActRowQ8 {
  const int8_t* q;
  const float* d;
  const int32_t* sum;

  ActRowQ8(const void* p, int64_t n)
      : q(static_cast<const int8_t*>(p)),
        d(reinterpret_cast<const float*>(q + n)),
        sum(reinterpret_cast<const int32_t*>(d + n / kQK)) {}
};

// The same quants, scale and sum block by block, 40 bytes each: the form packed Q8_0/Q4_0 weights
// take (ActFormat::Q8_32_BLOCKED). The GEMM tile holds 8 activation rows at once; with the three
// arrays of ActRowQ8 it needed 24 pointers, more than x86 has registers, and the spills cost about a
// fifth of its speed. Here one pointer per row reaches all three at fixed offsets.
struct ActBlockQ8 {
  int8_t q[kQK];
  float d;
  int32_t sum;
};
static_assert(sizeof(ActBlockQ8) == 40);
// ...which is also the ActRowQ8 layout of a single block (quantize.cpp relies on it).
static_assert(offsetof(ActBlockQ8, d) == kQK && offsetof(ActBlockQ8, sum) == kQK + 4);

// Q4_0 weights take ActRowQ8 with the quants of each pair of blocks (2p, 2p+1) interleaved by
// halves: a[2p][0..15], a[2p+1][0..15], a[2p][16..31], a[2p+1][16..31]. That matches a register
// holding the 16 quant bytes of both blocks (low nibbles: elements 0..15, high: 16..31), so one
// pair needs no shuffles. An odd last block keeps the natural order. Scales and sums: natural.
inline int64_t q4_0_paired_index(int64_t i, int64_t n) {
  const int64_t nb = n / kQK, k = i / kQK, j = i % kQK;
  if (k >= nb - nb % 2) return i;
  return 64 * (k / 2) + (j < 16 ? 0 : 32) + (k % 2) * 16 + j % 16;
}

// Activations for K-quant weights: one scale per 256 values (the super-block), and the sum of each
// 16 quants, so that the K-quant kernels accumulate a whole super-block in integers and apply the
// sub-block minimums (Q4_K, Q5_K) or the -32 offset (Q6_K) from the sums alone.
struct ActBlockK {
  float d;
  int16_t bsums[kQKK / 16];
  int8_t q[kQKK];
};
static_assert(sizeof(ActBlockK) == 292);

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K `scales` array.
inline void kquant_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// The 6-bit scale of sub-block s (0..15) of a Q3_K `scales` array, biased by 32 (0..63).
inline int q3_k_scale(int s, const uint8_t* sc) {
  return ((sc[s % 8] >> (4 * (s / 8))) & 0xF) | (((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
}

// All 16 Q3_K scales without the bias (s - 32, signed), four at a time in 32-bit words: word k of
// the result holds scales 4k..4k+3, whose low nibbles are the low (k < 2) or high (k >= 2) nibbles
// of bytes 4(k % 2).., and whose top bits are bits 2k..2k+1 of bytes 8..11. The same values as
// q3_k_scale, for the kernels that unpack a block per call.
inline void q3_k_scales16(const uint8_t* sc, int8_t* out) {
  uint32_t a[3];
  std::memcpy(a, sc, 12);
  uint32_t w[4];
  for (int k = 0; k < 4; ++k) {
    const uint32_t low = (a[k % 2] >> (4 * (k / 2))) & 0x0F0F0F0Fu;
    const uint32_t high = ((a[2] >> (2 * k)) & 0x03030303u) << 4;
    // Per byte v - 32 = v + 224 (mod 256), added as 96 in the low 7 bits and 128 by flipping the
    // top bit, so that no carry crosses into the next byte (v + 96 <= 159).
    w[k] = ((low | high) + 0x60606060u) ^ 0x80808080u;
  }
  std::memcpy(out, w, 16);
}

// The 6-bit scale of sub-block s (0..7) of an IQ4_XS block, biased by 32 (0..63).
inline int iq4_xs_scale(int s, const BlockIQ4_XS& b) {
  return ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((b.scales_h >> (2 * s)) & 3) << 4);
}

}  // namespace coda
