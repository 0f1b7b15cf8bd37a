// `coda perplexity`: perplexity of a model on a text by llama.cpp's method (llama-perplexity's
// output format), KL divergence against a saved base, and perplexity by position bucket.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cache_flags.h"
#include "cli/commands.h"
#include "cli/llama_compat.h"
#include "lab/perplexity.h"
#include "tokenizer/vocab.h"

namespace coda::cli {

namespace {

struct PerplexityFlags {
  std::string model, file, kl_base, json_out;
  bool kl = false;
  int64_t per_position = 0;
  int threads = 0;
  int64_t ubatch = 0;  // -ub; 0: not given
  KvType ctk = KvType::F16, ctv = KvType::F16;
  PerplexityOptions opts;
};

nlohmann::json to_json(const PerplexityResult& r) {
  nlohmann::json j = {{"n_ctx", r.n_ctx},  {"chunks", r.n_chunks},         {"tokens_in_text", r.n_tokens_text},
                      {"ppl", r.ppl},      {"ppl_err", r.ppl_err},         {"nll_mean", r.nll_mean},
                      {"scored", r.count}, {"running_ppl", r.running_ppl}, {"tokens", r.tokens}};
  if (!r.buckets.empty()) {
    nlohmann::json b = nlohmann::json::array();
    for (const auto& x : r.buckets) b.push_back({{"from", x.from}, {"to", x.to}, {"count", x.count}, {"ppl", x.ppl()}});
    j["per_position"] = std::move(b);
  }
  if (r.has_kl) {
    const KlStats& k = r.kl;
    j["kl"] = {
        {"count", k.count},     {"kld_mean", k.kld_mean}, {"kld_err", k.kld_err},  {"kld_median", k.kld_median},
        {"kld_p90", k.kld_p90}, {"kld_p99", k.kld_p99},   {"kld_max", k.kld_max},  {"top1_agreement", k.top1_agreement},
        {"dp_mean", k.dp_mean}, {"dp_rms", k.dp_rms},     {"base_ppl", k.base_ppl}};
  }
  return j;
}

int perplexity(PerplexityFlags& f) {
  if (f.kl && f.kl_base.empty()) return fail("--kl-divergence needs --kl-divergence-base FILE (the saved base)");
  if (!f.kl && f.file.empty()) return fail("give the text with -f FILE");
  const std::string path = f.model.empty() ? default_model_path() : f.model;
  LoadOptions lo;
  lo.kv_type_k = f.ctk;
  lo.kv_type_v = f.ctv;
  auto model = Model::load(path, lo);
  if (!model) return fail(model.message());
  std::vector<int32_t> tokens;
  if (!f.kl) {
    std::ifstream in(f.file, std::ios::binary);
    if (!in) return fail("cannot open '" + f.file + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    auto vocab = Vocab::from_gguf((*model)->gguf());
    if (!vocab) return fail(vocab.message());
    auto t = vocab->encode(ss.str(), vocab->add_bos());
    if (!t) return fail(t.message());
    tokens = std::move(*t);
    f.opts.bos = vocab->bos();
    f.opts.add_bos = vocab->add_bos();
    f.opts.kl_base_out = f.kl_base;
  } else {
    f.opts.kl_base_in = f.kl_base;
  }
  f.opts.bucket = f.per_position;
  if (f.ubatch > 0) f.opts.n_batch = std::min<int64_t>(f.opts.n_batch, f.ubatch);
  // Batches of up to 512 tokens: enough work per section for every core, whatever the model size.
  ThreadPool pool(f.threads > 0 ? f.threads : default_threads());
  std::printf("perplexity: %s; %zu tokens, n_ctx %lld, batch %lld; the second half of each chunk is scored\n",
              path.c_str(), tokens.size(), static_cast<long long>(f.opts.n_ctx),
              static_cast<long long>(f.opts.n_batch));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = compute_perplexity(**model, tokens, f.opts, pool, [&](int64_t done, int64_t all, double ppl) {
    if (done == 1) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "perplexity: %.2f s per chunk, ETA %.1f min\n", s, s * static_cast<double>(all - 1) / 60);
    }
    std::printf("[%lld]%.4f,", static_cast<long long>(done), ppl);
    std::fflush(stdout);
  });
  if (!r) {
    std::printf("\n");
    return fail(r.message());
  }
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r->ppl, r->ppl_err);
  if (!r->buckets.empty()) {
    std::printf("\nPerplexity by position in the chunk (every position of %lld chunks of %lld tokens):\n",
                static_cast<long long>(r->n_chunks), static_cast<long long>(r->n_ctx));
    std::printf("%-14s %8s %10s\n", "positions", "tokens", "PPL");
    for (const auto& b : r->buckets)
      std::printf("%6lld-%-7lld %8lld %10.4f\n", static_cast<long long>(b.from), static_cast<long long>(b.to - 1),
                  static_cast<long long>(b.count), b.ppl());
  }
  if (r->has_kl) {
    const KlStats& k = r->kl;
    std::printf("\n====== KL divergence statistics (%lld positions) ======\n", static_cast<long long>(k.count));
    std::printf("Mean    KLD: %10.6f +/- %.6f\n", k.kld_mean, k.kld_err);
    std::printf("Maximum KLD: %10.6f\n", k.kld_max);
    std::printf("99.0%%   KLD: %10.6f\n", k.kld_p99);
    std::printf("90.0%%   KLD: %10.6f\n", k.kld_p90);
    std::printf("Median  KLD: %10.6f\n", k.kld_median);
    std::printf("Same top p: %8.3f %%\n", 100 * k.top1_agreement);
    std::printf("Mean    dp: %+10.6f (this minus base, probability of the actual next token)\n", k.dp_mean);
    std::printf("RMS     dp: %10.6f\n", k.dp_rms);
    std::printf("Base   PPL: %10.4f\n", k.base_ppl);
  }
  if (!f.json_out.empty()) {
    std::ofstream o(f.json_out);
    o << to_json(*r).dump(1) << "\n";
    if (!o) return fail("cannot write '" + f.json_out + "'");
  }
  return 0;
}

}  // namespace

void add_perplexity(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<PerplexityFlags>();
  CLI::App* sub = app.add_subcommand(
      "perplexity", "Perplexity of a model on a text (llama.cpp's method), KL divergence against a base, by position");
  sub->add_option("-m,--model", f->model, "GGUF model file (default: the bundled model)");
  sub->add_option("-f,--file", f->file, "The text (UTF-8)");
  sub->add_option("-c,--ctx-size", f->opts.n_ctx, "Tokens per chunk")
      ->capture_default_str()
      ->check(CLI::Range(4, 1 << 20));
  add_cache_type_flags(sub, f->ctk, f->ctv);
  add_llama_device_flags(sub);
  sub->add_option("--chunks", f->opts.max_chunks, "At most this many chunks (default: all)")
      ->check(CLI::Range(1, 1 << 30));
  sub->add_option("-b,--batch-size", f->opts.n_batch, "Tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  // llama.cpp's physical batch (-ub): the tokens one forward pass computes, within the logical
  // batch (-b). coda has only the one; with both, the smaller is the pass.
  sub->add_option("--ubatch-size", f->ubatch, "llama.cpp's physical batch (-ub): tokens per forward pass, at most -b")
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("-t,--threads", f->threads, "Threads (default: all cores)")->check(CLI::Range(1, 256));
  sub->add_option("--kl-divergence-base", f->kl_base,
                  "Save the scored distributions here (with -f), or read them back (with --kl-divergence)");
  sub->add_flag("--kl-divergence", f->kl, "Compare this model against the saved base (its tokens are used)");
  sub->add_option("--per-position", f->per_position,
                  "Also report perplexity by position in the chunk, in buckets of this many tokens (e.g. 128)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--json", f->json_out, "Write the results as JSON (with the evaluated tokens)");
  out.push_back({sub, [f] { return perplexity(*f); }});
}

}  // namespace coda::cli
