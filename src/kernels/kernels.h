// Weight formats and the arithmetic on them: dequantization, quantization, dot products.
//
// Each operation has a plain scalar reference in namespace `ref` and a fast version chosen at run
// time for the CPU (AVX2/FMA/F16C where present). Tests hold the fast versions to the references.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/blocks.h"

namespace coda {

// The form activations take when multiplied with weights of a given type: floats for float
// weights, ActRowQ8 (8 bits per 32 values) for Q8_0 (Q4_0: with paired blocks interleaved, see
// q4_0_paired_index), ActBlockK (8 bits per 256) for K-quants. Q8_32_BLOCKED holds the same values
// as Q8_32 in ActBlockQ8 form, for packed Q8_0 and Q4_0 weights (repack.h: packed_act_format).
// BF16 rounds each value to bfloat16 (bf16_round_flush), two bytes each, the row padded to an even
// count with a zero: the form the AVX512_BF16 GEMM of BF16 weights takes (gemm_act_format).
enum class ActFormat { F32, Q8_32, Q8_32_PAIRED, Q8_32_BLOCKED, Q8_256, BF16 };

constexpr ActFormat act_format(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::IQ4_NL:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
      return ActFormat::Q8_32;
    case DType::Q4_0:
      return ActFormat::Q8_32_PAIRED;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q3_K:
    case DType::Q2_K:
    case DType::IQ4_XS:
      return ActFormat::Q8_256;
    default:
      return ActFormat::F32;
  }
}

// Bytes of one activation row of n values in the form weights of type `t` take.
int64_t act_row_bytes(DType t, int64_t n);
int64_t act_row_bytes(ActFormat f, int64_t n);

// Converts n floats into the activation form weights of type `t` take (copies for float types).
void prepare_act(DType t, const float* x, void* out, int64_t n);
void prepare_act(ActFormat f, const float* x, void* out, int64_t n);

// Dot product of one weight row of `n` elements with an activation row prepared by prepare_act.
using DotFn = float (*)(const void* w, const void* act, int64_t n);
// The same for 4 activation rows `stride` bytes apart (prefill): out[t] = dot(w, act + t * stride).
using Dot4Fn = void (*)(const void* w, const void* act, int64_t stride, int64_t n, float* out);

// Product of one packed group of 16 weight rows (kernels/repack.h) with n_tokens activation rows
// `act_stride` bytes apart: y[b * y_stride + r] = dot(row r, activations b) for r < 16.
using GemmFn = void (*)(const uint8_t* group, int64_t cols, const void* act, int64_t act_stride, int64_t n_tokens,
                        float* y, int64_t y_stride);

namespace ref {
// x[0..n) = dequantized row; n is a multiple of the type's block size.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Quantizes n floats into `dst` (dtype_row_bytes(t, n) bytes). Simple, deterministic rounding.
void quantize_row(DType t, const float* src, void* dst, int64_t n);
// Quantizes activations into the ActRowQ8 layout (n a multiple of 32; act_row_bytes(Q8_0, n) bytes).
void quantize_act(const float* x, void* out, int64_t n);
// Quantizes activations into n/256 ActBlockKs (n a multiple of 256).
void quantize_act_k(const float* x, ActBlockK* out, int64_t n);
// Reference dot: dequantizes the row and accumulates in double.
float dot(DType t, const void* w, const void* act, int64_t n);
float dot_f32(const float* a, const float* b, int64_t n);
}  // namespace ref

// Moments of a softmax numerator: with d_i = x_i - shift and w_i = exp(d_i) (0 below -87),
// z = sum w, s1 = sum w d, s2 = sum w d^2. Entropy is ln z - s1 / z and varentropy s2 / z - (s1 / z)^2.
struct SoftmaxMoments {
  double z = 0, s1 = 0, s2 = 0;
};

// The attention score kernels read keys in blocks of kKeyBlock consecutive positions, each block
// transposed: head_dim rows of kKeyBlock elements, so dimension d of 16 consecutive keys is one
// vector load (the KV cache stores K this way). Element d of key j:
constexpr int64_t kKeyBlock = 16;
constexpr int64_t key_block_index(int64_t j, int64_t d, int64_t hd) {
  return (j / kKeyBlock * hd + d) * kKeyBlock + j % kKeyBlock;
}

// A Q8_0 key cache (KvType::Q8_0) keeps the same blocks of kKeyBlock positions, as bytes: first
// the int8 values plus 128 (unsigned: the first operand of vpdpbusd, which multiplies 4 unsigned
// by 4 signed bytes), 4 dimensions of one key after another and 16 keys per run of 64 bytes, so
// one vector load holds dimensions 4g..4g+3 of 16 keys; then the half-float scale of each
// 32-dimension block of each key, [hd / 32][kKeyBlock]. A head's Q8_0 values hold first the int8
// values, each pair of positions interleaved dimension by dimension (q8_value_offset; the operand
// form of vpdpwssd once widened to int16, which multiplies pairs and adds both products to one
// lane), then the half-float scales, block-major: scale b of position j at scales[b * stride + j]
// (stride: the head's positions), so that a run's scales of one block are contiguous.
// Both round as llama.cpp's Q8_0 does (scale amax / 127).
constexpr int64_t q8_key_block_bytes(int64_t hd) {
  return kKeyBlock * (hd + hd / 32 * 2);
}
constexpr int64_t q8_key_value_offset(int64_t j, int64_t d) {  // within key j's block
  return (d / 4 * kKeyBlock + j % kKeyBlock) * 4 + d % 4;
}
constexpr int64_t q8_key_scale_offset(int64_t j, int64_t b, int64_t hd) {  // scale of 32-block b
  return kKeyBlock * hd + (b * kKeyBlock + j % kKeyBlock) * 2;
}
// Values over a Q8_0 cache (KernelTable::attn_values_q8), in runs of kQ8ValueRun positions from
// j = 0. Per head h and run: a = max |p_j| (p_j = p[h][j]) and L = the last j with p_j != 0; no such
// j, or a below the normal floats (2^-126), adds nothing. P_j = p_j * (1 / a). Per 32-dimension
// block b: s = max over j <= L of |scale(j, b)|, c_j = scale(j, b) * (kQ8WeightMax / s), and the
// weight u_j = nearbyint(P_j * c_j) for j <= L, a 16-bit integer (|P_j| <= 1 and |c_j| <= 32,767)
// whose step is at most a * s / 32,767: far finer than the 8-bit values it weighs. S_i = sum_j
// u_j * q_j[i], exact in 32 bits (|S| <= 32,767 * 127 * 256 < 2^31), and out[h][i] = fma(a * s /
// kQ8WeightMax, float(S_i), out[h][i]). s = 0 adds nothing; a * s NaN or infinite makes the
// block's outputs NaN, as float arithmetic would. All of it depends only on the head's own weights
// and the values up to its last nonzero weight, so a head's result is the same in any group and
// whatever the cache holds past its own position: a prefix-cache hit reproduces a cold run bit
// for bit.
constexpr int64_t kQ8ValueRun = 256;
constexpr float kQ8WeightMax = 32767.0f;
// A BF16 value cache (KvType::BF16) interleaves the rows of each pair of positions element by
// element, the operand form of vdpbf16ps (which multiplies pairs and adds both products to one
// float lane): value d of position j is element
constexpr int64_t bf16_value_index(int64_t j, int64_t d, int64_t hd) {
  return (j / 2 * hd + d) * 2 + j % 2;
}
// Quantizes one position's hd values of one head as Q8_0 (hd int8 values, then hd / 32 half-float
// scales): the row form of a key or a value before it is scattered into its block or pair.
void quantize_kv_row_q8(const float* x, uint8_t* row, int64_t hd);
// Byte offset, within one head's Q8_0 values, of value d of position j.
constexpr int64_t q8_value_offset(int64_t j, int64_t d, int64_t hd) {
  return j / 2 * 2 * hd + d * 2 + j % 2;
}
// Scatters a quantize_kv_row_q8 row into position j of one head's Q8_0 values and scales (`stride`
// positions per block of scales). The partner of an even position is cleared: it is read (with
// weight 0) before it is written.
void store_q8_value_row(const uint8_t* row, uint8_t* values, uint16_t* scales, int64_t stride, int64_t j, int64_t hd);

// bfloat16 rounding as vcvtne2ps2bf16 does it: nearest even, a denormal input to a signed zero,
// NaN to a quiet NaN.
inline uint16_t bf16_round_flush(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7f800000u) == 0) return static_cast<uint16_t>((x >> 16) & 0x8000u);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

struct KernelTable {
  const char* name;  // "avx2" or "scalar"
  DotFn dot[40];     // indexed by DType id; nullptr where unsupported
  Dot4Fn dot4[40];   // 4 tokens at once; same results as 4 calls of dot
  Dot4Fn dot8[40];   // 8 tokens at once where a type gains from it (nullptr: two dot4 calls); same results
  GemmFn gemm[40];   // packed weights (kernels/repack.h); nullptr: this table does not repack the type
  // Two adjacent packed groups (32 rows; the second packed_group_bytes() after the first), y rows
  // 0..31; nullptr: call gemm once per group.
  GemmFn gemm2[40];
  // True where gemm[BF16] / gemm2[BF16] take activations rounded to bfloat16 (ActFormat::BF16;
  // gemm_bf16.cpp, AVX512_BF16), as llama.cpp does for BF16 weights: every product is then exact
  // in float, and the sums add pairs of columns. Elsewhere the BF16 GEMM widens the weights and
  // multiplies the float activations as they are. repack.h: gemm_act_format.
  bool gemm_bf16_rounds_activations;
  // Converts n F16 values in place to bfloat16 when every one of them is a bfloat16 value (the F16
  // file of a checkpoint trained in bfloat16), and returns true; otherwise leaves them as they were
  // and returns false. Set where gemm[BF16] is the vdpbf16ps GEMM, which then multiplies such
  // F16 matrices (matmul.h: repack_weight_for). nullptr elsewhere.
  bool (*half_to_bf16_exact)(uint16_t* v, int64_t n);
  // Whether loading a model repacks this type by default (a GEMM above must exist). Where the
  // one-token tile streams weights from memory slower than the unpacked dot kernel, repacking
  // trades decode speed for prefill speed, so the type keeps the file's layout unless asked
  // (LoadOptions::repack_all, CODA_REPACK=all).
  bool repack_by_default[40];
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  // y[i] += a * x[i]
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
  // prepare_act() with this table's instructions; byte-identical to the reference.
  void (*prepare_act)(ActFormat f, const float* x, void* out, int64_t n);
  // y[i] = exp(x[i] - shift), returns the sum of y (softmax numerators; x may equal y). Inputs
  // more than 87 below `shift` (and -inf) give exactly 0. SIMD versions are within 2e-7
  // relative of the scalar reference, which uses std::exp.
  float (*exp_sum)(const float* x, float* y, int64_t n, float shift);
  // y[i] = 2^(x[i] - shift), returns the sum of y: the attention softmax, whose scores carry log2(e)
  // in their scale, so the exponential needs no multiply by it and its range reduction is exact.
  // Inputs more than 126 below `shift` (and -inf) give exactly 0. SIMD versions are within 3e-7
  // relative of the scalar reference (std::exp2) and give the same bits as each other.
  float (*exp2_sum)(const float* x, float* y, int64_t n, float shift);
  // a[i] = silu(a[i]) * b[i] = a[i] / (1 + exp(-a[i])) * b[i], the feed-forward gate. SIMD versions
  // are within 5e-7 relative of the scalar reference (std::exp), for any finite a.
  void (*swiglu)(float* a, const float* b, int64_t n);
  // Sum and maximum of n floats (n >= 1 for max; NaN-free input). The scalar sum accumulates in double.
  float (*sum_f32)(const float* x, int64_t n);
  float (*max_f32)(const float* x, int64_t n);
  SoftmaxMoments (*softmax_moments)(const float* x, int64_t n, float shift);
  // How many of the n values are > t.
  int64_t (*count_above)(const float* x, int64_t n, float t);
  // Attention of a group of G query heads that share one key/value head (grouped-query attention),
  // over `len` cached positions; hd (the head size) is a multiple of 8. Each key and value row is
  // read once for the whole group.
  // scores[h * s_stride + j] = scale * dot(q + h * hd, key j) for h < G, j < len, with the keys in
  // blocks of kKeyBlock positions (key_block_index): ceil(len / kKeyBlock) whole blocks are read.
  void (*attn_scores)(const float* q, int64_t G, const float* k, int64_t len, int64_t hd, float scale, float* scores,
                      int64_t s_stride);
  // out[h * hd + i] += sum over j of p[h * s_stride + j] * v[j * kv_stride + i] for h < G, i < hd:
  // it adds to what is there (attention visits the cache in chunks), over j in order.
  void (*attn_values)(const float* p, int64_t G, int64_t s_stride, const float* v, int64_t kv_stride, int64_t len,
                      int64_t hd, float* out);
  // The same two over a KV cache stored as IEEE half floats (KvType::F16); each element widens to
  // float exactly, so these equal the float kernels run on the widened rows.
  void (*attn_scores_f16)(const float* q, int64_t G, const uint16_t* k, int64_t len, int64_t hd, float scale,
                          float* scores, int64_t s_stride);
  void (*attn_values_f16)(const float* p, int64_t G, int64_t s_stride, const uint16_t* v, int64_t kv_stride,
                          int64_t len, int64_t hd, float* out);
  // The same two over a Q8_0 cache (q8_key_block_bytes). Scores take the G query vectors quantized
  // as ActRowQ8 rows (prepare_act with ActFormat::Q8_32), qa_stride bytes apart, as llama.cpp
  // quantizes queries for a Q8_0 key cache: for each 32-dimension block the integer dot product
  // times the query's and the key's scales, summed over the blocks, times `scale`. Values (`v` at
  // an even position of one head's values, `scales` at the same position's block-0 scale, block b
  // scale_stride further) are weighed in 16-bit integers, as kQ8ValueRun's
  // comment defines, so that vpdpwssd / pmaddwd do two multiply-adds where a float FMA does one.
  // Every table computes the same bits: the integer sums are exact and the float steps are the
  // same IEEE operations in the same order.
  void (*attn_scores_q8)(const uint8_t* qa, int64_t qa_stride, int64_t G, const uint8_t* k, int64_t len, int64_t hd,
                         float scale, float* scores, int64_t s_stride);
  void (*attn_values_q8)(const float* p, int64_t G, int64_t s_stride, const uint8_t* v, const uint16_t* scales,
                         int64_t scale_stride, int64_t len, int64_t hd, float* out);
  // Values over a BF16 value cache (bf16_value_index; the pair of an odd len's last position holds
  // finite values): out[h * hd + i] += sum over j of bf16(p[h * s_stride + j]) * v(j, i), the
  // weights rounded to bfloat16 (nearest even), so every product is exact in float. With
  // AVX512_BF16 vdpbf16ps adds two positions' products per lane and instruction.
  void (*attn_values_bf16)(const float* p, int64_t G, int64_t s_stride, const uint16_t* v, int64_t len, int64_t hd,
                           float* out);
  // y[i] = x[i] rounded to the nearest half float, ties to even (the KV cache's F16 rows).
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n);
  // Reads n bytes as fast as the CPU can and returns a value depending on them (bandwidth probes).
  uint64_t (*stream_read)(const uint8_t* p, int64_t n);
};

// The fastest table this CPU supports (decided once; immutable afterwards).
const KernelTable& kernels();
// The scalar table (tests, and a fallback forced with CODA_KERNELS=scalar).
const KernelTable& scalar_kernels();
// The AVX2 table, or nullptr when this CPU lacks AVX2/FMA/F16C.
const KernelTable* avx2_kernels();
// The AVX-512 (F/BW/VL/VNNI) table, or nullptr when this CPU lacks one of them.
const KernelTable* avx512_kernels();
// Every table this CPU can run, scalar first (tests compare them all with the references).
std::vector<const KernelTable*> available_kernels();

}  // namespace coda
