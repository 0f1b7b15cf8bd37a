// Scalar reference dot products and the scalar kernel table.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"

namespace coda {

namespace ref {

float dot(DType t, const void* w, const void* act, int64_t n) {
  std::vector<float> row(static_cast<size_t>(n));
  dequantize_row(t, w, row.data(), n);
  double acc = 0;
  if (act_format(t) == ActFormat::Q8_32) {
    const ActRowQ8 a(act, n);
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(row[i]) * static_cast<double>(a.d[i / kQK]) * a.q[i];
  } else if (act_format(t) == ActFormat::Q8_32_PAIRED) {
    const ActRowQ8 a(act, n);
    for (int64_t i = 0; i < n; ++i)
      acc += static_cast<double>(row[i]) * static_cast<double>(a.d[i / kQK]) * a.q[q4_0_paired_index(i, n)];
  } else if (act_format(t) == ActFormat::Q8_256) {
    const auto* a = static_cast<const ActBlockK*>(act);
    for (int64_t i = 0; i < n; ++i)
      acc += static_cast<double>(row[i]) * static_cast<double>(a[i / kQKK].d) * a[i / kQKK].q[i % kQKK];
  } else {
    const auto* x = static_cast<const float*>(act);
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(row[i]) * x[i];
  }
  return static_cast<float>(acc);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace ref

namespace {

// The scalar table's dot kernels dequantize block by block into a small buffer instead of a
// whole row, so they allocate nothing; they are the fallback for CPUs without AVX2.
template <DType T>
float dot_blockwise(const void* w, const void* act, int64_t n) {
  const DTypeInfo* info = dtype_info(static_cast<uint32_t>(T));
  const int64_t bs = info->block_size == 1 ? 256 : info->block_size;
  const auto* src = static_cast<const uint8_t*>(w);
  float buf[256];
  float acc = 0;
  for (int64_t i = 0; i < n; i += bs) {
    const int64_t len = std::min<int64_t>(bs, n - i);
    ref::dequantize_row(T, src + dtype_row_bytes(T, i), buf, len);
    if constexpr (act_format(T) == ActFormat::Q8_32) {
      const ActRowQ8 a(act, n);
      for (int64_t j = 0; j < len; ++j) acc += buf[j] * a.d[(i + j) / kQK] * static_cast<float>(a.q[i + j]);
    } else if constexpr (act_format(T) == ActFormat::Q8_32_PAIRED) {
      const ActRowQ8 a(act, n);
      for (int64_t j = 0; j < len; ++j)
        acc += buf[j] * a.d[(i + j) / kQK] * static_cast<float>(a.q[q4_0_paired_index(i + j, n)]);
    } else if constexpr (act_format(T) == ActFormat::Q8_256) {
      const auto& a = static_cast<const ActBlockK*>(act)[i / kQKK];
      for (int64_t j = 0; j < len; ++j) acc += buf[j] * a.d * static_cast<float>(a.q[j]);
    } else {
      const float* x = static_cast<const float*>(act) + i;
      for (int64_t j = 0; j < len; ++j) acc += buf[j] * x[j];
    }
  }
  return acc;
}

template <DType T>
void dot4_blockwise(const void* w, const void* act, int64_t stride, int64_t n, float* out) {
  for (int t = 0; t < 4; ++t) out[t] = dot_blockwise<T>(w, static_cast<const uint8_t*>(act) + t * stride, n);
}

void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// The softmax numerators: y = exp_1(x - shift) for x - shift >= lo, else 0, summed in double.
template <class Exp1>
float softmax_sum_scalar(const float* x, float* y, int64_t n, float shift, float lo, Exp1 exp_1) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - shift;
    y[i] = d < lo ? 0.0f : exp_1(d);
    sum += y[i];
  }
  return static_cast<float>(sum);
}

float exp_sum_scalar(const float* x, float* y, int64_t n, float shift) {
  return softmax_sum_scalar(x, y, n, shift, -87.0f, [](float d) { return std::exp(d); });
}

float exp2_sum_scalar(const float* x, float* y, int64_t n, float shift) {
  return softmax_sum_scalar(x, y, n, shift, -126.0f, [](float d) { return std::exp2(d); });
}

float sum_scalar(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return static_cast<float>(s);
}

float max_scalar(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

SoftmaxMoments softmax_moments_scalar(const float* x, int64_t n, float shift) {
  SoftmaxMoments m;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - shift;
    if (d < -87.0) continue;
    const double w = std::exp(d);
    m.z += w;
    m.s1 += w * d;
    m.s2 += w * d * d;
  }
  return m;
}

int64_t count_above_scalar(const float* x, int64_t n, float t) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += x[i] > t;
  return c;
}

inline float kv_elem(float x) {
  return x;
}
inline float kv_elem(uint16_t x) {
  return fp16_to_float(x);
}

template <class T>
void attn_scores_scalar(const float* q, int64_t G, const T* k, int64_t len, int64_t hd, float scale, float* scores,
                        int64_t s_stride) {
  for (int64_t h = 0; h < G; ++h)
    for (int64_t j = 0; j < len; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < hd; ++i)
        acc += static_cast<double>(q[h * hd + i]) * kv_elem(k[key_block_index(j, i, hd)]);
      scores[h * s_stride + j] = static_cast<float>(acc) * scale;
    }
}

template <class T>
void attn_values_scalar(const float* p, int64_t G, int64_t s_stride, const T* v, int64_t kv_stride, int64_t len,
                        int64_t hd, float* out) {
  for (int64_t h = 0; h < G; ++h)
    for (int64_t i = 0; i < hd; ++i) {
      double acc = out[h * hd + i];
      for (int64_t j = 0; j < len; ++j) acc += static_cast<double>(p[h * s_stride + j]) * kv_elem(v[j * kv_stride + i]);
      out[h * hd + i] = static_cast<float>(acc);
    }
}

// The Q8_0 cache (kernels.h): exact integer dot products per 32-dimension block, then the scales.
void attn_scores_q8_scalar(const uint8_t* qa, int64_t qa_stride, int64_t G, const uint8_t* k, int64_t len, int64_t hd,
                           float scale, float* scores, int64_t s_stride) {
  for (int64_t h = 0; h < G; ++h) {
    const ActRowQ8 a(qa + h * qa_stride, hd);
    for (int64_t j = 0; j < len; ++j) {
      const uint8_t* blk = k + j / kKeyBlock * q8_key_block_bytes(hd);
      double acc = 0;
      for (int64_t b = 0; b < hd / kQK; ++b) {
        int32_t isum = 0;
        for (int64_t i = b * kQK; i < (b + 1) * kQK; ++i) isum += (blk[q8_key_value_offset(j, i)] - 128) * a.q[i];
        uint16_t dk;
        std::memcpy(&dk, blk + q8_key_scale_offset(j, b, hd), 2);
        acc += static_cast<double>(isum) * fp16_to_float(dk) * a.d[b];
      }
      scores[h * s_stride + j] = static_cast<float>(acc) * scale;
    }
  }
}

void attn_values_q8_scalar(const float* p, int64_t G, int64_t s_stride, const uint8_t* v, const uint16_t* scales,
                           int64_t scale_stride, int64_t len, int64_t hd, float* out) {
  const auto scale_of = [&](int64_t j, int64_t b) { return fp16_to_float(scales[b * scale_stride + j]); };
  const auto max_nan = [](float m, float x) {  // max |x|, NaN if one is
    return std::isnan(m) || std::isnan(x) ? std::numeric_limits<float>::quiet_NaN() : std::max(m, std::fabs(x));
  };
  for (int64_t r0 = 0; r0 < len; r0 += kQ8ValueRun) {
    const int64_t r1 = std::min(len, r0 + kQ8ValueRun);
    for (int64_t h = 0; h < G; ++h) {
      const float* ph = p + h * s_stride;
      float a = 0;
      int64_t last = -1;
      for (int64_t j = r0; j < r1; ++j) {
        a = max_nan(a, ph[j]);
        if (ph[j] != 0) last = j;
      }
      if (last < 0 || a < std::numeric_limits<float>::min()) continue;
      const float ia = 1.0f / a;
      for (int64_t b = 0; b < hd / kQK; ++b) {
        float s = 0;
        for (int64_t j = r0; j <= last; ++j) s = max_nan(s, scale_of(j, b));
        const float m = a * s;
        float* o = out + h * hd + b * kQK;
        if (!(m < std::numeric_limits<float>::infinity())) {
          std::fill(o, o + kQK, std::numeric_limits<float>::quiet_NaN());
          continue;
        }
        if (m == 0) continue;
        const float k = kQ8WeightMax / s;
        int32_t sum[kQK] = {};
        for (int64_t j = r0; j <= last; ++j) {
          const float pj = ph[j] * ia, cj = scale_of(j, b) * k;
          const auto u = static_cast<int32_t>(std::nearbyint(pj * cj));
          for (int i = 0; i < kQK; ++i) sum[i] += u * static_cast<int8_t>(v[q8_value_offset(j, b * kQK + i, hd)]);
        }
        const float step = m / kQ8WeightMax;
        for (int i = 0; i < kQK; ++i) o[i] = std::fma(step, static_cast<float>(sum[i]), o[i]);
      }
    }
  }
}

void attn_values_bf16_scalar(const float* p, int64_t G, int64_t s_stride, const uint16_t* v, int64_t len,
                             int64_t hd, float* out) {
  for (int64_t h = 0; h < G; ++h)
    for (int64_t i = 0; i < hd; ++i) {
      double acc = out[h * hd + i];
      for (int64_t j = 0; j < len; ++j)
        acc += static_cast<double>(bf16_to_float(float_to_bf16(p[h * s_stride + j]))) *
               bf16_to_float(v[bf16_value_index(j, i, hd)]);
      out[h * hd + i] = static_cast<float>(acc);
    }
}

void f32_to_f16_scalar(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_fp16(x[i]);
}

uint64_t stream_read_scalar(const uint8_t* p, int64_t n) {
  uint64_t acc = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    acc ^= v;
  }
  for (; i < n; ++i) acc ^= p[i];
  return acc;
}

KernelTable make_scalar() {
  KernelTable t{};
  t.name = "scalar";
  t.dot[static_cast<int>(DType::F32)] = dot_blockwise<DType::F32>;
  t.dot4[static_cast<int>(DType::F32)] = dot4_blockwise<DType::F32>;
  t.dot[static_cast<int>(DType::F16)] = dot_blockwise<DType::F16>;
  t.dot4[static_cast<int>(DType::F16)] = dot4_blockwise<DType::F16>;
  t.dot[static_cast<int>(DType::BF16)] = dot_blockwise<DType::BF16>;
  t.dot4[static_cast<int>(DType::BF16)] = dot4_blockwise<DType::BF16>;
  t.dot[static_cast<int>(DType::Q8_0)] = dot_blockwise<DType::Q8_0>;
  t.dot4[static_cast<int>(DType::Q8_0)] = dot4_blockwise<DType::Q8_0>;
  t.dot[static_cast<int>(DType::Q4_0)] = dot_blockwise<DType::Q4_0>;
  t.dot4[static_cast<int>(DType::Q4_0)] = dot4_blockwise<DType::Q4_0>;
  t.dot[static_cast<int>(DType::Q4_K)] = dot_blockwise<DType::Q4_K>;
  t.dot4[static_cast<int>(DType::Q4_K)] = dot4_blockwise<DType::Q4_K>;
  t.dot[static_cast<int>(DType::Q5_K)] = dot_blockwise<DType::Q5_K>;
  t.dot4[static_cast<int>(DType::Q5_K)] = dot4_blockwise<DType::Q5_K>;
  t.dot[static_cast<int>(DType::Q6_K)] = dot_blockwise<DType::Q6_K>;
  t.dot4[static_cast<int>(DType::Q6_K)] = dot4_blockwise<DType::Q6_K>;
  t.dot[static_cast<int>(DType::Q3_K)] = dot_blockwise<DType::Q3_K>;
  t.dot4[static_cast<int>(DType::Q3_K)] = dot4_blockwise<DType::Q3_K>;
  t.dot[static_cast<int>(DType::Q2_K)] = dot_blockwise<DType::Q2_K>;
  t.dot4[static_cast<int>(DType::Q2_K)] = dot4_blockwise<DType::Q2_K>;
  t.dot[static_cast<int>(DType::Q4_1)] = dot_blockwise<DType::Q4_1>;
  t.dot4[static_cast<int>(DType::Q4_1)] = dot4_blockwise<DType::Q4_1>;
  t.dot[static_cast<int>(DType::Q5_0)] = dot_blockwise<DType::Q5_0>;
  t.dot4[static_cast<int>(DType::Q5_0)] = dot4_blockwise<DType::Q5_0>;
  t.dot[static_cast<int>(DType::Q5_1)] = dot_blockwise<DType::Q5_1>;
  t.dot4[static_cast<int>(DType::Q5_1)] = dot4_blockwise<DType::Q5_1>;
  t.dot[static_cast<int>(DType::IQ4_NL)] = dot_blockwise<DType::IQ4_NL>;
  t.dot4[static_cast<int>(DType::IQ4_NL)] = dot4_blockwise<DType::IQ4_NL>;
  t.dot[static_cast<int>(DType::IQ4_XS)] = dot_blockwise<DType::IQ4_XS>;
  t.dot4[static_cast<int>(DType::IQ4_XS)] = dot4_blockwise<DType::IQ4_XS>;
  t.dot_f32 = ref::dot_f32;
  t.axpy_f32 = axpy_scalar;
  t.stream_read = stream_read_scalar;
  t.exp_sum = exp_sum_scalar;
  t.exp2_sum = exp2_sum_scalar;
  t.swiglu = swiglu;
  t.sum_f32 = sum_scalar;
  t.max_f32 = max_scalar;
  t.softmax_moments = softmax_moments_scalar;
  t.count_above = count_above_scalar;
  t.attn_scores = attn_scores_scalar<float>;
  t.attn_values = attn_values_scalar<float>;
  t.attn_scores_f16 = attn_scores_scalar<uint16_t>;
  t.attn_values_f16 = attn_values_scalar<uint16_t>;
  t.attn_scores_q8 = attn_scores_q8_scalar;
  t.attn_values_q8 = attn_values_q8_scalar;
  t.attn_values_bf16 = attn_values_bf16_scalar;
  t.f32_to_f16 = f32_to_f16_scalar;
  t.prepare_act = [](ActFormat f, const float* x, void* out, int64_t n) { prepare_act(f, x, out, n); };
  return t;
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table = make_scalar();
  return table;
}

}  // namespace coda
