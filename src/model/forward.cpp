// The transformer forward pass: pre-norm blocks of grouped-query attention with RoPE and a SwiGLU
// feed-forward network, as Llama 2/3, Mistral and Qwen2 define them.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ops.h"
#include "model/model.h"

namespace coda {

namespace {
// Prefill runs in chunks of this many tokens so buffers stay bounded for long prompts.
constexpr int64_t kMaxChunk = 256;

void grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}
}  // namespace

Status Model::forward(const int32_t* tokens, int64_t n, KvCache& kv, ThreadPool& pool, ForwardBuffers& buf,
                      float* logits, bool all_logits) const {
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
    if (all_logits)
      out = logits + done * config_.n_vocab;
    else if (last)
      out = logits;
    CODA_RETURN_IF_ERROR(forward_chunk(tokens + done, m, kv, pool, buf, out, all_logits));
  }
  return Status::Ok();
}

Status Model::forward_chunk(const int32_t* tokens, int64_t n, KvCache& kv, ThreadPool& pool, ForwardBuffers& buf,
                            float* logits, bool all_logits) const {
  const ModelConfig& c = config_;
  const KernelTable& k = kernels();
  const int64_t start = kv.size();
  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim();
  grow(buf.x, n * dim);
  grow(buf.xn, n * dim);
  grow(buf.q, n * qd);
  grow(buf.k, n * kvd);
  grow(buf.v, n * kvd);
  grow(buf.att_out, n * qd);
  grow(buf.gate, n * c.ffn_dim);
  grow(buf.up, n * c.ffn_dim);

  for (int64_t t = 0; t < n; ++t)
    ref::dequantize_row(w_.token_embd.type, w_.token_embd.row(tokens[t]), buf.x.data() + t * dim, dim);

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
    for (int64_t t = 0; t < n; ++t)
      rms_norm(buf.x.data() + t * dim, L.attn_norm.data(), buf.xn.data() + t * dim, dim, c.norm_eps);
    matmul_multi(pool, k, {{&L.wq, buf.q.data(), qd}, {&L.wk, buf.k.data(), kvd}, {&L.wv, buf.v.data(), kvd}},
                 buf.xn.data(), dim, n, buf.mm);
    for (int64_t t = 0; t < n; ++t) {
      float* q = buf.q.data() + t * qd;
      float* kk = buf.k.data() + t * kvd;
      float* vv = buf.v.data() + t * kvd;
      if (c.qkv_bias) {
        for (int64_t i = 0; i < qd; ++i) q[i] += L.bq[static_cast<size_t>(i)];
        for (int64_t i = 0; i < kvd; ++i) kk[i] += L.bk[static_cast<size_t>(i)];
        for (int64_t i = 0; i < kvd; ++i) vv[i] += L.bv[static_cast<size_t>(i)];
      }
      rope(q, static_cast<int>(c.n_heads), static_cast<int>(c.head_dim), static_cast<int>(c.n_rot), start + t,
           inv_freq_.data(), c.rope_neox);
      rope(kk, static_cast<int>(c.n_kv_heads), static_cast<int>(c.head_dim), static_cast<int>(c.n_rot), start + t,
           inv_freq_.data(), c.rope_neox);
      std::copy(kk, kk + kvd, kv.k(l, start + t));
      std::copy(vv, vv + kvd, kv.v(l, start + t));
    }
    attention(l, n, start, kv, pool, buf);
    // x += attn_out Wo^T (the matmul writes into xn, then the residual is added).
    matmul(pool, k, L.wo, buf.att_out.data(), qd, n, buf.xn.data(), dim, buf.mm);
    for (int64_t i = 0; i < n * dim; ++i) buf.x[static_cast<size_t>(i)] += buf.xn[static_cast<size_t>(i)];

    for (int64_t t = 0; t < n; ++t)
      rms_norm(buf.x.data() + t * dim, L.ffn_norm.data(), buf.xn.data() + t * dim, dim, c.norm_eps);
    matmul_multi(pool, k, {{&L.w_gate, buf.gate.data(), c.ffn_dim}, {&L.w_up, buf.up.data(), c.ffn_dim}}, buf.xn.data(),
                 dim, n, buf.mm);
    swiglu(buf.gate.data(), buf.up.data(), n * c.ffn_dim);
    matmul(pool, k, L.w_down, buf.gate.data(), c.ffn_dim, n, buf.xn.data(), dim, buf.mm);
    for (int64_t i = 0; i < n * dim; ++i) buf.x[static_cast<size_t>(i)] += buf.xn[static_cast<size_t>(i)];
  }
  kv.commit(n);

  if (logits != nullptr) {
    const int64_t first = all_logits ? 0 : n - 1;
    const int64_t rows = n - first;
    for (int64_t t = first; t < n; ++t)
      rms_norm(buf.x.data() + t * dim, w_.output_norm.data(), buf.xn.data() + (t - first) * dim, dim, c.norm_eps);
    matmul(pool, k, w_.output, buf.xn.data(), dim, rows, logits, c.n_vocab, buf.mm);
  }
  return Status::Ok();
}

// Causal grouped-query attention of the n new tokens (positions start..start+n-1) over the cache.
void Model::attention(int64_t layer, int64_t n, int64_t start, KvCache& kv, ThreadPool& pool,
                      ForwardBuffers& buf) const {
  const ModelConfig& c = config_;
  const KernelTable& k = kernels();
  const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  const int64_t ctx = start + n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  grow(buf.scores, static_cast<int64_t>(pool.size()) * ctx);
  const int64_t jobs = n * c.n_heads;
  pool.run([&](int tid, int nt) {
    float* scores = buf.scores.data() + tid * ctx;
    for (int64_t job = tid; job < jobs; job += nt) {
      const int64_t t = job / c.n_heads, h = job % c.n_heads;
      const int64_t kvh = h / group;
      const int64_t len = start + t + 1;  // causal: positions 0..start+t
      const float* q = buf.q.data() + t * c.q_dim() + h * hd;
      for (int64_t j = 0; j < len; ++j) scores[j] = k.dot_f32(q, kv.k(layer, j) + kvh * hd, hd) * scale;
      softmax(scores, len);
      float* out = buf.att_out.data() + t * c.q_dim() + h * hd;
      std::fill(out, out + hd, 0.0f);
      for (int64_t j = 0; j < len; ++j) k.axpy_f32(scores[j], kv.v(layer, j) + kvh * hd, out, hd);
    }
  });
}

}  // namespace coda
