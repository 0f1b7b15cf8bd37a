// Scalar reference dequantization: the definition of each format's meaning.
#include <cassert>
#include <cstring>
#include <type_traits>

#include "core/fp16.h"
#include "kernels/kernels.h"

namespace coda::ref {

namespace {

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_float(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_float(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>((b[i].qs[j] & 0xF) - 8);
      y[j + kQK / 2] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
    }
  }
}

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_float(b[i].d);
    const float dmin = fp16_to_float(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc0, m0, sc1, m1;
      kquant_scale_min(2 * c, b[i].scales, &sc0, &m0);
      kquant_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
      const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
      for (int l = 0; l < 32; ++l) *y++ = d0 * static_cast<float>(q[l] & 0xF) - mm0;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] >> 4) - mm1;
    }
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_float(b[i].d);
    const float dmin = fp16_to_float(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc0, m0, sc1, m1;
      kquant_scale_min(2 * c, b[i].scales, &sc0, &m0);
      kquant_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
      const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
      for (int l = 0; l < 32; ++l) {
        const int hi = (b[i].qh[l] >> (2 * c)) & 1;
        *y++ = d0 * static_cast<float>((q[l] & 0xF) + 16 * hi) - mm0;
      }
      for (int l = 0; l < 32; ++l) {
        const int hi = (b[i].qh[l] >> (2 * c + 1)) & 1;
        *y++ = d1 * static_cast<float>((q[l] >> 4) + 16 * hi) - mm1;
      }
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_float(b[i].d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b[i].ql + 64 * half;
      const uint8_t* qh = b[i].qh + 32 * half;
      const int8_t* sc = b[i].scales + 8 * half;
      float* out = y + 256 * i + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        const int is = l / 16;
        out[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q0);
        out[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q1);
        out[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q2);
        out[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q3);
      }
    }
  }
}

// Q3_K and Q2_K share the order of their 2-bit fields: half h of the super-block reads qs[32h..32h+31],
// and pass j of 4 takes bits 2j..2j+1 of each byte, elements 128h + 32j + l for l < 32.
void dequant_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_float(b[i].d);
    for (int half = 0; half < 2; ++half) {
      for (int j = 0; j < 4; ++j) {
        for (int l = 0; l < 32; ++l) {
          const int low = (b[i].qs[32 * half + l] >> (2 * j)) & 3;
          const int high = (b[i].hmask[l] >> (4 * half + j)) & 1;
          const int s = q3_k_scale(8 * half + 2 * j + l / 16, b[i].scales) - 32;
          *y++ = d * static_cast<float>(s) * static_cast<float>(low - 4 * (1 - high));
        }
      }
    }
  }
}

void dequant_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_float(b[i].d);
    const float dmin = fp16_to_float(b[i].dmin);
    for (int half = 0; half < 2; ++half) {
      for (int j = 0; j < 4; ++j) {
        for (int l = 0; l < 32; ++l) {
          const int q = (b[i].qs[32 * half + l] >> (2 * j)) & 3;
          const uint8_t sc = b[i].scales[8 * half + 2 * j + l / 16];
          *y++ = d * static_cast<float>(sc & 0xF) * static_cast<float>(q) - dmin * static_cast<float>(sc >> 4);
        }
      }
    }
  }
}

// Q4_1, Q5_0, Q5_1: the unsigned quant of element j (0..31) of a block, and its value.
template <class Block>
int legacy_quant(const Block& b, int j) {
  int q = j < 16 ? b.qs[j] & 0xF : b.qs[j - 16] >> 4;
  if constexpr (!std::is_same_v<Block, BlockQ4_1>) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    q |= static_cast<int>((qh >> j) & 1) << 4;
  }
  return q;
}

template <class Block>
void dequant_legacy(const Block* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_float(b[i].d);
    for (int j = 0; j < kQK; ++j) {
      const int q = legacy_quant(b[i], j);
      if constexpr (std::is_same_v<Block, BlockQ5_0>)
        y[j] = d * static_cast<float>(q - 16);
      else
        y[j] = d * static_cast<float>(q) + fp16_to_float(b[i].m);
    }
  }
}

void dequant_iq4_nl(const BlockIQ4_NL* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_float(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(kIq4Levels[b[i].qs[j] & 0xF]);
      y[j + kQK / 2] = d * static_cast<float>(kIq4Levels[b[i].qs[j] >> 4]);
    }
  }
}

void dequant_iq4_xs(const BlockIQ4_XS* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_float(b[i].d);
    for (int s = 0; s < 8; ++s, y += 32) {
      const float dl = d * static_cast<float>(iq4_xs_scale(s, b[i]) - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4Levels[b[i].qs[16 * s + j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(kIq4Levels[b[i].qs[16 * s + j] >> 4]);
      }
    }
  }
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      break;
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(s[i]);
      break;
    }
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      break;
    }
    case DType::Q8_0:
      dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / kQK);
      break;
    case DType::Q4_0:
      dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / kQK);
      break;
    case DType::Q4_K:
      dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / kQKK);
      break;
    case DType::Q5_K:
      dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, n / kQKK);
      break;
    case DType::Q6_K:
      dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / kQKK);
      break;
    case DType::Q3_K:
      dequant_q3_k(static_cast<const BlockQ3_K*>(src), dst, n / kQKK);
      break;
    case DType::Q2_K:
      dequant_q2_k(static_cast<const BlockQ2_K*>(src), dst, n / kQKK);
      break;
    case DType::Q4_1:
      dequant_legacy(static_cast<const BlockQ4_1*>(src), dst, n / kQK);
      break;
    case DType::Q5_0:
      dequant_legacy(static_cast<const BlockQ5_0*>(src), dst, n / kQK);
      break;
    case DType::Q5_1:
      dequant_legacy(static_cast<const BlockQ5_1*>(src), dst, n / kQK);
      break;
    case DType::IQ4_NL:
      dequant_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n / kQK);
      break;
    case DType::IQ4_XS:
      dequant_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n / kQKK);
      break;
    default:
      // Callers check dtype_supported() when loading; reaching this is a programmer error.
      assert(false && "dequantize_row: unsupported type");
  }
}

}  // namespace coda::ref
