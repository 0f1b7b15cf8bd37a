// Weights repacked at load into groups of 16 interleaved rows: the layout the GEMM kernels stream.
//
// The kernels keep one output row per 32-bit lane of a 512-bit register, so a block of weights
// meets a broadcast of 4 activation bytes and every lane accumulates its own row: no horizontal
// sums, and one load of the weights serves every token of a tile. In a group, for each block of
// the original format, the 16 rows' scales come first, then their quants 4 bytes per row in turn
// (bytes r*4..r*4+3 of each 64-byte chunk belong to row r). docs/formats.md has the byte layouts.
//
//   Q8_0: per 32 values, 16 x f16 d, then 8 chunks of quants stored as q ^ 0x80 (unsigned, q + 128);
//         the same size as the original rows.
//   Q4_0: per 32 values, 16 x f16 d, then 4 chunks: chunk p holds each row's original bytes
//         4p..4p+3 (low nibbles: values 4p.., high: 16 + 4p..); the same size as the original.
//   Q5_0: per 32 values, Q4_0's d and 4 chunks, then one chunk of the fifth bits rearranged so that
//         byte i of each row holds those of values 4p + i (bit p) and 16 + 4p + i (bit 4 + p) for
//         p < 4, beside the nibbles they complete; the same size as the original (22).
//   Q4_K: per 256 values, 16 x f16 d, 16 x f16 dmin, the 8 sub-block scales as bytes (16 per
//         sub-block), the 8 mins as byte pairs (sub-blocks 2p, 2p + 1 per row), then 32 chunks of
//         the original quant bytes; 148 bytes per row and super-block instead of 144 (+2.8%),
//         because the 6-bit scales are stored unpacked.
//   Q5_K: Q4_K's layout, then 8 chunks of the high bits: chunk p holds each row's qh bytes
//         4p..4p+3 (bit j of a byte is the fifth bit of that value in sub-block j); 180 bytes per
//         row and super-block instead of 176 (+2.3%).
//   Q3_K: per 256 values, 16 x f16 d, the 16 sub-block scales as signed bytes minus 32 (16 per
//         sub-block), 16 chunks of the qs bytes (chunk c: bytes 4c..4c+3 of each row), then 8
//         chunks of the hmask bytes; 114 bytes per row and super-block instead of 110 (+3.6%).
//   Q2_K: per 256 values, 16 x f16 d, 16 x f16 dmin, the scale bytes in pairs (sub-blocks 2p,
//         2p + 1 of each row side by side), then 16 chunks of the qs bytes; the same size (84).
//   IQ4_XS: per 256 values, 16 x f16 d, the 8 sub-block scales as signed bytes minus 32 (16 per
//         sub-block), then 32 chunks of the index bytes (chunk 4s + p: bytes 16s + 4p..16s + 4p + 3
//         of each row); 138 bytes per row and super-block instead of 136 (+1.5%).
//   F16, BF16: column by column, the 16 rows' 2-byte values side by side (32 bytes per column), so
//         one load widens into a register of 16 rows' weights; the same size as the original.
//         Their activations stay floats and are broadcast one value at a time.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/kernels.h"

namespace coda {

constexpr int kPackRows = 16;

// Offsets in a packed Q4_K or Q5_K group, per super-block of 256 values (the layout above): the
// header (d, dmin, scales, min pairs), then the 32 chunks of quant nibbles, then for Q5_K the 8 chunks
// of high bits. The GEMM kernels and the repacking read these, not their own copies.
constexpr int64_t kKQuantPackedNibbles = 64 + 128 + 128;
constexpr int64_t kKQuantPackedHighBits = kKQuantPackedNibbles + kPackRows * 256 / 2;
constexpr int64_t kq4k_packed_block_bytes(bool q5) {
  return kKQuantPackedHighBits + (q5 ? kPackRows * 256 / 8 : 0);
}

// Offsets in a packed Q3_K or Q2_K group, per super-block (the layout above).
constexpr int64_t kQ3KPackedQuants = 32 + 256;                             // after d and the scales
constexpr int64_t kQ3KPackedHighBits = kQ3KPackedQuants + kPackRows * 64;  // after 16 chunks of qs
constexpr int64_t kQ3KPackedBlockBytes = kQ3KPackedHighBits + kPackRows * 32;
constexpr int64_t kQ2KPackedScales = 64;                      // after d and dmin
constexpr int64_t kQ2KPackedQuants = kQ2KPackedScales + 256;  // after the scale pairs
constexpr int64_t kQ2KPackedBlockBytes = kQ2KPackedQuants + kPackRows * 64;

constexpr int64_t kQ50PackedHighBits = 32 + kPackRows * 16;  // after d and the 4 nibble chunks
constexpr int64_t kQ50PackedBlockBytes = kQ50PackedHighBits + kPackRows * 4;
constexpr int64_t kIQ4XSPackedQuants = 32 + 128;  // after d and the scales
constexpr int64_t kIQ4XSPackedBlockBytes = kIQ4XSPackedQuants + kPackRows * 128;

// The two-byte float formats, which pack column by column and take float activations.
constexpr bool is_half_type(DType t) {
  return t == DType::F16 || t == DType::BF16;
}

// Whether `t` has a repacked layout at all (the CPU's kernel table decides whether it is used).
bool repack_supported(DType t);
// Bytes of one packed group of 16 rows of `cols` values.
int64_t packed_group_bytes(DType t, int64_t cols);
// Packs 16 original rows (`src`, dtype_row_bytes(t, cols) apart) into `dst`.
void repack_group(DType t, const uint8_t* src, int64_t cols, uint8_t* dst);
// Writes row r (0..15) of a packed group back in its original block format (dtype_row_bytes).
void unpack_row(DType t, const uint8_t* group, int64_t cols, int r, uint8_t* dst);
// The activation form packed weights of type `t` take: Q8_0 and Q4_0 per-32 quants in natural
// order, block by block (ActBlockQ8), the K-quants their own per-256 blocks, F16 and BF16 floats.
ActFormat packed_act_format(DType t);
// The activation form table k's GEMM for packed `t` takes: packed_act_format(t), except BF16 where
// the table rounds activations to bfloat16 (KernelTable::gemm_bf16_rounds_activations).
ActFormat gemm_act_format(const KernelTable& k, DType t);

namespace ref {
// The scalar reference of every GemmFn: unpacks each row and takes ref::dot.
void gemm_packed(DType t, const uint8_t* group, int64_t cols, const void* act, int64_t act_stride, int64_t n_tokens,
                 float* y, int64_t y_stride);
}  // namespace ref

// Fills t.gemm with the AVX-512 VNNI kernels (gemm_avx512.cpp; run only where the CPU has them).
void install_gemm_avx512(KernelTable& t);
// Replaces the AVX-512 table's BF16 GEMM with vdpbf16ps (gemm_bf16.cpp; run only where the CPU
// has AVX512_BF16): activations rounded to bfloat16 (KernelTable::gemm_bf16_rounds_activations).
void install_gemm_bf16(KernelTable& t);
// Fills t.gemm with the AVX2 kernels (gemm_avx2.cpp; run only where the CPU has AVX2, FMA and F16C).
void install_gemm_avx2(KernelTable& t);

}  // namespace coda
