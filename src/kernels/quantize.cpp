// Reference quantizers (float -> format). They aim for simple, deterministic round-to-nearest
// with per-block absmax/min-max scales; they are used to write synthetic models and test data,
// not to produce release-quality quantizations.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/fp16.h"
#include "kernels/kernels.h"

namespace coda::ref {

namespace {

int nearest(float x) {
  return static_cast<int>(std::lrintf(x));
}

void quant_q8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    b[i].d = float_to_fp16(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = static_cast<int8_t>(std::clamp(nearest(x[j] * id), -127, 127));
  }
}

void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    // The element of largest magnitude maps to -8 so that its sign gets the extra level.
    float max = 0;
    for (int j = 0; j < kQK; ++j)
      if (std::fabs(x[j]) > std::fabs(max)) max = x[j];
    const float d = max / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = float_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::clamp(nearest(x[j] * id) + 8, 0, 15);
      const int q1 = std::clamp(nearest(x[j + kQK / 2] * id) + 8, 0, 15);
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Shared by Q4_K and Q5_K: per-sub-block scale and min, themselves quantized to 6 bits relative to
// the super-block's d and dmin. `levels` is 15 (Q4_K) or 31 (Q5_K). Writes the integer quants of
// the 256 elements to q.
void kquant_scales(const float* x, int levels, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales, uint8_t* q) {
  float sub_scale[8], sub_min[8];
  for (int j = 0; j < 8; ++j) {
    float lo = 0, hi = 0;  // the minimum is clamped to <= 0 as the format stores -min >= 0
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, x[32 * j + l]);
      hi = std::max(hi, x[32 * j + l]);
    }
    sub_scale[j] = (hi - lo) / static_cast<float>(levels);
    sub_min[j] = -lo;
  }
  const float max_scale = *std::max_element(sub_scale, sub_scale + 8);
  const float max_min = *std::max_element(sub_min, sub_min + 8);
  const float d = max_scale / 63.0f;
  const float dmin = max_min / 63.0f;
  *d_out = float_to_fp16(d);
  *dmin_out = float_to_fp16(dmin);
  const float dq = fp16_to_float(*d_out);
  const float dminq = fp16_to_float(*dmin_out);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(dq > 0 ? std::clamp(nearest(sub_scale[j] / dq), 0, 63) : 0);
    m[j] = static_cast<uint8_t>(dminq > 0 ? std::clamp(nearest(sub_min[j] / dminq), 0, 63) : 0);
  }
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    const float step = dq * sc[j];
    const float off = dminq * m[j];
    for (int l = 0; l < 32; ++l)
      q[32 * j + l] = static_cast<uint8_t>(step > 0 ? std::clamp(nearest((x[32 * j + l] + off) / step), 0, levels) : 0);
  }
}

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb) {
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    kquant_scales(x, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}

void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb) {
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    kquant_scales(x, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int a = q[64 * c + l], h = q[64 * c + 32 + l];
        b[i].qs[32 * c + l] = static_cast<uint8_t>((a & 0xF) | ((h & 0xF) << 4));
        b[i].qh[l] = static_cast<uint8_t>(b[i].qh[l] | ((a >> 4) << (2 * c)) | ((h >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float sub[16];
    for (int s = 0; s < 16; ++s) {
      float amax = 0;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * s + l]));
      sub[s] = amax / 31.0f;
    }
    const float max_sub = *std::max_element(sub, sub + 16);
    const float d = max_sub / 127.0f;
    b[i].d = float_to_fp16(d);
    const float dq = fp16_to_float(b[i].d);
    int q[kQKK];
    for (int s = 0; s < 16; ++s) {
      const int sc = dq > 0 ? std::clamp(nearest(sub[s] / dq), -128, 127) : 0;
      b[i].scales[s] = static_cast<int8_t>(sc);
      const float step = dq * static_cast<float>(sc);
      for (int l = 0; l < 16; ++l)
        q[16 * s + l] = (step != 0 ? std::clamp(nearest(x[16 * s + l] / step), -32, 31) : 0) + 32;
    }
    for (int half = 0; half < 2; ++half) {
      const int* qq = q + 128 * half;
      for (int l = 0; l < 32; ++l) {
        b[i].ql[64 * half + l] = static_cast<uint8_t>((qq[l] & 0xF) | ((qq[l + 64] & 0xF) << 4));
        b[i].ql[64 * half + l + 32] = static_cast<uint8_t>((qq[l + 32] & 0xF) | ((qq[l + 96] & 0xF) << 4));
        b[i].qh[32 * half + l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                                      ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

// Q3_K and Q2_K write their 2-bit fields in the order dequantize.cpp reads them.
void pack_2bit(const int* q, uint8_t* qs) {
  for (int half = 0; half < 2; ++half)
    for (int l = 0; l < 32; ++l) {
      int byte = 0;
      for (int j = 0; j < 4; ++j) byte |= (q[128 * half + 32 * j + l] & 3) << (2 * j);
      qs[32 * half + l] = static_cast<uint8_t>(byte);
    }
}

void quant_q3_k(const float* x, BlockQ3_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    // Each sub-block's element of largest magnitude maps to -4, the level without a partner.
    float sub[16];
    for (int s = 0; s < 16; ++s) {
      float max = 0;
      for (int l = 0; l < 16; ++l)
        if (std::fabs(x[16 * s + l]) > std::fabs(max)) max = x[16 * s + l];
      sub[s] = max / -4.0f;
    }
    float amax = 0;
    for (float v : sub) amax = std::max(amax, std::fabs(v));
    b[i].d = float_to_fp16(amax / 31.0f);
    const float dq = fp16_to_float(b[i].d);
    std::memset(b[i].scales, 0, sizeof b[i].scales);
    std::memset(b[i].hmask, 0, sizeof b[i].hmask);
    int q[kQKK];
    for (int s = 0; s < 16; ++s) {
      const int sc = dq > 0 ? std::clamp(nearest(sub[s] / dq), -32, 31) : 0;
      const int biased = sc + 32;
      b[i].scales[s % 8] = static_cast<uint8_t>(b[i].scales[s % 8] | ((biased & 0xF) << (4 * (s / 8))));
      b[i].scales[8 + s % 4] = static_cast<uint8_t>(b[i].scales[8 + s % 4] | ((biased >> 4) << (2 * (s / 4))));
      const float step = dq * static_cast<float>(sc);
      for (int l = 0; l < 16; ++l)
        q[16 * s + l] = (step != 0 ? std::clamp(nearest(x[16 * s + l] / step), -4, 3) : 0) + 4;
    }
    pack_2bit(q, b[i].qs);
    for (int e = 0; e < kQKK; ++e) {
      const int half = e / 128, j = e % 128 / 32, l = e % 32;
      b[i].hmask[l] = static_cast<uint8_t>(b[i].hmask[l] | ((q[e] >> 2) << (4 * half + j)));
    }
  }
}

void quant_q2_k(const float* x, BlockQ2_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float sub_scale[16], sub_min[16];
    for (int s = 0; s < 16; ++s) {
      float lo = 0, hi = 0;  // the minimum is clamped to <= 0 as the format stores -min >= 0
      for (int l = 0; l < 16; ++l) {
        lo = std::min(lo, x[16 * s + l]);
        hi = std::max(hi, x[16 * s + l]);
      }
      sub_scale[s] = (hi - lo) / 3.0f;
      sub_min[s] = -lo;
    }
    b[i].d = float_to_fp16(*std::max_element(sub_scale, sub_scale + 16) / 15.0f);
    b[i].dmin = float_to_fp16(*std::max_element(sub_min, sub_min + 16) / 15.0f);
    const float dq = fp16_to_float(b[i].d), dminq = fp16_to_float(b[i].dmin);
    int q[kQKK];
    for (int s = 0; s < 16; ++s) {
      const int sc = dq > 0 ? std::clamp(nearest(sub_scale[s] / dq), 0, 15) : 0;
      const int m = dminq > 0 ? std::clamp(nearest(sub_min[s] / dminq), 0, 15) : 0;
      b[i].scales[s] = static_cast<uint8_t>(sc | (m << 4));
      const float step = dq * static_cast<float>(sc), off = dminq * static_cast<float>(m);
      for (int l = 0; l < 16; ++l)
        q[16 * s + l] = step > 0 ? std::clamp(nearest((x[16 * s + l] + off) / step), 0, 3) : 0;
    }
    pack_2bit(q, b[i].qs);
  }
}

// Q4_1 and Q5_1: min-max over the block, q = round((x - min) / d). Q5_0: as Q4_0 with 16 levels per
// sign (the element of largest magnitude maps to -16).
template <class Block>
void quant_legacy(const float* x, Block* b, int64_t nb) {
  constexpr bool kQ5 = !std::is_same_v<Block, BlockQ4_1>;
  constexpr int kMax = kQ5 ? 31 : 15;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    int q[kQK];
    if constexpr (std::is_same_v<Block, BlockQ5_0>) {
      float max = 0;
      for (int j = 0; j < kQK; ++j)
        if (std::fabs(x[j]) > std::fabs(max)) max = x[j];
      b[i].d = float_to_fp16(max / -16.0f);
      const float d = fp16_to_float(b[i].d), id = d != 0 ? 1.0f / d : 0.0f;
      for (int j = 0; j < kQK; ++j) q[j] = std::clamp(nearest(x[j] * id) + 16, 0, 31);
    } else {
      float lo = x[0], hi = x[0];
      for (int j = 1; j < kQK; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
      b[i].d = float_to_fp16((hi - lo) / kMax);
      b[i].m = float_to_fp16(lo);
      const float d = fp16_to_float(b[i].d), m = fp16_to_float(b[i].m), id = d != 0 ? 1.0f / d : 0.0f;
      for (int j = 0; j < kQK; ++j) q[j] = std::clamp(nearest((x[j] - m) * id), 0, kMax);
    }
    for (int j = 0; j < kQK / 2; ++j) b[i].qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
    if constexpr (kQ5) {
      uint32_t qh = 0;
      for (int j = 0; j < kQK; ++j) qh |= static_cast<uint32_t>(q[j] >> 4) << j;
      std::memcpy(b[i].qh, &qh, 4);
    }
  }
}

// The index of the IQ4 level nearest to x (in units of the block's scale).
int nearest_iq4(float x) {
  int best = 0;
  for (int k = 1; k < 16; ++k)
    if (std::fabs(x - kIq4Levels[k]) < std::fabs(x - kIq4Levels[best])) best = k;
  return best;
}

// A block of 32 as IQ4 indices for step `d`: byte j takes elements j and j + 16.
void iq4_indices(const float* x, float d, uint8_t* qs) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>(nearest_iq4(x[j] * id) | (nearest_iq4(x[j + 16] * id) << 4));
}

// The element of largest magnitude maps to -127, the level without a partner of that size.
float iq4_block_step(const float* x) {
  float max = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > std::fabs(max)) max = x[j];
  return max / -127.0f;
}

void quant_iq4_nl(const float* x, BlockIQ4_NL* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    b[i].d = float_to_fp16(iq4_block_step(x));
    iq4_indices(x, fp16_to_float(b[i].d), b[i].qs);
  }
}

void quant_iq4_xs(const float* x, BlockIQ4_XS* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float step[8], amax = 0;
    for (int s = 0; s < 8; ++s) {
      step[s] = iq4_block_step(x + 32 * s);
      amax = std::max(amax, std::fabs(step[s]));
    }
    b[i].d = float_to_fp16(amax / 31.0f);
    const float dq = fp16_to_float(b[i].d);
    b[i].scales_h = 0;
    std::memset(b[i].scales_l, 0, sizeof b[i].scales_l);
    for (int s = 0; s < 8; ++s) {
      const int ls = (dq > 0 ? std::clamp(nearest(step[s] / dq), -32, 31) : 0) + 32;
      b[i].scales_l[s / 2] = static_cast<uint8_t>(b[i].scales_l[s / 2] | ((ls & 0xF) << (4 * (s % 2))));
      b[i].scales_h = static_cast<uint16_t>(b[i].scales_h | ((ls >> 4) << (2 * s)));
      iq4_indices(x + 32 * s, dq * static_cast<float>(ls - 32), b[i].qs + 16 * s);
    }
  }
}

}  // namespace

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      break;
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
      break;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      break;
    }
    case DType::Q8_0:
      quant_q8_0(src, static_cast<BlockQ8_0*>(dst), n / kQK);
      break;
    case DType::Q4_0:
      quant_q4_0(src, static_cast<BlockQ4_0*>(dst), n / kQK);
      break;
    case DType::Q4_K:
      quant_q4_k(src, static_cast<BlockQ4_K*>(dst), n / kQKK);
      break;
    case DType::Q5_K:
      quant_q5_k(src, static_cast<BlockQ5_K*>(dst), n / kQKK);
      break;
    case DType::Q6_K:
      quant_q6_k(src, static_cast<BlockQ6_K*>(dst), n / kQKK);
      break;
    case DType::Q3_K:
      quant_q3_k(src, static_cast<BlockQ3_K*>(dst), n / kQKK);
      break;
    case DType::Q2_K:
      quant_q2_k(src, static_cast<BlockQ2_K*>(dst), n / kQKK);
      break;
    case DType::Q4_1:
      quant_legacy(src, static_cast<BlockQ4_1*>(dst), n / kQK);
      break;
    case DType::Q5_0:
      quant_legacy(src, static_cast<BlockQ5_0*>(dst), n / kQK);
      break;
    case DType::Q5_1:
      quant_legacy(src, static_cast<BlockQ5_1*>(dst), n / kQK);
      break;
    case DType::IQ4_NL:
      quant_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n / kQK);
      break;
    case DType::IQ4_XS:
      quant_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n / kQKK);
      break;
    default:
      assert(false && "quantize_row: unsupported type");
  }
}

void quantize_act(const float* x, void* out, int64_t n) {
  auto* q = static_cast<int8_t*>(out);
  auto* d = reinterpret_cast<float*>(q + n);
  auto* sums = reinterpret_cast<int32_t*>(d + n / kQK);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float scale = amax / 127.0f;
    const float id = scale > 0 ? 1.0f / scale : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kQK; ++j) {
      const int v = std::clamp(nearest(x[j] * id), -127, 127);
      q[i * kQK + j] = static_cast<int8_t>(v);
      sum += v;
    }
    d[i] = scale;
    sums[i] = sum;
  }
}

}  // namespace coda::ref

namespace coda {

void store_q8_value_row(const uint8_t* row, uint8_t* values, uint16_t* scales, int64_t stride, int64_t j, int64_t hd) {
  for (int64_t d = 0; d < hd; ++d) {
    values[q8_value_offset(j, d, hd)] = row[d];
    if (j % 2 == 0) values[q8_value_offset(j + 1, d, hd)] = 0;
  }
  for (int64_t b = 0; b < hd / 32; ++b) {
    std::memcpy(&scales[b * stride + j], row + hd + b * 2, 2);
    if (j % 2 == 0) scales[b * stride + j + 1] = 0;
  }
}

void quantize_kv_row_q8(const float* x, uint8_t* row, int64_t hd) {
  auto* q = reinterpret_cast<int8_t*>(row);
  for (int64_t b = 0; b < hd / kQK; ++b) {
    BlockQ8_0 blk;
    ref::quantize_row(DType::Q8_0, x + b * kQK, &blk, kQK);
    std::memcpy(q + b * kQK, blk.qs, kQK);
    std::memcpy(row + hd + b * 2, &blk.d, 2);
  }
}

}  // namespace coda

namespace coda::ref {

void quantize_act_k(const float* x, ActBlockK* out, int64_t n) {
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float amax = 0;
    for (int j = 0; j < kQKK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQKK; ++j) out[i].q[j] = static_cast<int8_t>(std::clamp(nearest(x[j] * id), -127, 127));
    for (int s = 0; s < kQKK / 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += out[i].q[16 * s + j];
      out[i].bsums[s] = static_cast<int16_t>(sum);
    }
    out[i].d = d;
  }
}

}  // namespace coda::ref

namespace coda {

int64_t act_row_bytes(DType t, int64_t n) {
  return act_row_bytes(act_format(t), n);
}

int64_t act_row_bytes(ActFormat f, int64_t n) {
  switch (f) {
    case ActFormat::Q8_32:
    case ActFormat::Q8_32_PAIRED:
    case ActFormat::Q8_32_BLOCKED:
      return n + n / kQK * 8;
    case ActFormat::Q8_256:
      return n / kQKK * static_cast<int64_t>(sizeof(ActBlockK));
    case ActFormat::BF16:
      return (n + 1) / 2 * 4;
    default:
      return n * static_cast<int64_t>(sizeof(float));
  }
}

void prepare_act(DType t, const float* x, void* out, int64_t n) {
  prepare_act(act_format(t), x, out, n);
}

void prepare_act(ActFormat f, const float* x, void* out, int64_t n) {
  switch (f) {
    case ActFormat::Q8_32:
      ref::quantize_act(x, out, n);
      break;
    case ActFormat::Q8_32_PAIRED: {
      ref::quantize_act(x, out, n);
      auto* q = static_cast<int8_t*>(out);
      int8_t pair[2 * kQK];
      for (int64_t p = 0; p + 1 < n / kQK; p += 2) {
        for (int j = 0; j < 2 * kQK; ++j) pair[q4_0_paired_index(p * kQK + j, n) - p * kQK] = q[p * kQK + j];
        std::memcpy(q + p * kQK, pair, sizeof pair);
      }
      break;
    }
    case ActFormat::Q8_32_BLOCKED:
      // A Q8_32 row of one block is an ActBlockQ8: quants, scale, sum.
      for (int64_t b = 0; b < n / kQK; ++b) ref::quantize_act(x + b * kQK, static_cast<ActBlockQ8*>(out) + b, kQK);
      break;
    case ActFormat::Q8_256:
      ref::quantize_act_k(x, static_cast<ActBlockK*>(out), n);
      break;
    case ActFormat::BF16: {
      auto* h = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) h[i] = bf16_round_flush(x[i]);
      if (n % 2 != 0) h[n] = 0;
      break;
    }
    default:
      std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
      break;
  }
}

}  // namespace coda
