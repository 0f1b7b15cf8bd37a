// y = x W^T for a weight matrix in any supported format, parallel over output rows.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace coda {

// A read-only view of a 2-D weight: `rows` rows of `cols` elements, each row `row_bytes` long in
// the file's format, or, when `packed`, groups of 16 interleaved rows (kernels/repack.h) that only
// the GEMM and dequantize_weight_row read.
struct WeightView {
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;
  bool packed = false;

  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }  // unpacked weights only
};

// Whether the kernel table `k` multiplies `w` faster once repacked (it has a GEMM for the type and
// the rows come in whole groups of 16).
bool packable(const KernelTable& k, const WeightView& w);
// Bytes `w` takes once repacked.
int64_t packed_bytes(const WeightView& w);
// Writes the repacked form of `w` (which must be packable) to `dst` (packed_bytes(w) bytes) and
// returns the view of it.
WeightView repack_weight(const WeightView& w, uint8_t* dst);
// repack_weight for table `k`, except that an F16 matrix whose every value is a bfloat16 value too
// is packed as BF16 where the table's BF16 GEMM is vdpbf16ps (KernelTable::half_to_bf16_exact):
// the same values, multiplied as the BF16 file of them would be, activations rounded to bfloat16.
// Most published F16 files are such (their checkpoints were trained in bfloat16, and bfloat16 ->
// float16 keeps all 8 significant bits); an F16 file of float32 weights stays F16, exact
// activations and all. `CODA_BF16_GEMM=float` keeps every F16 matrix F16.
WeightView repack_weight_for(const KernelTable& k, const WeightView& w, uint8_t* dst);
// Row r of a weight, packed or not, as n = w.cols floats (embedding lookups).
void dequantize_weight_row(const WeightView& w, int64_t r, float* out);

// Reusable buffer for quantized activations, so decode allocates nothing per step.
struct MatmulScratch {
  std::vector<uint8_t> act;
};

// One matrix of a multi-matrix product and where its output goes.
struct MatmulOut {
  const WeightView* w;
  float* y;
  int64_t out_stride;
};

// Several matrices applied to the same input (Q, K and V; gate and up): the activations are
// prepared once and all rows run in one parallel region, one barrier instead of one per matrix.
void matmul_multi(ThreadPool& pool, const KernelTable& k, const std::vector<MatmulOut>& outs, const float* x,
                  int64_t in_stride, int64_t n_tokens, MatmulScratch& scratch);

// y[b * out_stride + r] = dot(W row r, x[b * in_stride ...]) for b < n_tokens, r < W.rows.
void matmul(ThreadPool& pool, const KernelTable& k, const WeightView& w, const float* x, int64_t in_stride,
            int64_t n_tokens, float* y, int64_t out_stride, MatmulScratch& scratch);

}  // namespace coda
