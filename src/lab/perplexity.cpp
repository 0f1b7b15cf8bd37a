#include "lab/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/fp16.h"
#include "model/kv_cache.h"

namespace coda {

namespace {

// The KL base file: what the scored positions' distributions were, so another model or build can
// be compared position by position without running the base again.
//   "CODAKLD1", then u32 n_vocab, n_ctx, n_chunks, first (the first scored position of a chunk),
//   then int32 tokens[n_chunks * n_ctx] (as evaluated, BOS in place),
//   then for each chunk and each scored position j in [first, n_ctx - 1): n_vocab fp16 log-probs.
// fp16 keeps the file at two bytes per probability (as llama.cpp's is); the log-probs are
// renormalized when read, so rounding cannot make a distribution sum to other than 1.
constexpr char kMagic[8] = {'C', 'O', 'D', 'A', 'K', 'L', 'D', '1'};
constexpr size_t kHeaderBytes = 8 + 4 * 4;

struct KlHeader {
  uint32_t n_vocab = 0, n_ctx = 0, n_chunks = 0, first = 0;
};

Status write_all(std::ofstream& o, const void* p, size_t n, const std::string& path) {
  o.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  if (!o) return Error("cannot write the KL base '" + path + "' (disk full?)");
  return {};
}

Expected<KlHeader> read_kl_header(std::ifstream& in, const std::string& path, int64_t n_vocab) {
  char magic[8];
  KlHeader h;
  uint32_t f[4];
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(f), sizeof f);
  if (!in || std::memcmp(magic, kMagic, 8) != 0)
    return Error("'" + path + "' is not a coda KL base (write one with --kl-divergence-base)");
  h = {f[0], f[1], f[2], f[3]};
  if (static_cast<int64_t>(h.n_vocab) != n_vocab)
    return Error("the KL base '" + path + "' has a vocabulary of " + std::to_string(h.n_vocab) +
                 " tokens and this model " + std::to_string(n_vocab) + "; compare models that share a vocabulary");
  if (h.n_ctx < 2 || h.n_chunks == 0 || h.first != h.n_ctx / 2)
    return Error("the KL base '" + path + "' has an invalid header (n_ctx " + std::to_string(h.n_ctx) + ", chunks " +
                 std::to_string(h.n_chunks) + ")");
  // The size must be exactly what the header promises: a cut or padded file is refused up front.
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  const uint64_t rows = static_cast<uint64_t>(h.n_chunks) * (h.n_ctx - 1 - h.first);
  const uint64_t want = kHeaderBytes + 4ull * h.n_chunks * h.n_ctx + rows * h.n_vocab * 2;
  if (size != want)
    return Error("the KL base '" + path + "' is " + std::to_string(size) + " bytes; its header promises " +
                 std::to_string(want) + " (a cut or damaged file)");
  in.seekg(static_cast<std::streamoff>(kHeaderBytes));
  return h;
}

// log-softmax of one row into `out`; returns the index of the largest logit.
int64_t log_softmax(const float* row, int64_t n, std::vector<float>& out) {
  out.resize(static_cast<size_t>(n));
  int64_t arg = 0;
  float mx = row[0];
  for (int64_t k = 1; k < n; ++k)
    if (row[k] > mx) mx = row[k], arg = k;
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) sum += std::exp(static_cast<double>(row[k] - mx));
  const auto lse = static_cast<float>(std::log(sum));
  for (int64_t k = 0; k < n; ++k) out[static_cast<size_t>(k)] = row[k] - mx - lse;
  return arg;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

}  // namespace

Expected<PerplexityResult> compute_perplexity(const Model& model, const std::vector<int32_t>& text_tokens,
                                              const PerplexityOptions& o, ThreadPool& pool,
                                              const PerplexityProgress& progress) {
  const ModelConfig& cfg = model.config();
  const int64_t V = cfg.n_vocab;
  PerplexityResult r;

  // The tokens and chunking: from the text, or from the KL base when comparing against one.
  std::ifstream base;
  KlHeader kh;
  std::vector<int32_t> tokens;
  int64_t n_ctx = o.n_ctx;
  bool bos_in_place = false;
  if (!o.kl_base_in.empty()) {
    base.open(o.kl_base_in, std::ios::binary);
    if (!base) return Error("cannot open the KL base '" + o.kl_base_in + "'");
    auto h = read_kl_header(base, o.kl_base_in, V);
    if (!h) return h.error();
    kh = *h;
    n_ctx = kh.n_ctx;
    tokens.resize(static_cast<size_t>(kh.n_chunks) * kh.n_ctx);
    base.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 4));
    if (!base) return Error("cannot read the KL base '" + o.kl_base_in + "'");
    bos_in_place = true;  // the base stored the chunks as it evaluated them
    for (int32_t t : tokens)
      if (t < 0 || t >= V) return Error("the KL base '" + o.kl_base_in + "' holds token id " + std::to_string(t));
  } else {
    tokens = text_tokens;
  }
  if (n_ctx < 4) return Error("-c: a chunk needs at least 4 tokens");
  if (n_ctx > cfg.n_ctx_train && cfg.n_ctx_train > 0)
    return Error("-c " + std::to_string(n_ctx) + " is more than the model's context of " +
                 std::to_string(cfg.n_ctx_train) + " tokens");
  if (o.n_batch < 1) return Error("-b: the batch must be at least 1 token");
  r.n_ctx = n_ctx;
  r.n_tokens_text = static_cast<int64_t>(tokens.size());
  int64_t n_chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
  if (n_chunks == 0)
    return Error("the text has " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of -c " +
                 std::to_string(n_ctx) + "; give a longer text or a smaller -c");
  if (o.max_chunks > 0) n_chunks = std::min(n_chunks, o.max_chunks);
  r.n_chunks = n_chunks;
  const int64_t first = n_ctx / 2;

  // The chunks as evaluated: each one's first token replaced by BOS (a KL base stored them so).
  r.tokens.assign(tokens.begin(), tokens.begin() + n_chunks * n_ctx);
  if (!bos_in_place && o.add_bos && o.bos >= 0)
    for (int64_t c = 0; c < n_chunks; ++c) r.tokens[static_cast<size_t>(c * n_ctx)] = o.bos;

  std::ofstream save;
  if (!o.kl_base_out.empty()) {
    save.open(o.kl_base_out, std::ios::binary | std::ios::trunc);
    if (!save) return Error("cannot create the KL base '" + o.kl_base_out + "'");
    const uint32_t f[4] = {static_cast<uint32_t>(V), static_cast<uint32_t>(n_ctx), static_cast<uint32_t>(n_chunks),
                           static_cast<uint32_t>(first)};
    if (auto s = write_all(save, kMagic, 8, o.kl_base_out); !s.ok()) return s.error();
    if (auto s = write_all(save, f, sizeof f, o.kl_base_out); !s.ok()) return s.error();
    if (auto s = write_all(save, r.tokens.data(), r.tokens.size() * 4, o.kl_base_out); !s.ok()) return s.error();
  }

  if (o.bucket > 0)
    for (int64_t from = 0; from < n_ctx; from += o.bucket)
      r.buckets.push_back({from, std::min(n_ctx, from + o.bucket), 0, 0});

  auto kv_or = KvCache::create(cfg, n_ctx);
  if (!kv_or) return kv_or.error();
  KvCache& kv = *kv_or;
  ForwardBuffers buf;
  std::vector<float> logits, lp, lb;
  std::vector<uint16_t> half(static_cast<size_t>(V));
  std::vector<double> klds;
  double nll = 0, nll2 = 0, kl_sum = 0, kl_sum2 = 0, dp_sum = 0, dp_sum2 = 0, base_nll = 0;
  int64_t count = 0, same_top = 0;

  for (int64_t c = 0; c < n_chunks; ++c) {
    const int32_t* chunk = r.tokens.data() + c * n_ctx;
    kv.clear();
    for (int64_t at = 0; at < n_ctx; at += o.n_batch) {
      const int64_t n = std::min(o.n_batch, n_ctx - at);
      logits.resize(static_cast<size_t>(n * V));
      if (auto s = model.forward(chunk + at, n, kv, pool, buf, logits.data(), true); !s.ok()) return s.error();
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = at + i;  // the logits at j predict the token at j + 1
        if (j + 1 >= n_ctx) break;
        const bool scored = j >= first;
        if (!scored && r.buckets.empty()) continue;
        const int64_t top = log_softmax(logits.data() + i * V, V, lp);
        const int32_t next = chunk[j + 1];
        const double tok_nll = -static_cast<double>(lp[static_cast<size_t>(next)]);
        if (!r.buckets.empty()) {
          PositionBucket& b = r.buckets[static_cast<size_t>((j + 1) / o.bucket)];
          ++b.count;
          b.nll += tok_nll;
        }
        if (!scored) continue;
        nll += tok_nll;
        nll2 += tok_nll * tok_nll;
        ++count;
        if (save.is_open()) {
          for (int64_t k = 0; k < V; ++k) half[static_cast<size_t>(k)] = float_to_fp16(lp[static_cast<size_t>(k)]);
          if (auto s = write_all(save, half.data(), half.size() * 2, o.kl_base_out); !s.ok()) return s.error();
        }
        if (base.is_open()) {
          base.read(reinterpret_cast<char*>(half.data()), static_cast<std::streamsize>(half.size() * 2));
          if (!base) return Error("cannot read the KL base '" + o.kl_base_in + "'");
          lb.resize(static_cast<size_t>(V));
          for (int64_t k = 0; k < V; ++k) lb[static_cast<size_t>(k)] = fp16_to_float(half[static_cast<size_t>(k)]);
          const int64_t base_top = log_softmax(lb.data(), V, lb);  // renormalized after rounding
          double kl = 0;
          for (int64_t k = 0; k < V; ++k) {
            const double b = lb[static_cast<size_t>(k)];
            kl += std::exp(b) * (b - static_cast<double>(lp[static_cast<size_t>(k)]));
          }
          kl = std::max(0.0, kl);
          klds.push_back(kl);
          kl_sum += kl;
          kl_sum2 += kl * kl;
          same_top += base_top == top;
          const double dp = std::exp(-tok_nll) - std::exp(static_cast<double>(lb[static_cast<size_t>(next)]));
          dp_sum += dp;
          dp_sum2 += dp * dp;
          base_nll -= lb[static_cast<size_t>(next)];
        }
      }
    }
    r.running_ppl.push_back(std::exp(nll / static_cast<double>(count)));
    if (progress) progress(c + 1, n_chunks, r.running_ppl.back());
  }
  if (save.is_open()) {
    save.close();
    if (!save) return Error("cannot write the KL base '" + o.kl_base_out + "'");
  }

  const auto cnt = static_cast<double>(count);
  r.count = count;
  r.nll_mean = nll / cnt;
  r.ppl = std::exp(r.nll_mean);
  const double var = nll2 / cnt - r.nll_mean * r.nll_mean;
  r.ppl_err = var > 0 && count > 1 ? r.ppl * std::sqrt(var / (cnt - 1)) : 0;
  if (base.is_open()) {
    r.has_kl = true;
    KlStats& k = r.kl;
    k.count = count;
    k.kld_mean = kl_sum / cnt;
    const double kvar = kl_sum2 / cnt - k.kld_mean * k.kld_mean;
    k.kld_err = kvar > 0 && count > 1 ? std::sqrt(kvar / (cnt - 1)) : 0;
    k.kld_median = quantile(klds, 0.5);
    k.kld_p90 = quantile(klds, 0.9);
    k.kld_p99 = quantile(klds, 0.99);
    k.kld_max = klds.empty() ? 0 : *std::max_element(klds.begin(), klds.end());
    k.top1_agreement = static_cast<double>(same_top) / cnt;
    k.dp_mean = dp_sum / cnt;
    k.dp_rms = std::sqrt(dp_sum2 / cnt);
    k.base_ppl = std::exp(base_nll / cnt);
  }
  return r;
}

}  // namespace coda
