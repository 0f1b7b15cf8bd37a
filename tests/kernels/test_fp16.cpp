// The scalar half/bfloat16 conversions against exhaustive properties and the CPU's F16C unit.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <random>

#include "core/fp16.h"

namespace coda {
namespace {

__attribute__((target("f16c"))) uint16_t hw_float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_half_to_float(uint16_t h) {
  return _cvtsh_ss(h);
}

TEST(Fp16, EveryHalfRoundTripsAndMatchesHardware) {
  const bool hw = __builtin_cpu_supports("f16c");
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_fp16(f), h) << "half 0x" << std::hex << h;
    if (hw) {
      EXPECT_EQ(float_to_bits(hw_half_to_float(static_cast<uint16_t>(h))), float_to_bits(f)) << std::hex << h;
    }
  }
}

TEST(Fp16, RoundingMatchesHardwareOnRandomFloats) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  std::mt19937 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    const float f = bits_to_float(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_fp16(f), hw_float_to_half(f)) << f;
  }
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);               // rounds up to infinity
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
}

TEST(Bf16, RoundToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3F808001u)), 0x3F81);
  EXPECT_EQ(bf16_to_float(0x4049), bits_to_float(0x40490000u));
}

}  // namespace
}  // namespace coda
