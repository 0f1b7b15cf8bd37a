// A loaded Llama-family model: configuration, weights bound in place to the mapped GGUF file, and
// the forward pass over a batch of tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace coda {

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> bq, bk, bv;  // Qwen2 only
  WeightView wq, wk, wv, wo;
  WeightView w_gate, w_up, w_down;
};

struct ModelWeights {
  WeightView token_embd;  // [n_vocab rows][dim]
  WeightView output;      // token_embd when the output is tied
  std::vector<float> output_norm;
  std::vector<LayerWeights> layers;
  bool tied_output = false;
};

// Where one row of a forward call goes: its sequence's cache and position.
struct RowTarget {
  KvCache* kv;
  int64_t pos;
};

// Buffers for one forward call, reused across calls so decode does not allocate.
struct ForwardBuffers {
  std::vector<float> x, xn, q, k, v, att_out, gate, up, scores, logits;
  std::vector<float> att_q, att_o;  // attention: gathered queries and outputs per thread
  std::vector<float> att_ms;        // attention: running maximum and sum per query, per thread
  std::vector<uint8_t> att_qa;      // attention over a Q8_0 key cache: the gathered queries quantized, per thread
  std::vector<uint8_t> kv_rows;     // each row's keys and values in the cache's types, before they are stored
  std::vector<std::pair<int64_t, int64_t>> row_blocks;  // attention: runs of rows of one sequence
  std::vector<RowTarget> rows;
  MatmulScratch mm;
};

// One sequence's share of a batched forward call: `n` tokens at positions kv->size()..; the
// logits of its last token go to `logits` (n_vocab floats) unless it is null, or with
// `all_logits` those of every token (n x n_vocab floats, row by row: prompt logprobs).
struct BatchSeq {
  const int32_t* tokens;
  int64_t n;
  KvCache* kv;
  float* logits;
  bool all_logits = false;
  // Every row's final hidden state after the output norm (n x dim floats), the vector embeddings
  // are pooled from (llama.cpp's t_embd); null: not wanted.
  float* hidden = nullptr;
};

struct LoadOptions {
  // Repack the matrices this CPU's kernels multiply faster in 16-row groups (kernels/repack.h):
  // the types whose kernel table prefers it (KernelTable::repack_by_default), or with repack_all
  // every type the table has a GEMM for. The environment variable CODA_REPACK=0 turns repacking
  // off and CODA_REPACK=all turns repack_all on.
  bool repack = default_repack();
  bool repack_all = default_repack_all();
  static bool default_repack();
  static bool default_repack_all();
  // How KV caches made for this model store keys and values (--cache-type-k/-v).
  KvType kv_type_k = KvType::F16;
  KvType kv_type_v = KvType::F16;
};

// What repacking did at load: how many matrices, their bytes, and the time it took.
struct RepackStats {
  int matrices = 0;
  int f16_as_bf16 = 0;  // F16 matrices holding bfloat16 values, multiplied as BF16 (matmul.h)
  int64_t bytes = 0;
  double seconds = 0;
};

class Model {
 public:
  static Expected<std::unique_ptr<Model>> load(const std::string& path, const LoadOptions& opts = {});
  // Binds an already-parsed file (tests, fuzzing).
  static Expected<std::unique_ptr<Model>> from_gguf(GgufFile file, const LoadOptions& opts = {});

  const ModelConfig& config() const { return config_; }
  const GgufFile& gguf() const { return file_; }
  const ModelWeights& weights() const { return w_; }
  // Bytes of weights one decode step reads (every matrix once, one embedding row).
  int64_t decode_weight_bytes() const;
  const RepackStats& repack_stats() const { return repack_; }

  // Runs `n` tokens at positions kv.size() .. kv.size() + n - 1, appends their keys and values to
  // `kv` and writes logits: n x n_vocab when `all_logits`, else n_vocab for the last token (none
  // when `logits` is null), and with `hidden` every token's normalised final state (n x dim).
  // Token ids out of range and context overflow are errors; the cache is unchanged on error.
  Status forward(const int32_t* tokens, int64_t n, KvCache& kv, ThreadPool& pool, ForwardBuffers& buf, float* logits,
                 bool all_logits, float* hidden = nullptr) const;
  // Several sequences in one pass (continuous batching): each with its own cache, at most 256 rows
  // in all. Weights are read once for every row, which is what makes batched decode cheaper than
  // one call per sequence. Same checks as forward(); no cache changes on error.
  Status forward_batch(const std::vector<BatchSeq>& seqs, ThreadPool& pool, ForwardBuffers& buf) const;

 private:
  Status forward_chunk(const int32_t* tokens, int64_t n, KvCache& kv, ThreadPool& pool, ForwardBuffers& buf,
                       float* logits, bool all_logits, float* hidden) const;
  void run_rows(const std::vector<BatchSeq>& seqs, ThreadPool& pool, ForwardBuffers& buf, bool all_logits) const;
  void attention(int64_t layer, ThreadPool& pool, ForwardBuffers& buf) const;
  void repack_weights(bool all_types);

  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };

  GgufFile file_;
  ModelConfig config_;
  ModelWeights w_;
  std::vector<float> inv_freq_;                   // RoPE angle per position for each rotary pair
  std::unique_ptr<uint8_t, FreeDeleter> packed_;  // every repacked matrix, one 2 MiB-aligned arena
  RepackStats repack_;
};

}  // namespace coda
