#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>

#include "kernels/repack.h"

namespace coda {

namespace {

// Rows are processed in tiles so that a tile of weights stays in cache while every token of a
// prefill batch passes over it; decode (one token) streams the weights exactly once.
constexpr int64_t kTile = 16;
static_assert(kTile == kPackRows, "a unit of work is one packed group or one tile of rows");

void run_rows(const KernelTable& k, const MatmulOut& m, int64_t r0, int64_t r1, const void* act_base,
              int64_t act_stride, int64_t n_tokens) {
  const WeightView& w = *m.w;
  const DotFn dot = k.dot[static_cast<int>(w.type)];
  const Dot4Fn dot4 = k.dot4[static_cast<int>(w.type)];
  const Dot4Fn dot8 = k.dot8[static_cast<int>(w.type)];
  // Tile by tile: a chunk is up to 1,024 rows (1.7 MB of a 2,048-wide Q6_K matrix), more than L2,
  // and with the token loop outside it every 4 tokens re-read the chunk from L3 or memory (8
  // batched streams read the Q6_K output matrix twice). 16 rows (27-107 KB) stay in L2.
  for (int64_t tile_begin = r0; tile_begin < r1; tile_begin += kTile) {
    const int64_t tile_end = std::min(r1, tile_begin + kTile);
    int64_t b = 0;
    // Passes of `width` tokens over each row of the tile: the kernel unpacks a row once per pass.
    const auto passes = [&](int width, Dot4Fn fn) {
      for (; b + width <= n_tokens; b += width) {
        const void* act = static_cast<const uint8_t*>(act_base) + b * act_stride;
        for (int64_t r = tile_begin; r < tile_end; ++r) {
          float out[8];
          fn(w.row(r), act, act_stride, w.cols, out);
          for (int t = 0; t < width; ++t) m.y[(b + t) * m.out_stride + r] = out[t];
        }
      }
    };
    if (dot8 != nullptr) passes(8, dot8);  // where the type unpacks a row once for 8 tokens
    passes(4, dot4);                       // prefill: 4 tokens per pass over a weight row
    for (; b < n_tokens; ++b) {
      const void* act = static_cast<const uint8_t*>(act_base) + b * act_stride;
      float* out = m.y + b * m.out_stride;
      for (int64_t r = tile_begin; r < tile_end; ++r) out[r] = dot(w.row(r), act, w.cols);
    }
  }
}

// Runs fn(begin, end) over [0, n) in chunks that threads take from a shared counter, instead of one
// fixed share each: on a shared machine one core is often slowed by a neighbour, and with fixed
// halves the other core then spun at the barrier (10-15% of decode samples on Zen 5). About 8
// chunks per thread keep the imbalance to a small part of a matmul while each chunk is still a long
// contiguous stream of weights. Chunks are multiples of `unit`, at most `max_units` units; where a
// chunk starts does not depend on which thread takes it, so the results do not either.
template <typename Fn>
void run_chunked(ThreadPool& pool, int64_t n, int64_t unit, int64_t max_units, const Fn& fn) {
  const int64_t threads = pool.size();
  const int64_t chunk = std::clamp<int64_t>(n / (8 * threads * unit), 1, max_units) * unit;
  if (threads == 1 || n <= chunk) {
    fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    for (int64_t b = next.fetch_add(chunk, std::memory_order_relaxed); b < n;
         b = next.fetch_add(chunk, std::memory_order_relaxed))
      fn(b, std::min(n, b + chunk));
  });
}

// Quantizes the activations of every token once. A prefill chunk is split over the pool (done by
// one thread this left the other idle); fewer than 4 rows are one unit of parallel_for, run inline.
void quantize_rows(ThreadPool& pool, const KernelTable& k, ActFormat f, const float* x, int64_t in_stride,
                   int64_t n_tokens, int64_t cols, uint8_t* act, int64_t act_stride) {
  pool.parallel_for(
      n_tokens,
      [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) k.prepare_act(f, x + b * in_stride, act + b * act_stride, cols);
      },
      4);
}

// The activation form a matrix takes: packed groups have their own (repack.h), rows the type's.
ActFormat input_format(const KernelTable& k, const WeightView& w) {
  return w.packed ? gemm_act_format(k, w.type) : act_format(w.type);
}

// The rows of one matrix in units of 16 (a packed group, or a tile of unpacked rows), [u0, u1).
// Pairs of adjacent groups go to gemm2 where the table has one, within the range given.
void run_units(const KernelTable& k, const MatmulOut& m, int64_t u0, int64_t u1, const void* act, int64_t act_stride,
               int64_t n_tokens) {
  const WeightView& w = *m.w;
  if (!w.packed) {
    run_rows(k, m, u0 * kTile, std::min(w.rows, u1 * kTile), act, act_stride, n_tokens);
    return;
  }
  const GemmFn gemm = k.gemm[static_cast<int>(w.type)];
  const GemmFn gemm2 = k.gemm2[static_cast<int>(w.type)];
  const int64_t group_bytes = packed_group_bytes(w.type, w.cols);
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t g = u0; g < u1;) {
    const bool pair = gemm2 != nullptr && g + 1 < u1;
    (pair ? gemm2 : gemm)(w.data + g * group_bytes, w.cols, a, act_stride, n_tokens, m.y + g * kPackRows, m.out_stride);
    g += pair ? 2 : 1;
  }
}

}  // namespace

bool packable(const KernelTable& k, const WeightView& w) {
  return !w.packed && repack_supported(w.type) && k.gemm[static_cast<int>(w.type)] != nullptr &&
         w.rows % kPackRows == 0 && w.rows > 0;
}

int64_t packed_bytes(const WeightView& w) {
  return w.rows / kPackRows * packed_group_bytes(w.type, w.cols);
}

WeightView repack_weight(const WeightView& w, uint8_t* dst) {
  const int64_t group_bytes = packed_group_bytes(w.type, w.cols);
  for (int64_t g = 0; g < w.rows / kPackRows; ++g)
    repack_group(w.type, w.row(g * kPackRows), w.cols, dst + g * group_bytes);
  WeightView out = w;
  out.data = dst;
  out.packed = true;
  return out;
}

WeightView repack_weight_for(const KernelTable& k, const WeightView& w, uint8_t* dst) {
  WeightView out = repack_weight(w, dst);
  WeightView as_bf16 = w;
  as_bf16.type = DType::BF16;
  // The packed halves are converted in place, value by value (so the packed order does not
  // matter), or left as they are when one is not a bfloat16 value.
  if (w.type == DType::F16 && k.half_to_bf16_exact != nullptr && packable(k, as_bf16) &&
      k.half_to_bf16_exact(reinterpret_cast<uint16_t*>(dst), packed_bytes(w) / 2))
    out.type = DType::BF16;
  return out;
}

void dequantize_weight_row(const WeightView& w, int64_t r, float* out) {
  if (!w.packed) {
    ref::dequantize_row(w.type, w.row(r), out, w.cols);
    return;
  }
  thread_local std::vector<uint8_t> row;
  row.resize(static_cast<size_t>(w.row_bytes));
  const uint8_t* group = w.data + r / kPackRows * packed_group_bytes(w.type, w.cols);
  unpack_row(w.type, group, w.cols, static_cast<int>(r % kPackRows), row.data());
  ref::dequantize_row(w.type, row.data(), out, w.cols);
}

void matmul_multi(ThreadPool& pool, const KernelTable& k, const std::vector<MatmulOut>& outs, const float* x,
                  int64_t in_stride, int64_t n_tokens, MatmulScratch& scratch) {
  // Matrices that take one activation form share the quantized activations and one parallel
  // region, whatever their types: Q4_K_M files mix Q4_K, Q5_K and Q6_K in Q/K/V (all per-256
  // blocks), and in separate regions each matrix paid its own hand-off and quantization. Other
  // mixes run one by one.
  const ActFormat f = input_format(k, *outs[0].w);
  for (size_t i = 1; i < outs.size(); ++i) {
    if (input_format(k, *outs[i].w) != f || outs[i].w->cols != outs[0].w->cols) {
      for (const MatmulOut& m : outs) matmul_multi(pool, k, {m}, x, in_stride, n_tokens, scratch);
      return;
    }
  }
  const int64_t cols = outs[0].w->cols;
  const void* act = x;
  int64_t act_stride = in_stride * static_cast<int64_t>(sizeof(float));
  if (f != ActFormat::F32) {
    // Quantize each token's activations once; every output row of every matrix reuses them.
    act_stride = act_row_bytes(f, cols);
    scratch.act.resize(static_cast<size_t>(act_stride * n_tokens));
    quantize_rows(pool, k, f, x, in_stride, n_tokens, cols, scratch.act.data(), act_stride);
    act = scratch.act.data();
  }
  int64_t total = 0;
  for (const MatmulOut& m : outs) total += (m.w->rows + kTile - 1) / kTile;
  // One range over the concatenated units of all matrices, in chunks of whole pairs.
  run_chunked(pool, total, 2, 32, [&](int64_t begin, int64_t end) {
    int64_t base = 0;
    for (const MatmulOut& m : outs) {
      const int64_t units = (m.w->rows + kTile - 1) / kTile;
      const int64_t lo = std::max(begin, base), hi = std::min(end, base + units);
      if (lo < hi) run_units(k, m, lo - base, hi - base, act, act_stride, n_tokens);
      base += units;
    }
  });
}

void matmul(ThreadPool& pool, const KernelTable& k, const WeightView& w, const float* x, int64_t in_stride,
            int64_t n_tokens, float* y, int64_t out_stride, MatmulScratch& scratch) {
  matmul_multi(pool, k, {{&w, y, out_stride}}, x, in_stride, n_tokens, scratch);
}

}  // namespace coda
