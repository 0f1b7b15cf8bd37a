// The transformer forward pass: pre-norm blocks of grouped-query attention with RoPE and a SwiGLU
// feed-forward network, as Llama 2/3, Mistral and Qwen2 define them.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace coda {

namespace {
// Prefill runs in chunks of this many tokens so buffers stay bounded for long prompts.
constexpr int64_t kMaxChunk = 256;

// Row-wise work between the matmuls (norms, RoPE and cache writes, residual adds) goes through
// pool.parallel_for: a prefill chunk is split over the threads (on one thread it left the other
// idle for ~8% of a 512-token prefill), and a single row (decode) runs inline, as parallel_for
// does for one unit.
void grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}
// Writes one position's keys and values (every key/value head) into the cache, as rows of the
// cache's types (the SIMD half-float rounding, or Q8_0 blocks; `rows` is the caller's scratch).
// The bytes one row's keys and values take in the cache's types (all heads).
int64_t kv_row_total(const KvCache& kv, int64_t kvd, int64_t hd) {
  return kvd / hd * (kv_row_bytes(kv.k_type(), hd) + kv_row_bytes(kv.v_type(), hd));
}

// Converts one row's keys and values to the cache's types, into `rows` (kv_row_total bytes).
void convert_kv(const KernelTable& k, const float* kk, const float* vv, int64_t kvd, int64_t hd, const KvCache& kv,
                uint8_t* rows) {
  const int64_t heads = kvd / hd, kr = kv_row_bytes(kv.k_type(), hd), vr = kv_row_bytes(kv.v_type(), hd);
  auto convert = [&](KvType t, const float* x, uint8_t* out, int64_t row) {
    switch (t) {
      case KvType::F32:
        std::memcpy(out, x, static_cast<size_t>(kvd) * sizeof(float));
        break;
      case KvType::F16:
        k.f32_to_f16(x, reinterpret_cast<uint16_t*>(out), kvd);
        break;
      case KvType::BF16:
        for (int64_t i = 0; i < kvd; ++i) reinterpret_cast<uint16_t*>(out)[i] = float_to_bf16(x[i]);
        break;
      case KvType::Q8_0:
        for (int64_t h = 0; h < heads; ++h) quantize_kv_row_q8(x + h * hd, out + h * row, hd);
        break;
    }
  };
  convert(kv.k_type(), kk, rows, kr);
  convert(kv.v_type(), vv, rows + heads * kr, vr);
}

// Stores a converted row. Not concurrently with a neighbouring position of the same cache: the
// Q8_0 and BF16 value layouts interleave pairs of positions, and writing one clears its partner.
void store_kv_row(KvCache& kv, int64_t kvd, int64_t hd, int64_t layer, int64_t pos, const uint8_t* rows) {
  const int64_t heads = kvd / hd, kr = kv_row_bytes(kv.k_type(), hd), vr = kv_row_bytes(kv.v_type(), hd);
  for (int64_t h = 0; h < heads; ++h) {
    kv.write_k(layer, h, pos, rows + h * kr);
    kv.write_v(layer, h, pos, rows + heads * kr + h * vr);
  }
}

}  // namespace

Status Model::forward(const int32_t* tokens, int64_t n, KvCache& kv, ThreadPool& pool, ForwardBuffers& buf,
                      float* logits, bool all_logits, float* hidden) const {
  if (n <= 0) return Error("forward: no tokens to evaluate");
  if (kv.size() + n > kv.capacity())
    return Error("context overflow: " + std::to_string(kv.size()) + " tokens in the context + " + std::to_string(n) +
                 " new exceed the context size of " + std::to_string(kv.capacity()) + " tokens");
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= config_.n_vocab)
      return Error("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                   " is out of range; the vocabulary has " + std::to_string(config_.n_vocab) + " tokens");
  for (int64_t done = 0; done < n; done += kMaxChunk) {
    const int64_t m = std::min(kMaxChunk, n - done);
    const bool last = done + m == n;
    float* out = nullptr;
    if (all_logits && logits != nullptr)
      out = logits + done * config_.n_vocab;
    else if (last)
      out = logits;
    CODA_RETURN_IF_ERROR(forward_chunk(tokens + done, m, kv, pool, buf, out, all_logits,
                                       hidden ? hidden + done * config_.dim : nullptr));
  }
  return Status::Ok();
}

Status Model::forward_chunk(const int32_t* tokens, int64_t n, KvCache& kv, ThreadPool& pool, ForwardBuffers& buf,
                            float* logits, bool all_logits, float* hidden) const {
  run_rows({BatchSeq{tokens, n, &kv, logits, all_logits, hidden}}, pool, buf, all_logits);
  return Status::Ok();
}

Status Model::forward_batch(const std::vector<BatchSeq>& seqs, ThreadPool& pool, ForwardBuffers& buf) const {
  int64_t rows = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const BatchSeq& q = seqs[s];
    if (q.n <= 0 || q.kv == nullptr) return Error("forward_batch: sequence " + std::to_string(s) + " has no tokens");
    if (q.kv->size() + q.n > q.kv->capacity())
      return Error("context overflow in sequence " + std::to_string(s) + ": " + std::to_string(q.kv->size()) + " + " +
                   std::to_string(q.n) + " tokens exceed its cache of " + std::to_string(q.kv->capacity()));
    for (int64_t i = 0; i < q.n; ++i)
      if (q.tokens[i] < 0 || q.tokens[i] >= config_.n_vocab)
        return Error("token id " + std::to_string(q.tokens[i]) + " is out of range; the vocabulary has " +
                     std::to_string(config_.n_vocab) + " tokens");
    for (size_t o = 0; o < s; ++o)
      if (seqs[o].kv == q.kv) return Error("forward_batch: two sequences share one KV cache");
    rows += q.n;
  }
  if (rows == 0) return Status::Ok();
  if (rows > kMaxChunk)
    return Error("forward_batch: " + std::to_string(rows) + " rows exceed " + std::to_string(kMaxChunk));
  run_rows(seqs, pool, buf, false);
  return Status::Ok();
}

// The forward pass over rows that may belong to different sequences: weights are read once for all
// rows; each row's position, RoPE, cache writes and attention use its own sequence's cache.
void Model::run_rows(const std::vector<BatchSeq>& seqs, ThreadPool& pool, ForwardBuffers& buf, bool all_logits) const {
  const ModelConfig& c = config_;
  const KernelTable& k = kernels();
  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim();
  buf.rows.clear();
  for (const BatchSeq& q : seqs)
    for (int64_t i = 0; i < q.n; ++i) buf.rows.push_back({q.kv, q.kv->size() + i});
  const int64_t n = static_cast<int64_t>(buf.rows.size());
  grow(buf.x, n * dim);
  grow(buf.xn, n * dim);
  grow(buf.q, n * qd);
  grow(buf.k, n * kvd);
  grow(buf.v, n * kvd);
  grow(buf.att_out, n * qd);
  grow(buf.gate, n * c.ffn_dim);
  grow(buf.up, n * c.ffn_dim);

  int64_t r = 0;
  for (const BatchSeq& q : seqs)
    for (int64_t i = 0; i < q.n; ++i, ++r) dequantize_weight_row(w_.token_embd, q.tokens[i], buf.x.data() + r * dim);

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
    pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        rms_norm(buf.x.data() + t * dim, L.attn_norm.data(), buf.xn.data() + t * dim, dim, c.norm_eps);
    });
    matmul_multi(pool, k, {{&L.wq, buf.q.data(), qd}, {&L.wk, buf.k.data(), kvd}, {&L.wv, buf.v.data(), kvd}},
                 buf.xn.data(), dim, n, buf.mm);
    const int64_t row_bytes = kv_row_total(*buf.rows[0].kv, kvd, c.head_dim);
    if (static_cast<int64_t>(buf.kv_rows.size()) < n * row_bytes) buf.kv_rows.resize(static_cast<size_t>(n * row_bytes));
    pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* q = buf.q.data() + t * qd;
        float* kk = buf.k.data() + t * kvd;
        float* vv = buf.v.data() + t * kvd;
        if (c.qkv_bias) {
          for (int64_t i = 0; i < qd; ++i) q[i] += L.bq[static_cast<size_t>(i)];
          for (int64_t i = 0; i < kvd; ++i) kk[i] += L.bk[static_cast<size_t>(i)];
          for (int64_t i = 0; i < kvd; ++i) vv[i] += L.bv[static_cast<size_t>(i)];
        }
        const RowTarget& row = buf.rows[static_cast<size_t>(t)];
        rope(q, static_cast<int>(c.n_heads), static_cast<int>(c.head_dim), static_cast<int>(c.n_rot), row.pos,
             inv_freq_.data(), c.rope_neox);
        rope(kk, static_cast<int>(c.n_kv_heads), static_cast<int>(c.head_dim), static_cast<int>(c.n_rot), row.pos,
             inv_freq_.data(), c.rope_neox);
        convert_kv(k, kk, vv, kvd, c.head_dim, *row.kv, buf.kv_rows.data() + t * row_bytes);
      }
    });
    // The stores, in order on this thread: cheap copies, and a range that split a pair of
    // positions would race on the pair (store_kv_row).
    for (int64_t t = 0; t < n; ++t) {
      const RowTarget& row = buf.rows[static_cast<size_t>(t)];
      store_kv_row(*row.kv, kvd, c.head_dim, l, row.pos, buf.kv_rows.data() + t * row_bytes);
    }
    attention(l, pool, buf);
    // x += attn_out Wo^T (the matmul writes into xn, then the residual is added).
    matmul(pool, k, L.wo, buf.att_out.data(), qd, n, buf.xn.data(), dim, buf.mm);
    pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* x = buf.x.data() + t * dim;
        const float* add = buf.xn.data() + t * dim;
        for (int64_t i = 0; i < dim; ++i) x[i] += add[i];
        rms_norm(x, L.ffn_norm.data(), buf.xn.data() + t * dim, dim, c.norm_eps);
      }
    });
    matmul_multi(pool, k, {{&L.w_gate, buf.gate.data(), c.ffn_dim}, {&L.w_up, buf.up.data(), c.ffn_dim}}, buf.xn.data(),
                 dim, n, buf.mm);
    // Element-wise, so split even for one row: a row of SwiGLU costs more than the hand-off.
    pool.parallel_for(
        n * c.ffn_dim, [&](int64_t i0, int64_t i1) { k.swiglu(buf.gate.data() + i0, buf.up.data() + i0, i1 - i0); },
        64);
    matmul(pool, k, L.w_down, buf.gate.data(), c.ffn_dim, n, buf.xn.data(), dim, buf.mm);
    pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
      for (int64_t i = t0 * dim; i < t1 * dim; ++i) buf.x[static_cast<size_t>(i)] += buf.xn[static_cast<size_t>(i)];
    });
  }
  for (const BatchSeq& q : seqs) q.kv->commit(q.n);

  // Hidden states for the sequences that want them (embeddings): the same norm the logits start from.
  {
    int64_t row = 0;
    for (const BatchSeq& q : seqs) {
      if (q.hidden != nullptr)
        for (int64_t i = 0; i < q.n; ++i)
          rms_norm(buf.x.data() + (row + i) * dim, w_.output_norm.data(), q.hidden + i * dim, dim, c.norm_eps);
      row += q.n;
    }
  }

  // Logits: every row of a single sequence when asked, else the last row of each sequence that
  // wants them (every row of one with all_logits), computed together and copied out.
  if (all_logits) {
    if (seqs[0].logits == nullptr) return;
    for (int64_t t = 0; t < n; ++t)
      rms_norm(buf.x.data() + t * dim, w_.output_norm.data(), buf.xn.data() + t * dim, dim, c.norm_eps);
    matmul(pool, k, w_.output, buf.xn.data(), dim, n, seqs[0].logits, c.n_vocab, buf.mm);
    return;
  }
  std::vector<float*> outs;
  int64_t first = 0;
  for (const BatchSeq& q : seqs) {
    if (q.logits != nullptr)
      for (int64_t i = q.all_logits ? 0 : q.n - 1; i < q.n; ++i) {
        rms_norm(buf.x.data() + (first + i) * dim, w_.output_norm.data(),
                 buf.xn.data() + static_cast<int64_t>(outs.size()) * dim, dim, c.norm_eps);
        outs.push_back(q.logits + (q.all_logits ? i * c.n_vocab : 0));
      }
    first += q.n;
  }
  if (outs.empty()) return;
  if (outs.size() == 1) {
    matmul(pool, k, w_.output, buf.xn.data(), dim, 1, outs[0], c.n_vocab, buf.mm);
    return;
  }
  grow(buf.logits, static_cast<int64_t>(outs.size()) * c.n_vocab);
  matmul(pool, k, w_.output, buf.xn.data(), dim, static_cast<int64_t>(outs.size()), buf.logits.data(), c.n_vocab,
         buf.mm);
  for (size_t o = 0; o < outs.size(); ++o)
    std::copy(buf.logits.data() + static_cast<int64_t>(o) * c.n_vocab,
              buf.logits.data() + static_cast<int64_t>(o + 1) * c.n_vocab, outs[o]);
}

// Causal grouped-query attention of every row over its own sequence's cache, up to its position.
//
// A job is one key/value head for a block of up to 16 consecutive rows of one sequence (a prefill
// chunk; a decoding sequence is a block of 1). Its 16 x group query vectors are gathered into one
// matrix, so each cached key and value row is read once per block instead of once per query: at a
// depth of thousands of tokens that is the difference between streaming the cache from memory for
// every token and reusing it from cache.
//
// The keys are visited in chunks of kKeyChunk positions with a running softmax (the "online"
// softmax of flash attention): scores of one chunk, their exponentials against the running
// maximum, and their weighted values added to the output, whose rows are rescaled when a row's
// maximum grows. The scores of a job (64 KiB for 64 query vectors) then stay in L2 at any depth;
// whole rows of scores (0.56 MiB for the 32 query vectors of a job at depth 4,096) left L2 and came
// back for the softmax and again for the values. Chunks start at fixed positions and each row's
// arithmetic does not depend on its block, so a prefix-cache hit still reproduces a cold run bit
// for bit. Scores past a row's own position (causality within the block) are zeroed.
//
// Jobs are taken from a shared counter, head by head: the two threads then work on the same
// head's cache (it stays in the caches between the jobs), and a thread slowed by a neighbour on
// this machine does fewer jobs instead of holding the other one up.
void Model::attention(int64_t layer, ThreadPool& pool, ForwardBuffers& buf) const {
  constexpr int64_t kRowBlock = 16;
  constexpr int64_t kKeyChunk = 256;  // a multiple of the key blocks (kKeyBlock)
  const ModelConfig& c = config_;
  const KernelTable& k = kernels();
  const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  // Blocks of consecutive rows of the same sequence.
  std::vector<std::pair<int64_t, int64_t>>& blocks = buf.row_blocks;
  blocks.clear();
  const auto n_rows = static_cast<int64_t>(buf.rows.size());
  for (int64_t t = 0; t < n_rows;) {
    int64_t e = t + 1;
    while (e < n_rows && e - t < kRowBlock &&
           buf.rows[static_cast<size_t>(e)].kv == buf.rows[static_cast<size_t>(t)].kv &&
           buf.rows[static_cast<size_t>(e)].pos == buf.rows[static_cast<size_t>(e - 1)].pos + 1)
      ++e;
    blocks.emplace_back(t, e);
    t = e;
  }
  const int64_t qv = kRowBlock * group;  // query vectors per job at most
  // The scores carry log2(e): the softmax takes 2^(s - max), the same weights as e^(s / log2(e) - ...)
  // without a multiply by log2(e) in the exponential and with an exact range reduction (exp2_sum).
  const auto scale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(hd)));
  const auto threads = static_cast<int64_t>(pool.size());
  grow(buf.scores, threads * qv * kKeyChunk);
  grow(buf.att_q, threads * qv * hd);
  grow(buf.att_o, threads * qv * hd);
  grow(buf.att_ms, threads * qv * 2);
  const bool k_q8 = c.kv_type_k == KvType::Q8_0;  // every cache of this model has its types
  const int64_t qa_stride = act_row_bytes(ActFormat::Q8_32, hd);
  if (k_q8 && static_cast<int64_t>(buf.att_qa.size()) < threads * qv * qa_stride)
    buf.att_qa.resize(static_cast<size_t>(threads * qv * qa_stride));
  const auto n_blocks = static_cast<int64_t>(blocks.size());
  const int64_t jobs = n_blocks * c.n_kv_heads;
  const bool simd = hd % 8 == 0;
  const KernelTable& kt = simd ? k : scalar_kernels();
  std::atomic<int64_t> next{0};
  pool.run([&](int tid, int) {
    float* scores = buf.scores.data() + tid * qv * kKeyChunk;
    float* qm = buf.att_q.data() + tid * qv * hd;
    float* om = buf.att_o.data() + tid * qv * hd;
    float* row_max = buf.att_ms.data() + tid * qv * 2;
    float* row_sum = row_max + qv;
    uint8_t* qa = k_q8 ? buf.att_qa.data() + tid * qv * qa_stride : nullptr;
    for (int64_t job = next.fetch_add(1, std::memory_order_relaxed); job < jobs;
         job = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t kvh = job / n_blocks;
      const auto [t0, t1] = blocks[static_cast<size_t>(job % n_blocks)];
      const int64_t nq = (t1 - t0) * group;
      KvCache* kv = buf.rows[static_cast<size_t>(t0)].kv;
      const int64_t len = buf.rows[static_cast<size_t>(t1 - 1)].pos + 1;  // the block's last row sees most
      for (int64_t t = t0; t < t1; ++t)
        std::copy_n(buf.q.data() + t * c.q_dim() + kvh * group * hd, group * hd, qm + (t - t0) * group * hd);
      if (k_q8)  // as llama.cpp does for a Q8_0 key cache: the queries take the keys' 8-bit form
        for (int64_t i = 0; i < nq; ++i) k.prepare_act(ActFormat::Q8_32, qm + i * hd, qa + i * qa_stride, hd);
      std::fill_n(om, nq * hd, 0.0f);
      std::fill_n(row_max, nq, -std::numeric_limits<float>::infinity());
      std::fill_n(row_sum, nq, 0.0f);
      const auto* k16 = reinterpret_cast<const uint16_t*>(kv->k_head(layer, kvh));
      const auto* k32 = reinterpret_cast<const float*>(kv->k_head(layer, kvh));
      const auto* v16 = reinterpret_cast<const uint16_t*>(kv->v_head(layer, kvh));
      const auto* v32 = reinterpret_cast<const float*>(kv->v_head(layer, kvh));
      for (int64_t c0 = 0; c0 < len; c0 += kKeyChunk) {
        const int64_t n = std::min(kKeyChunk, len - c0);
        // Keys are in blocks of kKeyBlock positions, so position c0's block starts at c0 * hd.
        if (k_q8)
          kt.attn_scores_q8(qa, qa_stride, nq, kv->k_head(layer, kvh) + c0 * kv_row_bytes(KvType::Q8_0, hd), n, hd,
                            scale, scores, kKeyChunk);
        else if (kv->k_type() == KvType::F16)
          kt.attn_scores_f16(qm, nq, k16 + c0 * hd, n, hd, scale, scores, kKeyChunk);
        else
          kt.attn_scores(qm, nq, k32 + c0 * hd, n, hd, scale, scores, kKeyChunk);
        for (int64_t i = 0; i < nq; ++i) {
          float* si = scores + i * kKeyChunk;
          const int64_t own = std::clamp<int64_t>(buf.rows[static_cast<size_t>(t0 + i / group)].pos + 1 - c0, 0, n);
          if (own > 0) {
            const float m = std::max(row_max[i], k.max_f32(si, own));
            if (!(m < std::numeric_limits<float>::infinity())) {
              // An infinite or NaN score (a broken model): the row's output is NaN, as a plain
              // softmax would make it, and its later chunks add nothing.
              row_max[i] = std::numeric_limits<float>::infinity();
              row_sum[i] = std::numeric_limits<float>::quiet_NaN();
              std::fill(si, si + n, 0.0f);
              continue;
            }
            if (m > row_max[i]) {  // rescale what the earlier chunks added (exp2(-inf) = 0 on the first)
              const float f = std::exp2(row_max[i] - m);
              row_sum[i] *= f;
              for (int64_t d = 0; d < hd; ++d) om[i * hd + d] *= f;
              row_max[i] = m;
            }
            row_sum[i] += k.exp2_sum(si, si, own, m);
          }
          std::fill(si + own, si + n, 0.0f);
        }
        if (kv->v_type() == KvType::BF16)
          kt.attn_values_bf16(scores, nq, kKeyChunk, v16 + c0 * hd, n, hd, om);
        else if (kv->v_type() == KvType::Q8_0)
          kt.attn_values_q8(scores, nq, kKeyChunk, kv->v_head(layer, kvh) + c0 * hd, kv->v_scales(layer, kvh) + c0,
                            kv->value_scale_stride(), n, hd, om);
        else if (kv->v_type() == KvType::F16)
          kt.attn_values_f16(scores, nq, kKeyChunk, v16 + c0 * hd, hd, n, hd, om);
        else
          kt.attn_values(scores, nq, kKeyChunk, v32 + c0 * hd, hd, n, hd, om);
      }
      for (int64_t i = 0; i < nq; ++i) {
        const float f = row_sum[i] == 0 ? 0.0f : 1.0f / row_sum[i];  // NaN stays NaN
        float* out = buf.att_out.data() + (t0 + i / group) * c.q_dim() + (kvh * group + i % group) * hd;
        for (int64_t d = 0; d < hd; ++d) out[d] = om[i * hd + d] * f;
      }
    }
  });
}

}  // namespace coda
