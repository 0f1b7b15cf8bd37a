// Perplexity of a model on a text, and the KL divergence of its next-token distributions against a
// saved base: how a quantization, a kernel change or another engine's numbers are judged.
//
// The method is llama.cpp's (llama-perplexity), so the figures compare with it: the text is
// tokenized once (with BOS when the vocabulary adds one), cut into non-overlapping chunks of
// `n_ctx` tokens, each chunk is evaluated from an empty cache with its first token replaced by BOS,
// and only the second half of each chunk is scored (every scored token then has at least n_ctx/2
// tokens of context). PPL = exp(mean NLL); its uncertainty is PPL x the standard error of the NLL.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace coda {

struct PerplexityOptions {
  int64_t n_ctx = 512;     // tokens per chunk
  int64_t n_batch = 512;   // tokens per forward call
  int64_t max_chunks = 0;  // 0: every whole chunk of the text
  bool add_bos = true;     // replace each chunk's first token by BOS (when the vocabulary has one)
  int32_t bos = -1;
  // Per-position report: every position of every chunk (not only the second half) scored by
  // position bucket of this width; 0 turns it off.
  int64_t bucket = 0;
  std::string kl_base_out;  // save the scored positions' log-probabilities here
  std::string kl_base_in;   // compare against this saved base (its tokens are used; `tokens` is ignored)
};

struct PositionBucket {
  int64_t from = 0, to = 0;  // positions [from, to) of the predicted tokens within a chunk
  int64_t count = 0;
  double nll = 0;  // sum
  double ppl() const { return count ? std::exp(nll / static_cast<double>(count)) : 0.0; }
};

struct KlStats {
  int64_t count = 0;
  double kld_mean = 0, kld_err = 0;  // mean KL(base || this) in nats, and its standard error
  double kld_median = 0, kld_p90 = 0, kld_p99 = 0, kld_max = 0;
  double top1_agreement = 0;       // share of positions whose most likely token is the same
  double dp_mean = 0, dp_rms = 0;  // probability of the actual next token: this minus base
  double base_ppl = 0;             // the base's perplexity over the same positions
};

struct PerplexityResult {
  int64_t n_ctx = 0, n_chunks = 0, n_tokens_text = 0;
  std::vector<double> running_ppl;  // after each chunk, as llama.cpp prints [i]ppl
  double ppl = 0, ppl_err = 0;
  double nll_mean = 0;
  int64_t count = 0;            // scored tokens
  std::vector<int32_t> tokens;  // the evaluated tokens, chunk after chunk (BOS in place where put)
  std::vector<PositionBucket> buckets;
  bool has_kl = false;
  KlStats kl;
};

// Called after each chunk with (chunks done, chunks in all, running PPL).
using PerplexityProgress = std::function<void(int64_t, int64_t, double)>;

Expected<PerplexityResult> compute_perplexity(const Model& model, const std::vector<int32_t>& tokens,
                                              const PerplexityOptions& opts, ThreadPool& pool,
                                              const PerplexityProgress& progress = {});

}  // namespace coda
