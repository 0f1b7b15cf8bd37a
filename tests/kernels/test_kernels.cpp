// Every fast kernel against its scalar reference, and the formats against hand-computed blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "random_data.h"

namespace coda {
namespace {

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q4_0,
                        DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,   DType::Q5_K,
                        DType::Q6_K, DType::Q3_K, DType::Q2_K, DType::IQ4_NL, DType::IQ4_XS};

std::vector<uint8_t> quantized(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(t, static_cast<int64_t>(x.size()))));
  ref::quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

class PerType : public ::testing::TestWithParam<DType> {};

// Quantize -> dequantize stays within the format's resolution: a sanity check of both directions.
TEST_P(PerType, QuantizationErrorIsBoundedByTheFormat) {
  const DType t = GetParam();
  const int64_t n = 4096;
  const auto x = random_vec(n, 11);
  const auto q = quantized(t, x);
  std::vector<float> y(static_cast<size_t>(n));
  ref::dequantize_row(t, q.data(), y.data(), n);
  double err = 0, ref_norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    err += (x[i] - y[i]) * (x[i] - y[i]);
    ref_norm += x[i] * x[i];
  }
  const double rel = std::sqrt(err / ref_norm);
  // Relative RMS error of round-to-nearest with these bit widths on Gaussian data.
  const double bound = t == DType::F32                            ? 0
                       : t == DType::F16                          ? 1e-3
                       : t == DType::BF16                         ? 5e-3
                       : t == DType::Q8_0                         ? 0.01
                       : t == DType::Q6_K                         ? 0.03
                       : t == DType::Q5_K                         ? 0.06
                       : t == DType::Q3_K                         ? 0.2
                       : t == DType::Q2_K                         ? 0.4
                       : t == DType::IQ4_NL || t == DType::IQ4_XS ? 0.12
                                                                  : 0.12;
  EXPECT_LE(rel, bound) << dtype_name(t);
}

// The selected (SIMD) kernel and the scalar table agree with the reference dot product.
TEST_P(PerType, DotMatchesReference) {
  const DType t = GetParam();
  // 32-element formats also get block counts that are odd and not multiples of 8 (tail paths).
  std::vector<int64_t> sizes = {256, 512, 4096, 8192};
  if (dtype_info(static_cast<uint32_t>(t))->block_size == 32) sizes.insert(sizes.end(), {32, 96, 416, 4064});
  for (int64_t n : sizes) {
    const auto w = random_vec(n, static_cast<uint32_t>(n) + 3);
    const auto x = random_vec(n, static_cast<uint32_t>(n) + 5, 2.0f);
    const auto q = quantized(t, w);
    std::vector<uint8_t> act(static_cast<size_t>(act_row_bytes(t, n)));
    prepare_act(t, x.data(), act.data(), n);
    const void* a = act.data();
    const float want = ref::dot(t, q.data(), a, n);
    // Error scale: the sum of |w_i * x_i| bounds the float rounding of any summation order.
    std::vector<float> wd(static_cast<size_t>(n));
    ref::dequantize_row(t, q.data(), wd.data(), n);
    double mag = 0;
    for (int64_t i = 0; i < n; ++i) mag += std::fabs(wd[i] * x[i]);
    const double tol = 2e-6 * mag + 1e-6;
    for (const KernelTable* k : available_kernels())
      EXPECT_NEAR(k->dot[static_cast<int>(t)](q.data(), a, n), want, tol)
          << k->name << " " << dtype_name(t) << " n=" << n;
  }
}

// The 4-token kernels (prefill) agree with the reference for every token.
TEST_P(PerType, Dot4MatchesReference) {
  const DType t = GetParam();
  const int64_t n = dtype_info(static_cast<uint32_t>(t))->block_size == 32 ? 2016 : 2048;  // 63 blocks of 32
  const auto w = random_vec(n, 31);
  const auto q = quantized(t, w);
  const int64_t stride = act_row_bytes(t, n);
  std::vector<uint8_t> acts(static_cast<size_t>(4 * stride));
  for (int k = 0; k < 4; ++k) {
    const auto x = random_vec(n, 40 + static_cast<uint32_t>(k), 1.0f + static_cast<float>(k));
    prepare_act(t, x.data(), acts.data() + k * stride, n);
  }
  for (const KernelTable* table : available_kernels()) {
    float out[4];
    table->dot4[static_cast<int>(t)](q.data(), acts.data(), stride, n, out);
    for (int k = 0; k < 4; ++k) {
      const float want = ref::dot(t, q.data(), acts.data() + k * stride, n);
      EXPECT_NEAR(out[k], want, 1e-4 * (1 + std::fabs(want)) + 1e-3)
          << table->name << " " << dtype_name(t) << " token " << k;
    }
  }
}

// The 8-token kernels, where a table has one, give each token the bits of the one-token kernel
// (a prefix-cache hit must reproduce a cold run whatever the batch), and so agree with the reference.
TEST_P(PerType, Dot8EqualsDotPerToken) {
  const DType t = GetParam();
  const int64_t n = dtype_info(static_cast<uint32_t>(t))->block_size == 32 ? 2016 : 2048;
  const auto q = quantized(t, random_vec(n, 33));
  const int64_t stride = act_row_bytes(t, n);
  std::vector<uint8_t> acts(static_cast<size_t>(8 * stride));
  for (int k = 0; k < 8; ++k) {
    const auto x = random_vec(n, 50 + static_cast<uint32_t>(k), 0.5f + static_cast<float>(k));
    prepare_act(t, x.data(), acts.data() + k * stride, n);
  }
  int tables = 0;
  for (const KernelTable* table : available_kernels()) {
    if (table->dot8[static_cast<int>(t)] == nullptr) continue;
    ++tables;
    float out[8];
    table->dot8[static_cast<int>(t)](q.data(), acts.data(), stride, n, out);
    for (int k = 0; k < 8; ++k) {
      const uint8_t* a = acts.data() + k * stride;
      EXPECT_EQ(out[k], table->dot[static_cast<int>(t)](q.data(), a, n)) << table->name << " token " << k;
      const float want = ref::dot(t, q.data(), a, n);
      EXPECT_NEAR(out[k], want, 1e-4 * (1 + std::fabs(want)) + 1e-3) << table->name << " token " << k;
    }
  }
  // The SIMD tables have one for the types AVX2 leaves unpacked; none for the scalar table.
  if (t == DType::Q6_K || t == DType::Q3_K || t == DType::Q2_K || t == DType::IQ4_XS) {
    EXPECT_EQ(tables, static_cast<int>(available_kernels().size()) - 1);
  }
}

// Every table prepares activations byte for byte as the reference does (including zero rows and
// huge values), since the dot kernels are held to the reference on reference-prepared inputs.
TEST_P(PerType, PrepareActIsByteIdentical) {
  const DType t = GetParam();
  for (int64_t n : {256, 512, 2048}) {
    if (n % dtype_info(static_cast<uint32_t>(t))->block_size != 0) continue;
    auto x = random_vec(n, 77, 3.0f);
    for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = 0.0f;  // an all-zero block
    x[40] = 1e30f;
    std::vector<uint8_t> want(static_cast<size_t>(act_row_bytes(t, n)));
    prepare_act(t, x.data(), want.data(), n);
    for (const KernelTable* k : available_kernels()) {
      std::vector<uint8_t> got(want.size(), 0xAA);
      k->prepare_act(act_format(t), x.data(), got.data(), n);
      EXPECT_EQ(got, want) << k->name << " " << dtype_name(t) << " n=" << n;
    }
  }
}

// The blocked form (packed Q8_0/Q4_0 weights) holds the row form's quants, scales and sums block by
// block, from every table, byte for byte.
TEST(Kernels, BlockedActivationsHoldTheRowFormsValues) {
  for (int64_t n : {32, 256, 2048}) {
    auto x = random_vec(n, 78, 3.0f);
    x[5] = 1e30f;
    std::vector<uint8_t> rows(static_cast<size_t>(act_row_bytes(ActFormat::Q8_32, n)));
    prepare_act(ActFormat::Q8_32, x.data(), rows.data(), n);
    const ActRowQ8 a(rows.data(), n);
    ASSERT_EQ(act_row_bytes(ActFormat::Q8_32_BLOCKED, n), n / kQK * static_cast<int64_t>(sizeof(ActBlockQ8)));
    std::vector<uint8_t> want(static_cast<size_t>(act_row_bytes(ActFormat::Q8_32_BLOCKED, n)));
    prepare_act(ActFormat::Q8_32_BLOCKED, x.data(), want.data(), n);
    const auto* blocks = reinterpret_cast<const ActBlockQ8*>(want.data());
    for (int64_t b = 0; b < n / kQK; ++b) {
      EXPECT_EQ(std::memcmp(blocks[b].q, a.q + b * kQK, kQK), 0) << "block " << b;
      EXPECT_EQ(blocks[b].d, a.d[b]) << "block " << b;
      EXPECT_EQ(blocks[b].sum, a.sum[b]) << "block " << b;
    }
    for (const KernelTable* k : available_kernels()) {
      std::vector<uint8_t> got(want.size(), 0xAA);
      k->prepare_act(ActFormat::Q8_32_BLOCKED, x.data(), got.data(), n);
      EXPECT_EQ(got, want) << k->name << " n=" << n;
    }
  }
}

// Extreme inputs: all zeros, one huge value, and the most negative quant values.
TEST_P(PerType, DotHandlesDegenerateBlocks) {
  const DType t = GetParam();
  const int64_t n = 512;
  std::vector<float> w(static_cast<size_t>(n), 0.0f), x(static_cast<size_t>(n), 1.0f);
  w[7] = -1000.0f;
  w[300] = 3.0f;
  const auto q = quantized(t, w);
  std::vector<uint8_t> act(static_cast<size_t>(act_row_bytes(t, n)));
  prepare_act(t, x.data(), act.data(), n);
  const void* a = act.data();
  const float want = ref::dot(t, q.data(), a, n);
  for (const KernelTable* k : available_kernels())
    EXPECT_NEAR(k->dot[static_cast<int>(t)](q.data(), a, n), want, 1e-3 * std::fabs(want) + 1e-3) << k->name;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, PerType, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Hand-built blocks whose values follow from the format definition.
TEST(Formats, Q4_0HandBuiltBlock) {
  BlockQ4_0 b{};
  b.d = float_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  ref::dequantize_row(DType::Q4_0, &b, y, 32);
  EXPECT_FLOAT_EQ(y[0], -4.0f);   // (0 - 8) * 0.5
  EXPECT_FLOAT_EQ(y[15], 3.5f);   // (15 - 8) * 0.5
  EXPECT_FLOAT_EQ(y[16], 3.5f);   // high nibble of byte 0: 15
  EXPECT_FLOAT_EQ(y[31], -4.0f);  // high nibble of byte 15: 0
}

TEST(Formats, Q4_KHandBuiltBlock) {
  BlockQ4_K b{};
  b.d = float_to_fp16(2.0f);
  b.dmin = float_to_fp16(1.0f);
  // Sub-block 0: scale 3, min 5. Sub-block 5: scale 33 (0b100001), min 17 (0b010001): the high two
  // bits live in the top bits of bytes 1 and 5, the low four in byte 9.
  b.scales[0] = 3;
  b.scales[4] = 5;
  b.scales[1] = static_cast<uint8_t>(2 << 6);
  b.scales[5] = static_cast<uint8_t>(1 << 6);
  b.scales[9] = static_cast<uint8_t>(1 | (1 << 4));
  for (int i = 0; i < 128; ++i) b.qs[i] = 0x97;  // low nibble 7, high nibble 9
  float y[256];
  ref::dequantize_row(DType::Q4_K, &b, y, 256);
  EXPECT_FLOAT_EQ(y[0], 2.0f * 3 * 7 - 1.0f * 5);     // sub-block 0, low nibble
  EXPECT_FLOAT_EQ(y[5 * 32], 2.0f * 33 * 9 - 17.0f);  // sub-block 5 = chunk 2, high nibble
}

TEST(Formats, Q6_KHandBuiltBlock) {
  BlockQ6_K b{};
  b.d = float_to_fp16(0.25f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s - 8);
  // Element 0: low 4 bits from ql[0] (low nibble), high 2 bits from qh[0] bits 0-1 -> q = 0x3F = 63.
  b.ql[0] = 0x0F;
  b.qh[0] = 0x03;
  float y[256];
  ref::dequantize_row(DType::Q6_K, &b, y, 256);
  EXPECT_FLOAT_EQ(y[0], 0.25f * -8 * (63 - 32));
  EXPECT_FLOAT_EQ(y[1], 0.25f * -8 * (0 - 32));
  EXPECT_FLOAT_EQ(y[64], 0.25f * -4 * (0 - 32));  // element 64: scale index 4
}

// Q3_K: element 128 * half + 32 * j + l takes bits 2j..2j+1 of qs[32 * half + l] and bit 4 * half
// + j of hmask[l] (set: no -4), in sub-block 8 * half + 2 * j + l / 16, whose 6-bit scale (biased
// by 32) keeps its low 4 bits in nibble s / 8 of scales[s % 8] and its high 2 bits in bits 2 * (s /
// 4) of scales[8 + s % 4].
TEST(Formats, Q3_KHandBuiltBlock) {
  BlockQ3_K b{};
  b.d = float_to_fp16(0.5f);
  // Every sub-block's scale 32 (0 after the bias) unless set below: low nibble 0, high bits 2.
  for (int k = 8; k < 12; ++k) b.scales[k] = 0xAA;  // 0b10 in every 2-bit field
  // Sub-block 0: scale 40 (0b10'1000) -> 8. Sub-block 13: 45 (0b10'1101) -> 13; low nibble in
  // scales[5] high half, high bits in scales[9] bits 6-7 (already 0b10).
  b.scales[0] = 0x08;
  b.scales[5] = 0xD0;
  b.qs[0] = 0x03;        // element 0: low bits 3 (pass 0)
  b.hmask[0] = 0x01;     // element 0: high bit set -> q = 3
  b.qs[32 + 20] = 0x80;  // element 128 + 3 * 32 + 20 = 244 (sub-block 8 + 6 + 1 = 15): low bits 2
  b.hmask[20] = 0x00;    // its high bit (bit 7) clear -> q = 2 - 4 = -2
  b.qs[32 + 16] = 0x04;  // element 128 + 32 + 16 = 176 (sub-block 8 + 2 + 1 = 11): low bits 1
  b.hmask[16] = 0x20;    // bit 4 * 1 + 1 = 5 set -> q = 1
  float y[256];
  ref::dequantize_row(DType::Q3_K, &b, y, 256);
  EXPECT_FLOAT_EQ(y[0], 0.5f * 8 * 3);
  EXPECT_FLOAT_EQ(y[1], 0.5f * 8 * -4);  // low bits 0, high bit clear
  EXPECT_FLOAT_EQ(y[244], 0.0f);         // sub-block 15: scale 32 -> 0
  EXPECT_FLOAT_EQ(y[176], 0.0f);         // sub-block 11: scale 0
  // Sub-block 13 = half 1, pass 2, second 16: elements 128 + 64 + 16.. = 208..223.
  b.qs[32 + 16] = 0x10;  // element 208: pass 2 low bits 1
  b.hmask[16] = 0x40;    // bit 4 + 2 set -> q = 1
  ref::dequantize_row(DType::Q3_K, &b, y, 256);
  EXPECT_FLOAT_EQ(y[208], 0.5f * 13 * 1);
  EXPECT_FLOAT_EQ(y[209], 0.5f * 13 * -4);
  EXPECT_FLOAT_EQ(y[128 + 96 + 20], 0.0f);
}

// The word-at-a-time unpacking of the kernels gives q3_k_scale's values, minus the bias, for any
// bytes: every 6-bit value reaches every sub-block position.
TEST(Formats, Q3_KScalesUnpackedTogetherMatchOneByOne) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 2000; ++trial) {
    uint8_t sc[12];
    for (uint8_t& b : sc) b = static_cast<uint8_t>(byte(rng));
    int8_t all[16];
    q3_k_scales16(sc, all);
    for (int s = 0; s < 16; ++s) ASSERT_EQ(all[s], q3_k_scale(s, sc) - 32) << "sub-block " << s;
  }
}

// Q2_K: scales[s] holds the 4-bit scale (low nibble) and min (high nibble) of sub-block s; the
// 2-bit quants are placed as Q3_K's low bits.
TEST(Formats, Q2_KHandBuiltBlock) {
  BlockQ2_K b{};
  b.d = float_to_fp16(2.0f);
  b.dmin = float_to_fp16(0.5f);
  b.scales[0] = 0x35;  // sub-block 0: scale 5, min 3
  b.scales[7] = 0x9F;  // sub-block 7 (half 0, pass 3, second 16): scale 15, min 9
  b.qs[0] = 0x02;      // element 0: 2
  b.qs[17] = 0xC0;     // element 3 * 32 + 17 = 113 (sub-block 7): 3
  float y[256];
  ref::dequantize_row(DType::Q2_K, &b, y, 256);
  EXPECT_FLOAT_EQ(y[0], 2.0f * 5 * 2 - 0.5f * 3);
  EXPECT_FLOAT_EQ(y[1], -0.5f * 3);
  EXPECT_FLOAT_EQ(y[113], 2.0f * 15 * 3 - 0.5f * 9);
  EXPECT_FLOAT_EQ(y[128], 0.0f);
}

// Q4_1, Q5_0, Q5_1: nibbles as Q4_0's; the fifth bit of element j is bit j of qh.
TEST(Formats, LegacyHandBuiltBlocks) {
  BlockQ4_1 a{};
  a.d = float_to_fp16(0.5f);
  a.m = float_to_fp16(-2.0f);
  a.qs[1] = 0xA3;  // element 1: 3, element 17: 10
  BlockQ5_0 b{};
  b.d = float_to_fp16(0.25f);
  b.qs[1] = 0xA3;
  b.qh[0] = 0x02;  // bit 1: element 1 gets 16 + 3
  b.qh[2] = 0x02;  // bit 17: element 17 gets 16 + 10
  BlockQ5_1 c{};
  c.d = float_to_fp16(0.5f);
  c.m = float_to_fp16(1.0f);
  c.qs[15] = 0xF0;  // element 15: 0, element 31: 15
  c.qh[3] = 0x80;   // bit 31: element 31 gets 16 + 15
  float y[32];
  ref::dequantize_row(DType::Q4_1, &a, y, 32);
  EXPECT_FLOAT_EQ(y[1], 0.5f * 3 - 2.0f);
  EXPECT_FLOAT_EQ(y[17], 0.5f * 10 - 2.0f);
  EXPECT_FLOAT_EQ(y[0], -2.0f);
  ref::dequantize_row(DType::Q5_0, &b, y, 32);
  EXPECT_FLOAT_EQ(y[1], 0.25f * (19 - 16));
  EXPECT_FLOAT_EQ(y[17], 0.25f * (26 - 16));
  EXPECT_FLOAT_EQ(y[0], 0.25f * -16);
  ref::dequantize_row(DType::Q5_1, &c, y, 32);
  EXPECT_FLOAT_EQ(y[31], 0.5f * 31 + 1.0f);
  EXPECT_FLOAT_EQ(y[15], 1.0f);
}

// IQ4_NL: byte j holds the level indices of elements j (low nibble) and j + 16 (high).
TEST(Formats, IQ4_NLHandBuiltBlock) {
  BlockIQ4_NL b{};
  b.d = float_to_fp16(0.5f);
  b.qs[0] = 0xF0;  // element 0: level 0 (-127), element 16: level 15 (113)
  b.qs[3] = 0x78;  // element 3: level 8 (1), element 19: level 7 (-10)
  float y[32];
  ref::dequantize_row(DType::IQ4_NL, &b, y, 32);
  EXPECT_FLOAT_EQ(y[0], 0.5f * -127);
  EXPECT_FLOAT_EQ(y[16], 0.5f * 113);
  EXPECT_FLOAT_EQ(y[3], 0.5f * 1);
  EXPECT_FLOAT_EQ(y[19], 0.5f * -10);
  EXPECT_FLOAT_EQ(y[1], 0.5f * -127);  // index 0
}

// IQ4_XS: sub-block s's 6-bit scale keeps its low 4 bits in nibble s % 2 of scales_l[s / 2] and
// its high 2 bits in bits 2s..2s+1 of scales_h, biased by 32.
TEST(Formats, IQ4_XSHandBuiltBlock) {
  BlockIQ4_XS b{};
  b.d = float_to_fp16(0.25f);
  b.scales_h = 0xAAAA;                                                  // every high field 0b10: scale 32 + low bits
  b.scales_l[0] = 0x05;                                                 // sub-block 0: 37 -> 5; sub-block 1: 32 -> 0
  b.scales_l[2] = 0x30;                                                 // sub-block 5: 35 -> 3
  b.scales_h = static_cast<uint16_t>(0xAAAA & ~(3 << 14)) | (1 << 14);  // sub-block 7: 0b01'0000 = 16 -> -16
  b.qs[0] = 0x9F;           // sub-block 0, element 0: level 15 (113); element 16: level 9 (13)
  b.qs[16 * 5 + 2] = 0x01;  // sub-block 5, element 2: level 1 (-104); element 18: level 0
  b.qs[16 * 7] = 0x88;      // sub-block 7, elements 0 and 16: level 8 (1)
  float y[256];
  ref::dequantize_row(DType::IQ4_XS, &b, y, 256);
  EXPECT_FLOAT_EQ(y[0], 0.25f * 5 * 113);
  EXPECT_FLOAT_EQ(y[16], 0.25f * 5 * 13);
  EXPECT_FLOAT_EQ(y[32], 0.0f);
  EXPECT_FLOAT_EQ(y[5 * 32 + 2], 0.25f * 3 * -104);
  EXPECT_FLOAT_EQ(y[5 * 32 + 18], 0.25f * 3 * -127);
  EXPECT_FLOAT_EQ(y[7 * 32], 0.25f * -16 * 1);
  EXPECT_FLOAT_EQ(y[7 * 32 + 16], 0.25f * -16 * 1);
}

TEST(Formats, UnsupportedTypesAreNamed) {
  EXPECT_FALSE(dtype_supported(DType::IQ2_XS));
  EXPECT_EQ(supported_dtypes_list(), "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K Q3_K Q2_K IQ4_NL IQ4_XS");
  EXPECT_EQ(dtype_info(17)->name, std::string("IQ2_XS"));
  EXPECT_EQ(dtype_info(31), nullptr);
}

TEST(Matmul, ThreadedMatchesSingleDot) {
  ThreadPool pool(2);
  const int64_t rows = 70, cols = 512, tokens = 5;
  const auto w = random_vec(rows * cols, 21);
  const auto x = random_vec(tokens * cols, 22);
  for (DType t : kTypes) {
    std::vector<uint8_t> q(static_cast<size_t>(rows * dtype_row_bytes(t, cols)));
    for (int64_t r = 0; r < rows; ++r)
      ref::quantize_row(t, w.data() + r * cols, q.data() + r * dtype_row_bytes(t, cols), cols);
    WeightView view{t, q.data(), rows, cols, dtype_row_bytes(t, cols)};
    std::vector<float> y(static_cast<size_t>(tokens * rows));
    MatmulScratch scratch;
    matmul(pool, kernels(), view, x.data(), cols, tokens, y.data(), rows, scratch);
    for (int64_t b = 0; b < tokens; ++b) {
      std::vector<uint8_t> act(static_cast<size_t>(act_row_bytes(t, cols)));
      prepare_act(t, x.data() + b * cols, act.data(), cols);
      const void* a = act.data();
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_NEAR(y[static_cast<size_t>(b * rows + r)], ref::dot(t, view.row(r), a, cols), 1e-3) << dtype_name(t);
    }
  }
}

TEST(Ops, SoftmaxAndRmsNorm) {
  float x[4] = {1, 2, 3, -INFINITY};
  softmax(x, 4);
  const double e = std::exp(1.0), s = e + e * e + e * e * e;
  EXPECT_NEAR(x[0], e / s, 1e-6);
  EXPECT_NEAR(x[2], e * e * e / s, 1e-6);
  EXPECT_EQ(x[3], 0.0f);
  const float v[2] = {3, 4}, w[2] = {1, 2};
  float o[2];
  rms_norm(v, w, o, 2, 0.0f);
  EXPECT_NEAR(o[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(o[1], 8 / std::sqrt(12.5), 1e-6);
}

TEST(Ops, RopeRotatesPairs) {
  // One head of 4 dims, pairs (0,1) and (2,3) in the llama layout, (0,2) and (1,3) in NeoX.
  const float inv[2] = {1.0f, 0.5f};
  float a[4] = {1, 0, 1, 0};
  rope(a, 1, 4, 4, 2, inv, false);
  EXPECT_NEAR(a[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(a[1], std::sin(2.0), 1e-6);
  EXPECT_NEAR(a[2], std::cos(1.0), 1e-6);
  float b[4] = {1, 1, 0, 0};
  rope(b, 1, 4, 4, 2, inv, true);
  EXPECT_NEAR(b[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(b[2], std::sin(2.0), 1e-6);
  EXPECT_NEAR(b[3], std::sin(1.0), 1e-6);
}

}  // namespace
}  // namespace coda

namespace coda {
namespace {

TEST(Kernels, SumAndMaxMatchTheReference) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-50.0f, 50.0f);
  for (int64_t n : {1, 5, 8, 31, 32, 33, 100, 128256}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = u(rng);
    x[static_cast<size_t>(n / 2)] = 60.0f;  // the max somewhere in the middle
    double ref = 0;
    for (float v : x) ref += v;
    for (const KernelTable* t : available_kernels()) {
      EXPECT_EQ(t->max_f32(x.data(), n), 60.0f) << t->name << " n=" << n;
      EXPECT_NEAR(t->sum_f32(x.data(), n), ref, 1e-5 * (std::fabs(ref) + 50.0 * static_cast<double>(n))) << t->name;
    }
  }
  const float inf_case[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (const KernelTable* t : available_kernels()) EXPECT_EQ(t->max_f32(inf_case, 3), -INFINITY);
}

TEST(Kernels, SoftmaxMomentsAndCountAboveMatchTheReference) {
  std::mt19937 rng(13);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (int64_t n : {1, 9, 64, 1000, 128256}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = g(rng);
    x[0] = -INFINITY;
    const float max = scalar_kernels().max_f32(x.data(), n);
    // Independent reference in long double.
    long double z = 0, s1 = 0, s2 = 0;
    int64_t above = 0;
    for (float v : x) {
      above += v > 1.5f;
      const long double d = static_cast<long double>(v) - max;
      if (d < -87) continue;
      const long double w = std::exp(d);
      z += w;
      s1 += w * d;
      s2 += w * d * d;
    }
    for (const KernelTable* t : available_kernels()) {
      const SoftmaxMoments m = t->softmax_moments(x.data(), n, max);
      if (z > 0) {
        EXPECT_NEAR(m.z / static_cast<double>(z), 1.0, 2e-6) << t->name << " n=" << n;
        EXPECT_NEAR(m.s1, static_cast<double>(s1), 2e-6 * (std::fabs(static_cast<double>(s1)) + 1)) << t->name;
        EXPECT_NEAR(m.s2, static_cast<double>(s2), 2e-6 * (std::fabs(static_cast<double>(s2)) + 1)) << t->name;
      }
      EXPECT_EQ(t->count_above(x.data(), n, 1.5f), above) << t->name;
    }
  }
}

// A softmax numerator kernel (exp_sum or exp2_sum) against its function in double: within 3e-7
// per element, exactly 0 below `cutoff` and for -inf, and the sum within 1e-5.
void expect_softmax_numerators(float (*KernelTable::*kernel)(const float*, float*, int64_t, float),
                               double (*want_of)(double), float cutoff, float lowest, uint32_t seed,
                               std::initializer_list<int64_t> lengths, float pin) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lowest, 0.0f);
  for (int64_t n : lengths) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = u(rng);
    x[0] = -INFINITY;  // masked positions get exactly zero
    if (n > 3) x[3] = 0.0f;
    if (n > 5) x[5] = pin;
    for (const KernelTable* t : available_kernels()) {
      std::vector<float> y(static_cast<size_t>(n));
      const float sum = (t->*kernel)(x.data(), y.data(), n, 0.0f);
      double ref_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float xi = x[static_cast<size_t>(i)];
        const double want = xi < cutoff ? 0.0 : want_of(static_cast<double>(xi));
        ref_sum += want;
        if (want == 0) {
          EXPECT_EQ(y[static_cast<size_t>(i)], 0.0f) << t->name << " x=" << xi;
        } else {
          EXPECT_NEAR(y[static_cast<size_t>(i)] / want, 1.0, 3e-7) << t->name << " x=" << xi;
        }
      }
      if (ref_sum > 0) {
        EXPECT_NEAR(sum / ref_sum, 1.0, 1e-5) << t->name << " n=" << n;
      } else {
        EXPECT_EQ(sum, 0.0f) << t->name;
      }
    }
  }
}

TEST(Kernels, ExpSumMatchesStdExp) {
  expect_softmax_numerators(
      &KernelTable::exp_sum, [](double d) { return std::exp(d); }, -87.0f, -100.0f, 5,
      {1, 7, 8, 15, 16, 33, 1000, 128256}, -87.0f);
}

// The SIMD tables share one exp (AVX-512 scales by 2^n with vscalefps where AVX2 builds 2^n's
// bits and multiplies): the softmax weights, and so the logits, do not depend on the CPU's level.
TEST(Kernels, ExpSumGivesTheSameBitsOnEverySimdTable) {
  std::vector<float> x;
  for (float v = -130.0f; v <= 0.0f; v += 0.000731f) x.push_back(v);  // softmax numerators: x - max <= 0
  x.resize(x.size() / 16 * 16);  // (AVX2 takes std::exp for a tail of fewer than 8)
  const auto n = static_cast<int64_t>(x.size());
  for (const bool two : {false, true}) {
    std::vector<float> first;
    const char* first_name = nullptr;
    for (const KernelTable* t : available_kernels()) {
      if (std::string(t->name) == "scalar") continue;  // std::exp: within 3e-7, not the same bits
      std::vector<float> y(x.size());
      (two ? t->exp2_sum : t->exp_sum)(x.data(), y.data(), n, 0.0f);
      if (first_name == nullptr) {
        first = y;
        first_name = t->name;
        continue;
      }
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(i)]),
                  std::bit_cast<uint32_t>(first[static_cast<size_t>(i)]))
            << (two ? "exp2_sum " : "exp_sum ") << t->name << " against " << first_name
            << " at x=" << x[static_cast<size_t>(i)];
    }
  }
}

// The attention softmax in base 2, against std::exp2 in double, down past where it gives 0.
TEST(Kernels, Exp2SumMatchesStdExp2) {
  const std::initializer_list<int64_t> lengths = {1, 7, 8, 15, 16, 33, 1000, 4099};
  expect_softmax_numerators(
      &KernelTable::exp2_sum, [](double d) { return std::exp2(d); }, -126.0f, -140.0f, 6, lengths, -126.0f);
  // A shift moves the whole row: 2^(x - s), the row's maximum at 0.
  for (int64_t n : lengths) {
    std::vector<float> shifted(static_cast<size_t>(n), -3.0f + 37.5f), y(static_cast<size_t>(n));
    shifted[0] = 37.5f;
    for (const KernelTable* t : available_kernels()) {
      t->exp2_sum(shifted.data(), y.data(), n, 37.5f);
      EXPECT_EQ(y[0], 1.0f) << t->name;
      if (n > 1) {
        EXPECT_EQ(y[1], 0.125f) << t->name;
      }
    }
  }
}

// The feed-forward gate against std::exp in double, over the range where silu bends and the
// tails where exp(-a) overflows or vanishes; odd lengths exercise the masked or scalar tails.
TEST(Kernels, SwigluMatchesStdExp) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> u(-30.0f, 30.0f), ub(-2.0f, 2.0f);
  for (int64_t n : {1, 7, 8, 15, 16, 33, 8192}) {
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (auto& v : a) v = u(rng);
    for (auto& v : b) v = ub(rng);
    const float tails[] = {-200.0f, -88.5f, -87.2f, 0.0f, 1e-30f, 87.5f, 88.5f, 200.0f};
    for (size_t i = 0; i < std::size(tails) && i < a.size(); ++i) a[i * a.size() / std::size(tails)] = tails[i];
    for (const KernelTable* t : available_kernels()) {
      std::vector<float> y = a;
      t->swiglu(y.data(), b.data(), n);
      for (size_t i = 0; i < a.size(); ++i) {
        const double x = a[i];
        const double want = x / (1.0 + std::exp(-x)) * b[i];
        if (std::abs(want) < 1e-30) {
          EXPECT_LT(std::abs(y[i]), 1e-30) << t->name << " a=" << a[i];
        } else {
          EXPECT_NEAR(y[i] / want, 1.0, 5e-7) << t->name << " a=" << a[i] << " b=" << b[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace coda

namespace coda {
namespace {

// Keys given as rows (position j at rows + j * stride) in the score kernels' blocked layout
// (key_block_index). The lanes past len in the last block hold `pad` (a NaN): no score may see them.
template <class T>
std::vector<T> key_blocks(const T* rows, int64_t stride, int64_t len, int64_t hd, T pad) {
  const int64_t slots = (len + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  std::vector<T> out(static_cast<size_t>(slots * hd), pad);
  for (int64_t j = 0; j < len; ++j)
    for (int64_t d = 0; d < hd; ++d) out[static_cast<size_t>(key_block_index(j, d, hd))] = rows[j * stride + d];
  return out;
}

// The grouped attention kernels against the scalar reference: head counts of a group, head sizes
// that do and do not fill 32 columns, and lengths around the 8-position blocks. Group sizes 1-7 and 13 take
// every register tile of the AVX-512 values kernel (1-6 heads at a time).
TEST(Kernels, AttentionScoresAndValuesMatchTheReference) {
  const KernelTable& ref_table = scalar_kernels();
  for (int64_t hd : {8, 40, 64, 128})
    for (int64_t G : {1, 2, 3, 4, 5, 6, 7, 13})
      for (int64_t len : {1, 7, 8, 9, 70, 129}) {
        const int64_t kv_stride = 3 * hd;  // rows of a cache with several heads per position
        const auto q = random_vec(G * hd, 1);
        const auto kv = random_vec(len * kv_stride, 2);
        const auto kb = key_blocks(kv.data() + hd, kv_stride, len, hd, std::numeric_limits<float>::quiet_NaN());
        const int64_t s_stride = len + 5;
        std::vector<float> want(static_cast<size_t>(G * s_stride)), got(want.size());
        ref_table.attn_scores(q.data(), G, kb.data(), len, hd, 0.125f, want.data(), s_stride);
        const auto p = random_vec(G * s_stride, 3);
        // The values kernels add to what the output holds (attention visits the cache in chunks).
        const auto before = random_vec(G * hd, 4);
        std::vector<float> want_out = before, got_out(want_out.size());
        ref_table.attn_values(p.data(), G, s_stride, kv.data() + hd, kv_stride, len, hd, want_out.data());
        // Every SIMD table computes each score and each value lane in the same order.
        std::vector<float> first_simd_out, first_simd_scores;
        for (const KernelTable* k : available_kernels()) {
          std::fill(got.begin(), got.end(), 99.0f);
          k->attn_scores(q.data(), G, kb.data(), len, hd, 0.125f, got.data(), s_stride);
          for (int64_t h = 0; h < G; ++h)
            for (int64_t j = len; j < s_stride; ++j) ASSERT_EQ(got[h * s_stride + j], 99.0f) << "wrote past len";
          for (int64_t h = 0; h < G; ++h)
            for (int64_t j = 0; j < len; ++j)
              ASSERT_NEAR(got[h * s_stride + j], want[h * s_stride + j], 1e-5 * std::sqrt(static_cast<double>(hd)))
                  << k->name << " hd=" << hd << " G=" << G << " len=" << len << " h=" << h << " j=" << j;
          got_out = before;
          k->attn_values(p.data(), G, s_stride, kv.data() + hd, kv_stride, len, hd, got_out.data());
          for (size_t i = 0; i < got_out.size(); ++i)
            ASSERT_NEAR(got_out[i], want_out[i], 1e-5 * std::sqrt(static_cast<double>(len)))
                << k->name << " hd=" << hd << " G=" << G << " len=" << len << " i=" << i;
          if (k == &scalar_kernels() || hd % 8 != 0) continue;
          if (first_simd_out.empty()) {
            first_simd_out = got_out;
            first_simd_scores = got;
          } else {
            ASSERT_EQ(got_out, first_simd_out) << k->name << " hd=" << hd << " G=" << G << " len=" << len;
            ASSERT_EQ(got, first_simd_scores) << k->name << " hd=" << hd << " G=" << G << " len=" << len;
          }
        }
      }
}

// The Q8_0 cache (KvType::Q8_0): keys and values quantized by quantize_kv_row_q8, keys laid out in
// blocks by the layout kernels.h defines, queries quantized as ActRowQ8 rows. Expected values
// come from the dequantized numbers in double: every table must match them to float precision
// (the integer dot products are exact; only the scaling rounds). Lanes past len hold 0xFF bytes,
// whose half-float scale is a NaN: no score may see them.
//
// Values weigh in 16-bit integers (kernels.h, kQ8ValueRun): every table must give the scalar
// table's bits exactly, and each output must lie within half a weight step per position of the
// dequantized reference (plus float rounding), the step being a * s / 32,767 of its run and block.
TEST(Kernels, Q8AttentionMatchesTheDequantizedReference) {
  for (int64_t hd : {32, 64, 128, 1056})  // 1,056: 33 blocks, past any fixed-size scratch
    for (int64_t G : {1, 4, 7, 13, 32})
      for (int64_t len : {1, 9, 16, 17, 70, 129, 300}) {
        const int64_t row = hd + hd / 32 * 2, qa_stride = act_row_bytes(ActFormat::Q8_32, hd);
        const auto q = random_vec(G * hd, 21);
        const auto kf = random_vec(len * hd, 22), vf = random_vec(len * hd, 23);
        std::vector<uint8_t> qa(static_cast<size_t>(G * qa_stride)), vrows(static_cast<size_t>(len * row));
        for (int64_t h = 0; h < G; ++h) prepare_act(ActFormat::Q8_32, q.data() + h * hd, qa.data() + h * qa_stride, hd);
        const int64_t blocks = (len + kKeyBlock - 1) / kKeyBlock;
        std::vector<uint8_t> kb(static_cast<size_t>(blocks * q8_key_block_bytes(hd)), 0xFF);
        std::vector<double> kd(static_cast<size_t>(len * hd)), vd(kd.size());  // dequantized
        std::vector<uint8_t> krow(static_cast<size_t>(row));
        // Values in pairs, scales block-major (`stride` positions apart); bytes nobody wrote hold 0xAB
        // (the partner of an odd len's last position is cleared by the store, as the cache does).
        const int64_t stride = len + 5;
        std::vector<uint8_t> vpairs(static_cast<size_t>((len + 1) / 2 * 2 * hd), 0xAB);
        std::vector<uint16_t> vscales(static_cast<size_t>(hd / 32 * stride), 0xABAB);
        for (int64_t j = 0; j < len; ++j) {
          quantize_kv_row_q8(kf.data() + j * hd, krow.data(), hd);
          quantize_kv_row_q8(vf.data() + j * hd, vrows.data() + j * row, hd);
          store_q8_value_row(vrows.data() + j * row, vpairs.data(), vscales.data(), stride, j, hd);
          uint8_t* blk = kb.data() + j / kKeyBlock * q8_key_block_bytes(hd);
          for (int64_t d = 0; d < hd; ++d) {
            blk[q8_key_value_offset(j, d)] = static_cast<uint8_t>(static_cast<int8_t>(krow[d]) + 128);
            uint16_t ks, vs;
            std::memcpy(&ks, krow.data() + hd + d / 32 * 2, 2);
            std::memcpy(&vs, vrows.data() + j * row + hd + d / 32 * 2, 2);
            kd[j * hd + d] = static_cast<int8_t>(krow[d]) * static_cast<double>(fp16_to_float(ks));
            vd[j * hd + d] = static_cast<int8_t>(vrows[j * row + d]) * static_cast<double>(fp16_to_float(vs));
            // Q8_0 rounding: within half a step of the float, plus 127 times the half-float
            // rounding of the step (2^-11 relative) that the stored scale carries.
            ASSERT_NEAR(kd[j * hd + d], kf[j * hd + d], fp16_to_float(ks) * (0.5 + 127.0 / 2048) + 1e-7);
          }
          for (int64_t b = 0; b < hd / 32; ++b)
            std::memcpy(blk + q8_key_scale_offset(j, b, hd), krow.data() + hd + b * 2, 2);
        }
        const int64_t s_stride = len + 3;
        std::vector<double> want(static_cast<size_t>(G * len));
        double want_max = 0;
        for (int64_t h = 0; h < G; ++h) {
          const ActRowQ8 a(qa.data() + h * qa_stride, hd);
          for (int64_t j = 0; j < len; ++j) {
            double acc = 0;
            for (int64_t d = 0; d < hd; ++d) acc += a.q[d] * static_cast<double>(a.d[d / 32]) * kd[j * hd + d];
            want[h * len + j] = acc * 0.125;
            want_max = std::max(want_max, std::fabs(acc * 0.125));
          }
        }
        const auto p = random_vec(G * s_stride, 24);
        const auto before = random_vec(G * hd, 25);
        std::vector<double> want_out(before.begin(), before.end()), slack(want_out.size(), 0.0);
        for (int64_t h = 0; h < G; ++h)
          for (int64_t i = 0; i < hd; ++i)
            for (int64_t j = 0; j < len; ++j) want_out[h * hd + i] += p[h * s_stride + j] * vd[j * hd + i];
        // Half a step per weight: a * s / 32,767 per run and block, times the 8-bit value it weighs.
        for (int64_t h = 0; h < G; ++h)
          for (int64_t r0 = 0; r0 < len; r0 += kQ8ValueRun) {
            const int64_t r1 = std::min(len, r0 + kQ8ValueRun);
            double a = 0;
            for (int64_t j = r0; j < r1; ++j) a = std::max(a, std::fabs(static_cast<double>(p[h * s_stride + j])));
            for (int64_t i = 0; i < hd; ++i) {
              double s = 0, q_sum = 0;
              for (int64_t j = r0; j < r1; ++j) {
                uint16_t vs;
                std::memcpy(&vs, vrows.data() + j * row + hd + i / 32 * 2, 2);
                s = std::max(s, std::fabs(static_cast<double>(fp16_to_float(vs))));
                q_sum += std::abs(static_cast<int8_t>(vrows[j * row + i]));
              }
              slack[h * hd + i] += a * s / 32767 * (0.5 * q_sum + 1);
            }
          }
        std::vector<float> scalar_out;
        for (const KernelTable* k : available_kernels()) {
          std::vector<float> got(static_cast<size_t>(G * s_stride), 99.0f);
          k->attn_scores_q8(qa.data(), qa_stride, G, kb.data(), len, hd, 0.125f, got.data(), s_stride);
          for (int64_t h = 0; h < G; ++h) {
            for (int64_t j = 0; j < len; ++j)
              ASSERT_NEAR(got[h * s_stride + j], want[h * len + j], 1e-6 * want_max + 1e-7)
                  << k->name << " hd=" << hd << " G=" << G << " len=" << len << " h=" << h << " j=" << j;
            for (int64_t j = len; j < s_stride; ++j) ASSERT_EQ(got[h * s_stride + j], 99.0f) << "wrote past len";
          }
          std::vector<float> out = before;
          k->attn_values_q8(p.data(), G, s_stride, vpairs.data(), vscales.data(), stride, len, hd, out.data());
          for (size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], want_out[i], slack[i] + 1e-6 * (1 + std::fabs(want_out[i])))
                << k->name << " hd=" << hd << " G=" << G << " len=" << len << " i=" << i;
          if (scalar_out.empty())
            scalar_out = out;  // available_kernels() lists the scalar table first
          else
            ASSERT_EQ(0, std::memcmp(out.data(), scalar_out.data(), out.size() * sizeof(float)))
                << k->name << " differs from the scalar table's bits: hd=" << hd << " G=" << G << " len=" << len;
        }
      }
}

// A head's values over a Q8_0 cache depend only on its own weights and the positions up to its last
// nonzero weight: the same bits in a group of 7 heads over 300 positions as alone over just its
// own positions, with whatever (even NaN scales) the cache holds past them. This is what lets a
// prefix-cache hit, which recomputes one row alone, reproduce a cold run's prefill bit for bit.
TEST(Kernels, Q8ValuesOfAHeadDependOnlyOnItsOwnWeights) {
  const int64_t hd = 64, G = 7, len = 300, row = hd + hd / 32 * 2;
  const auto vf = random_vec(len * hd, 41), junk = random_vec(len * hd, 42);
  std::vector<uint8_t> qrow(static_cast<size_t>(row)), vpairs(static_cast<size_t>(len * hd));
  std::vector<uint16_t> vscales(static_cast<size_t>(hd / 32 * len));
  for (int64_t j = 0; j < len; ++j) {
    quantize_kv_row_q8(vf.data() + j * hd, qrow.data(), hd);
    store_q8_value_row(qrow.data(), vpairs.data(), vscales.data(), len, j, hd);
  }
  std::vector<float> p(static_cast<size_t>(G * len), 0.0f);
  std::vector<int64_t> own(G);
  for (int64_t h = 0; h < G; ++h) {
    own[h] = 3 + 45 * h;  // heads end in the first run, the second, and at its edge
    const auto w = random_vec(len, 43 + h);
    for (int64_t j = 0; j <= own[h]; ++j) p[h * len + j] = std::fabs(w[j]) + 0.01f;
  }
  for (const KernelTable* k : available_kernels()) {
    std::vector<float> group(static_cast<size_t>(G * hd), 0.5f);
    k->attn_values_q8(p.data(), G, len, vpairs.data(), vscales.data(), len, len, hd, group.data());
    for (int64_t h = 0; h < G; ++h) {
      std::vector<uint8_t> alone = vpairs;  // past the head's own position: other values, NaN scales
      std::vector<uint16_t> alone_scales = vscales;
      for (int64_t j = own[h] + 1; j < len; ++j) {
        quantize_kv_row_q8(junk.data() + j * hd, qrow.data(), hd);
        store_q8_value_row(qrow.data(), alone.data(), alone_scales.data(), len, j, hd);
        for (int64_t b = 0; b < hd / 32; ++b) alone_scales[b * len + j] = 0x7E00;  // a NaN
      }
      std::vector<float> one(static_cast<size_t>(hd), 0.5f);
      k->attn_values_q8(p.data() + h * len, 1, len, alone.data(), alone_scales.data(), len, own[h] + 1, hd, one.data());
      EXPECT_EQ(0, std::memcmp(one.data(), group.data() + h * hd, hd * sizeof(float))) << k->name << " head " << h;
      bool finite = true;
      for (float x : one) finite = finite && std::isfinite(x);
      EXPECT_TRUE(finite) << k->name << " head " << h;
    }
  }
}

// Values over a BF16 cache (KvType::BF16, pairs of positions interleaved; the partner of an odd
// len's last position holds 0, as the cache writes it): every table against the definition in
// double, with the weights rounded to bfloat16. Heads of 64 and 128 take the vdpbf16ps kernel
// where the CPU has AVX512_BF16; 32 its fallback. Lengths past 256 cross its runs of weights.
TEST(Kernels, Bf16ValuesMatchTheDefinition) {
  for (int64_t hd : {32, 64, 128})
    for (int64_t G : {1, 4, 7, 13, 64})
      for (int64_t len : {1, 2, 9, 70, 257, 300}) {
        const auto vf = random_vec(len * hd, 31);
        std::vector<uint16_t> v(static_cast<size_t>((len + 1) / 2 * 2 * hd), 0);
        for (int64_t j = 0; j < len; ++j)
          for (int64_t d = 0; d < hd; ++d) v[bf16_value_index(j, d, hd)] = float_to_bf16(vf[j * hd + d]);
        const int64_t s_stride = len + 3;
        const auto p = random_vec(G * s_stride, 32);
        const auto before = random_vec(G * hd, 33);
        std::vector<double> want(before.begin(), before.end());
        for (int64_t h = 0; h < G; ++h)
          for (int64_t i = 0; i < hd; ++i)
            for (int64_t j = 0; j < len; ++j)
              want[h * hd + i] += static_cast<double>(bf16_to_float(float_to_bf16(p[h * s_stride + j]))) *
                                  bf16_to_float(float_to_bf16(vf[j * hd + i]));
        for (const KernelTable* k : available_kernels()) {
          std::vector<float> out = before;
          k->attn_values_bf16(p.data(), G, s_stride, v.data(), len, hd, out.data());
          for (size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], want[i], 1e-5 * std::sqrt(static_cast<double>(len)))
                << k->name << " hd=" << hd << " G=" << G << " len=" << len << " i=" << i;
        }
      }
}

// The same kernels over half-float rows (the KV cache's default F16 type). The scalar F16 kernels
// must equal the scalar float kernels run on the widened rows (widening is exact); every SIMD table
// must match the scalar F16 kernels.
TEST(Kernels, HalfFloatAttentionMatchesTheWidenedReference) {
  const KernelTable& ref_table = scalar_kernels();
  for (int64_t hd : {8, 64, 128})
    for (int64_t G : {1, 4, 7, 13, 32})
      for (int64_t len : {1, 9, 70, 129}) {
        const int64_t kv_stride = 2 * hd;
        const auto q = random_vec(G * hd, 11);
        const auto kv = random_vec(len * kv_stride, 12);
        std::vector<uint16_t> kv16(kv.size());
        std::vector<float> widened(kv.size());
        for (size_t i = 0; i < kv.size(); ++i) {
          kv16[i] = float_to_fp16(kv[i]);
          widened[i] = fp16_to_float(kv16[i]);
        }
        const auto kb = key_blocks(widened.data() + hd, kv_stride, len, hd, std::numeric_limits<float>::quiet_NaN());
        const auto kb16 = key_blocks(kv16.data() + hd, kv_stride, len, hd, uint16_t{0x7E00});  // a half NaN
        const int64_t s_stride = len + 3;
        std::vector<float> want(static_cast<size_t>(G * s_stride)), got(want.size());
        ref_table.attn_scores(q.data(), G, kb.data(), len, hd, 0.125f, want.data(), s_stride);
        ref_table.attn_scores_f16(q.data(), G, kb16.data(), len, hd, 0.125f, got.data(), s_stride);
        for (int64_t h = 0; h < G; ++h)
          for (int64_t j = 0; j < len; ++j) ASSERT_EQ(got[h * s_stride + j], want[h * s_stride + j]);
        const auto p = random_vec(G * s_stride, 13);
        const auto before = random_vec(G * hd, 14);
        std::vector<float> want_out = before, got_out = before;
        ref_table.attn_values(p.data(), G, s_stride, widened.data() + hd, kv_stride, len, hd, want_out.data());
        ref_table.attn_values_f16(p.data(), G, s_stride, kv16.data() + hd, kv_stride, len, hd, got_out.data());
        ASSERT_EQ(got_out, want_out);
        std::vector<float> first_simd_out;  // every SIMD table sums each value lane in the same order
        for (const KernelTable* k : available_kernels()) {
          k->attn_scores_f16(q.data(), G, kb16.data(), len, hd, 0.125f, got.data(), s_stride);
          for (int64_t h = 0; h < G; ++h)
            for (int64_t j = 0; j < len; ++j)
              ASSERT_NEAR(got[h * s_stride + j], want[h * s_stride + j], 1e-5 * std::sqrt(static_cast<double>(hd)))
                  << k->name << " hd=" << hd << " G=" << G << " len=" << len;
          got_out = before;
          k->attn_values_f16(p.data(), G, s_stride, kv16.data() + hd, kv_stride, len, hd, got_out.data());
          for (size_t i = 0; i < got_out.size(); ++i)
            ASSERT_NEAR(got_out[i], want_out[i], 1e-5 * std::sqrt(static_cast<double>(len)))
                << k->name << " hd=" << hd << " G=" << G << " len=" << len << " i=" << i;
          if (k == &scalar_kernels() || hd % 8 != 0) continue;
          if (first_simd_out.empty())
            first_simd_out = got_out;
          else
            ASSERT_EQ(got_out, first_simd_out) << k->name << " hd=" << hd << " G=" << G << " len=" << len;
        }
      }
}

// Rounding to half floats: every table gives the scalar reference's bits (round to nearest, ties to
// even), on ordinary values and on the edges: ties, subnormals, overflow, infinities and NaN.
TEST(Kernels, HalfFloatRoundingMatchesTheReferenceBitForBit) {
  std::vector<float> x = random_vec(1000, 21, 3.0f);
  const float edges[] = {0.0f,
                         -0.0f,
                         1.0f + 1.0f / 2048,
                         1.0f + 3.0f / 2048,
                         65504.0f,
                         65519.0f,
                         65520.0f,
                         1e6f,
                         -1e6f,
                         6e-8f,
                         3e-8f,
                         2.9e-8f,
                         1e-5f,
                         -6.1e-5f,
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
  x.insert(x.end(), std::begin(edges), std::end(edges));
  for (int i = 0; i < 200; ++i) x.push_back(std::ldexp(1.0f + static_cast<float>(i) / 4096.0f, -20 + i % 40));
  std::vector<uint16_t> want(x.size()), got(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = float_to_fp16(x[i]);
  for (const KernelTable* k : available_kernels())
    for (int64_t n : {static_cast<int64_t>(x.size()), int64_t{5}, int64_t{13}}) {
      std::fill(got.begin(), got.end(), uint16_t{0xDEAD});
      k->f32_to_f16(x.data(), got.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(x[static_cast<size_t>(i)])) {
          EXPECT_EQ(got[static_cast<size_t>(i)] & 0x7c00, 0x7c00) << k->name;  // a NaN stays a NaN
          EXPECT_NE(got[static_cast<size_t>(i)] & 0x3ff, 0) << k->name;
        } else {
          ASSERT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)])
              << k->name << " x=" << x[static_cast<size_t>(i)];
        }
      }
      if (n < static_cast<int64_t>(x.size())) {
        EXPECT_EQ(got[static_cast<size_t>(n)], 0xDEAD) << k->name;
      }
    }
}

}  // namespace
}  // namespace coda
