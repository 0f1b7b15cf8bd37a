// Packed weights (kernels/repack.h): the layout round-trips to the original blocks byte for byte,
// and every GEMM kernel agrees with the scalar reference, for every token count of a tile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/repack.h"
#include "random_data.h"

namespace coda {
namespace {

const DType kPacked[] = {DType::Q8_0, DType::Q4_0, DType::Q4_K,   DType::Q5_K, DType::Q6_K, DType::Q3_K,
                         DType::Q2_K, DType::Q5_0, DType::IQ4_XS, DType::F16,  DType::BF16};

// `rows` rows quantized from Gaussian values whose spread changes from row to row, so the scales
// (and the Q4_K sub-block scales and mins) differ between the lanes of a group.
std::vector<uint8_t> quantized_rows(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const int64_t rb = dtype_row_bytes(t, cols);
  std::vector<uint8_t> q(static_cast<size_t>(rows * rb));
  for (int64_t r = 0; r < rows; ++r) {
    auto x = random_vec(cols, seed + static_cast<uint32_t>(r), 0.5f + 0.1f * static_cast<float>(r % 7));
    for (int64_t i = 0; i < cols; ++i) x[i] += 0.3f * static_cast<float>((i / 32) % 3);  // uneven sub-blocks
    ref::quantize_row(t, x.data(), q.data() + r * rb, cols);
  }
  return q;
}

// Error scale of a float dot product: sum |w_i x_i| bounds the rounding of any summation order
// (sums of thousands of products cancel, so the result itself is no scale).
float product_magnitude(DType t, const uint8_t* row, const float* x, int64_t cols) {
  std::vector<float> w(static_cast<size_t>(cols));
  ref::dequantize_row(t, row, w.data(), cols);
  double m = 0;
  for (int64_t i = 0; i < cols; ++i) m += std::fabs(w[i] * x[i]);
  return static_cast<float>(m);
}

class Packed : public ::testing::TestWithParam<DType> {};

// Any bytes are a valid block as far as the layout goes, so random bytes exercise every bit of the
// scales fields (Q4_K's 6-bit scales and mins included), not just what a quantizer writes.
// Whether table k's GEMM for t rounds the activations to bfloat16 first (AVX512_BF16's BF16 GEMM).
bool rounds_activations(const KernelTable& k, DType t) {
  return t == DType::BF16 && k.gemm_bf16_rounds_activations;
}

// The activations as such a GEMM sees them: each float rounded to bfloat16 and widened back.
std::vector<float> bf16_rounded(std::vector<float> x) {
  for (float& v : x) v = bf16_to_float(bf16_round_flush(v));
  return x;
}

TEST_P(Packed, RoundTripsToTheOriginalBlocks) {
  const DType t = GetParam();
  for (int64_t cols : {256, 512, 2048}) {
    const int64_t rb = dtype_row_bytes(t, cols);
    std::mt19937 rng(static_cast<uint32_t>(cols));
    std::vector<uint8_t> rows(static_cast<size_t>(kPackRows * rb));
    for (auto& b : rows) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> group(static_cast<size_t>(packed_group_bytes(t, cols)));
    repack_group(t, rows.data(), cols, group.data());
    std::vector<uint8_t> back(static_cast<size_t>(rb));
    for (int r = 0; r < kPackRows; ++r) {
      unpack_row(t, group.data(), cols, r, back.data());
      ASSERT_EQ(0, std::memcmp(back.data(), rows.data() + r * rb, static_cast<size_t>(rb)))
          << dtype_name(t) << " cols=" << cols << " row " << r;
    }
  }
}

// The scalar reference itself against ref::dot on the original rows (for Q4_0 it reads the
// activations in natural order, which ref::dot on Q4_0 does not: compare through dequantized sums).
TEST_P(Packed, ReferenceGemmIsTheDotOfTheOriginalRows) {
  const DType t = GetParam();
  const int64_t cols = 512;
  const auto q = quantized_rows(t, kPackRows, cols, 3);
  std::vector<uint8_t> group(static_cast<size_t>(packed_group_bytes(t, cols)));
  repack_group(t, q.data(), cols, group.data());
  const ActFormat at = packed_act_format(t);
  const auto x = random_vec(cols, 9);
  std::vector<uint8_t> act(static_cast<size_t>(act_row_bytes(at, cols)));
  prepare_act(at, x.data(), act.data(), cols);
  // The activation values the kernels see, dequantized.
  std::vector<float> xa(static_cast<size_t>(cols));
  if (at == ActFormat::F32) {  // F16 and BF16 take the floats as they are
    xa = x;
  } else if (at == ActFormat::Q8_32_BLOCKED) {
    const auto* a = reinterpret_cast<const ActBlockQ8*>(act.data());
    for (int64_t i = 0; i < cols; ++i) xa[i] = a[i / kQK].d * a[i / kQK].q[i % kQK];
  } else {
    const auto* a = reinterpret_cast<const ActBlockK*>(act.data());
    for (int64_t i = 0; i < cols; ++i) xa[i] = a[i / kQKK].d * a[i / kQKK].q[i % kQKK];
  }
  float y[kPackRows];
  ref::gemm_packed(t, group.data(), cols, act.data(), 0, 1, y, 0);
  std::vector<float> w(static_cast<size_t>(cols));
  for (int r = 0; r < kPackRows; ++r) {
    ref::dequantize_row(t, q.data() + r * dtype_row_bytes(t, cols), w.data(), cols);
    double want = 0;
    for (int64_t i = 0; i < cols; ++i) want += static_cast<double>(w[i]) * xa[i];
    EXPECT_NEAR(y[r], want, 1e-4 * (1 + std::fabs(want))) << dtype_name(t) << " row " << r;
  }
}

// Every table with a GEMM for the type, for token counts that fill whole tiles of 8, leave every
// remainder, and the single token of decode.
TEST_P(Packed, GemmMatchesTheReference) {
  const DType t = GetParam();
  for (int64_t cols : {256, 2048}) {
    const auto q = quantized_rows(t, kPackRows, cols, static_cast<uint32_t>(cols));
    std::vector<uint8_t> group(static_cast<size_t>(packed_group_bytes(t, cols)));
    repack_group(t, q.data(), cols, group.data());
    const ActFormat at = packed_act_format(t);
    const int64_t stride = act_row_bytes(at, cols);
    const int64_t max_tokens = 19;
    std::vector<uint8_t> acts(static_cast<size_t>(max_tokens * stride)), rounded_acts(acts.size());
    // The activations of a table that rounds them to bfloat16 (ActFormat::BF16).
    const int64_t bf16_stride = act_row_bytes(ActFormat::BF16, cols);
    std::vector<uint8_t> bf16_acts(static_cast<size_t>(max_tokens * bf16_stride));
    std::vector<float> mags(static_cast<size_t>(max_tokens * kPackRows));
    for (int64_t b = 0; b < max_tokens; ++b) {
      const auto x = random_vec(cols, 100 + static_cast<uint32_t>(b), 1.0f + 0.25f * static_cast<float>(b % 5));
      prepare_act(at, x.data(), acts.data() + b * stride, cols);
      if (at == ActFormat::F32) prepare_act(at, bf16_rounded(x).data(), rounded_acts.data() + b * stride, cols);
      if (t == DType::BF16) prepare_act(ActFormat::BF16, x.data(), bf16_acts.data() + b * bf16_stride, cols);
      for (int r = 0; r < kPackRows; ++r)
        mags[b * kPackRows + r] = product_magnitude(t, q.data() + r * dtype_row_bytes(t, cols), x.data(), cols);
    }
    std::vector<float> want_plain(static_cast<size_t>(max_tokens * kPackRows)), want_rounded(want_plain.size());
    ref::gemm_packed(t, group.data(), cols, acts.data(), stride, max_tokens, want_plain.data(), kPackRows);
    ref::gemm_packed(t, group.data(), cols, rounded_acts.data(), stride, max_tokens, want_rounded.data(), kPackRows);
    int tables = 0;
    for (const KernelTable* k : available_kernels()) {
      const GemmFn gemm = k->gemm[static_cast<int>(t)];
      if (gemm == nullptr) continue;
      ++tables;
      const std::vector<float>& want = rounds_activations(*k, t) ? want_rounded : want_plain;
      const uint8_t* a = rounds_activations(*k, t) ? bf16_acts.data() : acts.data();
      const int64_t as = rounds_activations(*k, t) ? bf16_stride : stride;
      for (int64_t n : {1, 2, 3, 7, 8, 9, 16, 19}) {
        // A y stride wider than 16 with a guard value after each row block: nothing else is written.
        const int64_t ys = kPackRows + 3;
        std::vector<float> y(static_cast<size_t>(n * ys), -7.0f);
        gemm(group.data(), cols, a, as, n, y.data(), ys);
        for (int64_t b = 0; b < n; ++b) {
          for (int r = 0; r < kPackRows; ++r)
            ASSERT_NEAR(y[b * ys + r], want[b * kPackRows + r], 2e-6 * mags[b * kPackRows + r] + 1e-6)
                << k->name << " " << dtype_name(t) << " cols=" << cols << " n=" << n << " token " << b << " row " << r;
          for (int r = kPackRows; r < ys; ++r) ASSERT_EQ(y[b * ys + r], -7.0f);
        }
      }
    }
    if (tables == 0) GTEST_LOG_(INFO) << "no kernel table on this CPU has a GEMM for " << dtype_name(t);
  }
}

// The paired-group kernels (two adjacent groups, 32 rows) against the reference on each group.
TEST_P(Packed, PairedGemmMatchesTheReference) {
  const DType t = GetParam();
  for (int64_t cols : {256, 2048}) {
    const int64_t rb = dtype_row_bytes(t, cols), gb = packed_group_bytes(t, cols);
    const auto q = quantized_rows(t, 2 * kPackRows, cols, 77 + static_cast<uint32_t>(cols));
    std::vector<uint8_t> groups(static_cast<size_t>(2 * gb));
    repack_group(t, q.data(), cols, groups.data());
    repack_group(t, q.data() + kPackRows * rb, cols, groups.data() + gb);
    const ActFormat at = packed_act_format(t);
    const int64_t stride = act_row_bytes(at, cols);
    const int64_t max_tokens = 11;
    std::vector<uint8_t> acts(static_cast<size_t>(max_tokens * stride)), rounded_acts(acts.size());
    const int64_t bf16_stride = act_row_bytes(ActFormat::BF16, cols);
    std::vector<uint8_t> bf16_acts(static_cast<size_t>(max_tokens * bf16_stride));
    // The float types' 2,048-product sums cancel: their error scale is product_magnitude.
    std::vector<float> mags(static_cast<size_t>(max_tokens * 2 * kPackRows), 0.0f);
    for (int64_t b = 0; b < max_tokens; ++b) {
      const auto x = random_vec(cols, 300 + static_cast<uint32_t>(b), 1.0f + 0.5f * static_cast<float>(b % 3));
      prepare_act(at, x.data(), acts.data() + b * stride, cols);
      if (at == ActFormat::F32) prepare_act(at, bf16_rounded(x).data(), rounded_acts.data() + b * stride, cols);
      if (t == DType::BF16) prepare_act(ActFormat::BF16, x.data(), bf16_acts.data() + b * bf16_stride, cols);
      for (int r = 0; r < 2 * kPackRows && is_half_type(t); ++r)
        mags[b * 2 * kPackRows + r] = product_magnitude(t, q.data() + r * rb, x.data(), cols);
    }
    std::vector<float> want_plain(static_cast<size_t>(max_tokens * 2 * kPackRows)), want_rounded(want_plain.size());
    for (int h = 0; h < 2; ++h) {
      ref::gemm_packed(t, groups.data() + h * gb, cols, acts.data(), stride, max_tokens,
                       want_plain.data() + h * kPackRows, 2 * kPackRows);
      ref::gemm_packed(t, groups.data() + h * gb, cols, rounded_acts.data(), stride, max_tokens,
                       want_rounded.data() + h * kPackRows, 2 * kPackRows);
    }
    for (const KernelTable* k : available_kernels()) {
      const GemmFn gemm2 = k->gemm2[static_cast<int>(t)];
      if (gemm2 == nullptr) continue;
      const std::vector<float>& want = rounds_activations(*k, t) ? want_rounded : want_plain;
      const uint8_t* a = rounds_activations(*k, t) ? bf16_acts.data() : acts.data();
      const int64_t as = rounds_activations(*k, t) ? bf16_stride : stride;
      for (int64_t n : {1, 3, 4, 5, 8, 11}) {
        const int64_t ys = 2 * kPackRows + 1;
        std::vector<float> y(static_cast<size_t>(n * ys), -7.0f);
        gemm2(groups.data(), cols, a, as, n, y.data(), ys);
        for (int64_t b = 0; b < n; ++b) {
          for (int r = 0; r < 2 * kPackRows; ++r) {
            const float v = want[b * 2 * kPackRows + r];
            ASSERT_NEAR(y[b * ys + r], v, 1e-5f * (1 + std::fabs(v)) + 2e-6f * mags[b * 2 * kPackRows + r])
                << k->name << " " << dtype_name(t) << " cols=" << cols << " n=" << n << " token " << b << " row " << r;
          }
          ASSERT_EQ(y[b * ys + 2 * kPackRows], -7.0f);
        }
      }
    }
  }
}

// Through matmul(): a packed weight gives what the same weight unpacked gives, threaded, with
// several matrices in one call (packed and unpacked mixed), and embedding rows read back.
TEST_P(Packed, MatmulOnPackedWeightsMatchesUnpacked) {
  const DType t = GetParam();
  const KernelTable& k = kernels();
  const int64_t rows = 96, cols = 512, tokens = 11;
  const auto q = quantized_rows(t, rows, cols, 77);
  const WeightView view{t, q.data(), rows, cols, dtype_row_bytes(t, cols)};
  if (!packable(k, view)) GTEST_SKIP() << "this CPU's kernels (" << k.name << ") do not repack " << dtype_name(t);
  std::vector<uint8_t> buf(static_cast<size_t>(packed_bytes(view)));
  const WeightView packed = repack_weight(view, buf.data());
  ASSERT_TRUE(packed.packed);
  EXPECT_FALSE(packable(k, packed));
  EXPECT_FALSE(packable(k, WeightView{t, q.data(), 40, cols, dtype_row_bytes(t, cols)}));  // not whole groups

  // A GEMM that rounds activations to bfloat16 is held to the unpacked rows on rounded inputs.
  const auto x = rounds_activations(k, t) ? bf16_rounded(random_vec(tokens * cols, 5)) : random_vec(tokens * cols, 5);
  ThreadPool pool(2);
  MatmulScratch scratch;
  std::vector<float> y_plain(static_cast<size_t>(tokens * rows * 2)), y_packed(y_plain.size());
  matmul_multi(pool, k, {{&view, y_plain.data(), 2 * rows}, {&view, y_plain.data() + rows, 2 * rows}}, x.data(), cols,
               tokens, scratch);
  matmul_multi(pool, k, {{&packed, y_packed.data(), 2 * rows}, {&view, y_packed.data() + rows, 2 * rows}}, x.data(),
               cols, tokens, scratch);
  for (size_t i = 0; i < y_plain.size(); ++i)
    ASSERT_NEAR(y_packed[i], y_plain[i], 1e-4 * (1 + std::fabs(y_plain[i]))) << dtype_name(t) << " at " << i;

  std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
  for (int64_t r : {0, 15, 16, 57, 95}) {
    dequantize_weight_row(view, r, a.data());
    dequantize_weight_row(packed, r, b.data());
    ASSERT_EQ(a, b) << "row " << r;
  }
}

// F16 and BF16 tiles sum each row in column order with one chain of multiply-adds (repack.h), so
// every table gives the bits of that chain in scalar code (std::fma), for any number of tokens in
// the call: a token's result does not depend on the tokens beside it, in one group or two.
TEST(PackedHalf, EveryTileIsOneFmaChainInColumnOrder) {
  for (const DType t : {DType::F16, DType::BF16}) {
    const int64_t cols = 200;  // not a multiple of any vector width
    const int64_t rb = dtype_row_bytes(t, cols), gb = packed_group_bytes(t, cols);
    const auto q = quantized_rows(t, 2 * kPackRows, cols, 11);
    std::vector<uint8_t> groups(static_cast<size_t>(2 * gb));
    repack_group(t, q.data(), cols, groups.data());
    repack_group(t, q.data() + kPackRows * rb, cols, groups.data() + gb);
    const int64_t max_tokens = 13;
    const auto x = random_vec(max_tokens * cols, 21, 2.0f);
    std::vector<float> want(static_cast<size_t>(max_tokens * 2 * kPackRows));
    std::vector<float> w(static_cast<size_t>(cols));
    for (int r = 0; r < 2 * kPackRows; ++r) {
      ref::dequantize_row(t, q.data() + r * rb, w.data(), cols);
      for (int64_t b = 0; b < max_tokens; ++b) {
        float acc = 0;
        for (int64_t c = 0; c < cols; ++c) acc = std::fma(w[c], x[b * cols + c], acc);
        want[b * 2 * kPackRows + r] = acc;
      }
    }
    const int64_t stride = cols * static_cast<int64_t>(sizeof(float));
    const auto* act = reinterpret_cast<const uint8_t*>(x.data());
    int tables = 0;
    for (const KernelTable* k : available_kernels()) {
      const GemmFn gemm = k->gemm[static_cast<int>(t)];
      if (gemm == nullptr || rounds_activations(*k, t)) continue;  // PackedBf16 below
      ++tables;
      for (int64_t n : {1, 2, 5, 6, 7, 8, 9, 13}) {
        std::vector<float> y(static_cast<size_t>(n * 2 * kPackRows), -7.0f);
        for (int h = 0; h < 2; ++h)
          gemm(groups.data() + h * gb, cols, act, stride, n, y.data() + h * kPackRows, 2 * kPackRows);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], want[i]) << k->name << " " << dtype_name(t) << " n=" << n << " at " << i;
        const GemmFn gemm2 = k->gemm2[static_cast<int>(t)];
        if (gemm2 == nullptr) continue;
        std::fill(y.begin(), y.end(), -7.0f);
        gemm2(groups.data(), cols, act, stride, n, y.data(), 2 * kPackRows);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], want[i]) << k->name << " pair " << dtype_name(t) << " n=" << n << " at " << i;
      }
    }
    if (tables == 0) GTEST_LOG_(INFO) << "no kernel table on this CPU has a GEMM for " << dtype_name(t);
  }
}

INSTANTIATE_TEST_SUITE_P(PackedTypes, Packed, ::testing::ValuesIn(kPacked),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ActFormat::BF16 by hand: bfloat16 keeps 7 fraction bits, so 1 + 2^-8 is a tie between 1 and
// 1 + 2^-7 and goes to the even 1 (0x3F80); 1 + 3 x 2^-8 ties between 0x3F81 and 0x3F82 and goes
// to 0x3F82; 1 + 2^-8 + 2^-20 is past the tie (0x3F81). A denormal becomes a signed zero (what
// vdpbf16ps would make of it anyway), a NaN stays a NaN, and an odd row gets a zero partner.
TEST(ActFormatBf16, RoundsToNearestEvenFlushesDenormalsAndPads) {
  const float x[] = {1.0f, 1.00390625f, 1.01171875f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f, 1e-39f, -1e-39f, std::nanf("")};
  const uint16_t want[] = {0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x0000, 0x8000};
  ASSERT_EQ(act_row_bytes(ActFormat::BF16, 7), 16);
  for (const KernelTable* k : available_kernels()) {
    uint16_t out[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    k->prepare_act(ActFormat::BF16, x, out, 7);
    for (int i = 0; i < 7; ++i) EXPECT_EQ(out[i], want[i]) << k->name << " value " << i;
    EXPECT_EQ(out[7], 0) << k->name << ": the odd row's padding";
    k->prepare_act(ActFormat::BF16, x + 7, out, 1);
    EXPECT_TRUE(std::isnan(bf16_to_float(out[0]))) << k->name;
  }
}

// The vdpbf16ps GEMM (AVX512_BF16): activations rounded to bfloat16 (prepare_act, ActFormat::BF16:
// nearest even, a denormal to zero, an odd row padded), then every product exact, so
// the result is the double-precision sum of those products up to float rounding of the partial
// sums; and a token's result does not depend on the tokens beside it (decode, prefill and any
// batch give the same bits), in one group or two, for an odd column count too.
TEST(PackedBf16, RoundedActivationsAndTheSameBitsForAnyBatch) {
  const DType t = DType::BF16;
  int tables = 0;
  for (const KernelTable* k : available_kernels()) {
    if (!rounds_activations(*k, t)) continue;
    ++tables;
    for (int64_t cols : {200, 201, 2048}) {
      const int64_t rb = dtype_row_bytes(t, cols), gb = packed_group_bytes(t, cols);
      const auto q = quantized_rows(t, 2 * kPackRows, cols, 11 + static_cast<uint32_t>(cols));
      std::vector<uint8_t> groups(static_cast<size_t>(2 * gb));
      repack_group(t, q.data(), cols, groups.data());
      repack_group(t, q.data() + kPackRows * rb, cols, groups.data() + gb);
      const int64_t max_tokens = 13;
      auto x = random_vec(max_tokens * cols, 21, 2.0f);
      x[3] = 1e-39f;  // a denormal activation counts as zero
      const auto xr = bf16_rounded(x);
      ASSERT_EQ(xr[3], 0.0f);
      const int64_t stride = act_row_bytes(ActFormat::BF16, cols);
      std::vector<uint8_t> acts(static_cast<size_t>(max_tokens * stride));
      for (int64_t b = 0; b < max_tokens; ++b)
        k->prepare_act(ActFormat::BF16, x.data() + b * cols, acts.data() + b * stride, cols);
      const uint8_t* act = acts.data();
      std::vector<float> w(static_cast<size_t>(cols)), one(static_cast<size_t>(max_tokens * 2 * kPackRows));
      for (int64_t b = 0; b < max_tokens; ++b)
        k->gemm2[static_cast<int>(t)](groups.data(), cols, act + b * stride, stride, 1, one.data() + b * 2 * kPackRows,
                                      2 * kPackRows);
      for (int r = 0; r < 2 * kPackRows; ++r) {
        ref::dequantize_row(t, q.data() + r * rb, w.data(), cols);
        for (int64_t b = 0; b < max_tokens; ++b) {
          double want = 0, mag = 0;
          for (int64_t c = 0; c < cols; ++c) {
            want += static_cast<double>(w[c]) * xr[b * cols + c];
            mag += std::fabs(static_cast<double>(w[c]) * xr[b * cols + c]);
          }
          ASSERT_NEAR(one[b * 2 * kPackRows + r], want, 2e-6 * mag + 1e-30) << "cols=" << cols << " row " << r;
        }
      }
      for (int64_t n : {1, 2, 5, 8, 9, 13}) {
        std::vector<float> y(static_cast<size_t>(n * 2 * kPackRows), -7.0f);
        for (int h = 0; h < 2; ++h)
          k->gemm[static_cast<int>(t)](groups.data() + h * gb, cols, act, stride, n, y.data() + h * kPackRows,
                                       2 * kPackRows);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], one[i]) << "cols=" << cols << " n=" << n << " at " << i;
        std::fill(y.begin(), y.end(), -7.0f);
        k->gemm2[static_cast<int>(t)](groups.data(), cols, act, stride, n, y.data(), 2 * kPackRows);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], one[i]) << "pair cols=" << cols << " n=" << n << " at " << i;
      }
    }
  }
  if (tables == 0) GTEST_SKIP() << "no kernel table on this CPU rounds BF16 activations (no AVX512_BF16)";
}

// The scalar definition: an F16 value is a bfloat16 value when its float's low 16 bits are zero.
bool half_is_bf16(uint16_t h) {
  return (float_to_bits(fp16_to_float(h)) & 0xffffu) == 0;
}

// KernelTable::half_to_bf16_exact against that definition, on every one of the 65,536 halves: alone
// (in a run of bfloat16 values, at a vector lane and in the scalar tail) it converts exactly what
// the definition accepts, to the bits of the exact conversion, and refuses the rest untouched.
TEST(F16HoldingBf16, EveryHalfConvertsExactlyOrIsRefused) {
  int tables = 0;
  for (const KernelTable* k : available_kernels()) {
    if (k->half_to_bf16_exact == nullptr) continue;
    ++tables;
    int accepted = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      for (const int64_t at : {int64_t{5}, int64_t{70}}) {  // a vector lane; the tail of 75
        std::vector<uint16_t> v(75, 0x3C00);                // 1.0
        v[static_cast<size_t>(at)] = static_cast<uint16_t>(h);
        const auto before = v;
        const bool ok = k->half_to_bf16_exact(v.data(), static_cast<int64_t>(v.size()));
        ASSERT_EQ(ok, half_is_bf16(static_cast<uint16_t>(h))) << k->name << std::hex << " h=" << h;
        if (!ok) {
          ASSERT_EQ(v, before) << std::hex << h;
          continue;
        }
        ASSERT_EQ(v[0], 0x3F80) << std::hex << h;  // 1.0 in bfloat16
        ASSERT_EQ(v[static_cast<size_t>(at)], float_to_bits(fp16_to_float(static_cast<uint16_t>(h))) >> 16)
            << std::hex << h;
        accepted += at == 5;
      }
    }
    // 8 of the 1,024 mantissas of each of 30 normal exponents, with both signs; both zeros; the
    // infinities and NaNs with 3 low zero bits; and the subnormals of at most 8 significant bits.
    EXPECT_GT(accepted, 2 * 30 * 128);
  }
  if (tables == 0) GTEST_SKIP() << "no kernel table on this CPU has the vdpbf16ps GEMM (no AVX512_BF16)";
}

// Through repack_weight_for: a bfloat16 checkpoint written as F16 (as convert scripts write it,
// through float) is packed as BF16 and gives, bit for bit, the BF16 matrix of the same values; one
// value with a bit bfloat16 lacks keeps the matrix F16.
TEST(F16HoldingBf16, PackedAsBf16AndMultipliedAsTheBf16Matrix) {
  const int64_t rows = 48, cols = 256, tokens = 9;
  std::vector<uint16_t> bf(static_cast<size_t>(rows * cols)), half(bf.size());
  auto v = random_vec(rows * cols, 31, 1.5f);
  v[5] = 3e-6f;  // F16 subnormals: rounding to 2^-24 steps leaves at most 8 significant bits
  v[8] = 5e-5f;
  v[9] = -2e-5f;
  v[6] = 0.0f;
  v[7] = -1e-9f;  // below F16's range: -0
  for (size_t i = 0; i < bf.size(); ++i) {
    half[i] = float_to_fp16(bf16_to_float(float_to_bf16(v[i])));
    bf[i] = float_to_bf16(fp16_to_float(half[i]));
    ASSERT_TRUE(half_is_bf16(half[i])) << i;
    ASSERT_EQ(bf16_to_float(bf[i]), fp16_to_float(half[i])) << i;
  }
  const WeightView hv{DType::F16, reinterpret_cast<const uint8_t*>(half.data()), rows, cols, cols * 2};
  const WeightView bv{DType::BF16, reinterpret_cast<const uint8_t*>(bf.data()), rows, cols, cols * 2};
  auto odd = half;
  odd.back() = 0x3C01;  // 1 + 2^-10
  const WeightView ov{DType::F16, reinterpret_cast<const uint8_t*>(odd.data()), rows, cols, cols * 2};
  int tables = 0;
  for (const KernelTable* k : available_kernels()) {
    if (!packable(*k, hv)) continue;
    std::vector<uint8_t> hbuf(static_cast<size_t>(packed_bytes(hv))), bbuf(hbuf.size()), obuf(hbuf.size());
    const WeightView hp = repack_weight_for(*k, hv, hbuf.data());
    const WeightView op = repack_weight_for(*k, ov, obuf.data());
    EXPECT_EQ(op.type, DType::F16) << k->name;
    std::vector<uint8_t> plain(obuf.size());
    repack_weight(ov, plain.data());
    EXPECT_EQ(obuf, plain) << k->name;  // refused: the F16 packing, untouched
    if (k->half_to_bf16_exact == nullptr) {
      EXPECT_EQ(hp.type, DType::F16) << k->name;
      continue;
    }
    ++tables;
    ASSERT_EQ(hp.type, DType::BF16) << k->name;
    EXPECT_TRUE(hp.packed);
    const WeightView bp = repack_weight(bv, bbuf.data());
    EXPECT_EQ(hbuf, bbuf);
    const auto x = random_vec(tokens * cols, 8);
    ThreadPool pool(2);
    MatmulScratch scratch;
    std::vector<float> yh(static_cast<size_t>(tokens * rows)), yb(yh.size());
    matmul(pool, *k, hp, x.data(), cols, tokens, yh.data(), rows, scratch);
    matmul(pool, *k, bp, x.data(), cols, tokens, yb.data(), rows, scratch);
    EXPECT_EQ(yh, yb) << k->name;
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    for (int64_t r : {0, 17, 47}) {  // embedding rows read back: the F16 values
      dequantize_weight_row(hv, r, a.data());
      dequantize_weight_row(hp, r, b.data());
      ASSERT_EQ(a, b) << "row " << r;
    }
  }
  if (tables == 0) GTEST_SKIP() << "no kernel table on this CPU has the vdpbf16ps GEMM (no AVX512_BF16)";
}

}  // namespace
}  // namespace coda
