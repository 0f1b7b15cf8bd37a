#include "kernels/matmul.h"

#include <algorithm>

namespace coda {

void matmul(ThreadPool& pool, const KernelTable& k, const WeightView& w, const float* x, int64_t in_stride,
            int64_t n_tokens, float* y, int64_t out_stride, MatmulScratch& scratch) {
  const DotFn dot = k.dot[static_cast<int>(w.type)];
  const Dot4Fn dot4 = k.dot4[static_cast<int>(w.type)];
  const void* act_base = x;
  int64_t act_stride_bytes = in_stride * static_cast<int64_t>(sizeof(float));
  if (act_format(w.type) != ActFormat::F32) {
    // Quantize each token's activations once; every output row reuses them.
    act_stride_bytes = act_row_bytes(w.type, w.cols);
    scratch.act.resize(static_cast<size_t>(act_stride_bytes * n_tokens));
    for (int64_t b = 0; b < n_tokens; ++b)
      prepare_act(w.type, x + b * in_stride, scratch.act.data() + b * act_stride_bytes, w.cols);
    act_base = scratch.act.data();
  }
  // Rows are processed in tiles so that a tile of weights stays in cache while every token of a
  // prefill batch passes over it; decode (one token) streams the weights exactly once.
  constexpr int64_t kTile = 16;
  pool.parallel_for(
      w.rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r0 = begin; r0 < end; r0 += kTile) {
          const int64_t r1 = std::min(end, r0 + kTile);
          int64_t b = 0;
          for (; b + 4 <= n_tokens; b += 4) {  // prefill: 4 tokens per pass over a weight row
            const void* act = static_cast<const uint8_t*>(act_base) + b * act_stride_bytes;
            for (int64_t r = r0; r < r1; ++r) {
              float out[4];
              dot4(w.row(r), act, act_stride_bytes, w.cols, out);
              for (int t = 0; t < 4; ++t) y[(b + t) * out_stride + r] = out[t];
            }
          }
          for (; b < n_tokens; ++b) {
            const void* act = static_cast<const uint8_t*>(act_base) + b * act_stride_bytes;
            float* out = y + b * out_stride;
            for (int64_t r = r0; r < r1; ++r) out[r] = dot(w.row(r), act, w.cols);
          }
        }
      },
      kTile);
}

}  // namespace coda
