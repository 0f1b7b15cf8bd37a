// `coda run`: generate a continuation of a prompt, streamed to stdout.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "core/timer.h"
#include "model/model.h"
#include "tokenizer/vocab.h"

namespace coda::cli {

namespace {

struct RunFlags {
  std::string model;
  std::string prompt = "In the beginning God";
  int n_predict = 128;
  int threads = 0;
  int ctx = 0;
  float temp = 0.0f;
  bool ignore_eos = false;
  uint64_t seed = 0;
};

int32_t pick(const std::vector<float>& logits, float temp, std::mt19937_64& rng) {
  if (temp <= 0) return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // Plain temperature sampling; the full sampler chain arrives with the generation layer.
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - max) / temp);
  double u = std::uniform_real_distribution<double>(0, sum)(rng);
  for (size_t i = 0; i < p.size(); ++i)
    if ((u -= p[i]) <= 0) return static_cast<int32_t>(i);
  return static_cast<int32_t>(p.size() - 1);
}

int run(const RunFlags& f) {
  const std::string path = f.model.empty() ? default_model_path() : f.model;
  auto model = Model::load(path);
  if (!model) return fail(model.message());
  const Model& m = **model;
  auto vocab = Vocab::from_gguf(m.gguf());
  if (!vocab) return fail(path + ": " + vocab.message());
  auto tokens = vocab->encode(f.prompt, vocab->add_bos());
  if (!tokens) return fail(tokens.message());
  if (tokens->empty()) return fail("the prompt is empty and the model adds no BOS token; give a prompt with -p");
  const int64_t n_ctx = f.ctx > 0 ? f.ctx : m.config().n_ctx_train;
  const int64_t needed = static_cast<int64_t>(tokens->size()) + f.n_predict;
  if (needed > n_ctx)
    return fail("the prompt (" + std::to_string(tokens->size()) + " tokens) plus -n " + std::to_string(f.n_predict) +
                " exceeds the context of " + std::to_string(n_ctx) + " tokens; lower -n or raise -c");

  ThreadPool pool(f.threads > 0 ? f.threads : default_threads());
  auto kv_or = KvCache::create(m.config(), needed);
  if (!kv_or) return fail(kv_or.message());
  KvCache& kv = *kv_or;
  ForwardBuffers buf;
  std::vector<float> logits(static_cast<size_t>(m.config().n_vocab));
  std::mt19937_64 rng(f.seed);

  std::fputs(f.prompt.c_str(), stdout);
  std::fflush(stdout);
  Timer prefill_timer;
  if (auto s = m.forward(tokens->data(), static_cast<int64_t>(tokens->size()), kv, pool, buf, logits.data(), false);
      !s.ok())
    return fail(s.message());
  const double prefill_ms = prefill_timer.ms();

  StreamDecoder out(*vocab);
  Timer gen_timer;
  int n_gen = 0;
  for (; n_gen < f.n_predict; ++n_gen) {
    const int32_t next = pick(logits, f.temp, rng);
    if (!f.ignore_eos && vocab->is_eog(next)) break;
    std::fputs(out.push(next).c_str(), stdout);
    std::fflush(stdout);
    if (n_gen + 1 == f.n_predict) {
      ++n_gen;
      break;
    }
    if (auto s = m.forward(&next, 1, kv, pool, buf, logits.data(), false); !s.ok()) return fail(s.message());
  }
  std::fputs(out.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  const double gen_ms = gen_timer.ms();
  const double n_prompt = static_cast<double>(tokens->size());
  std::fprintf(stderr,
               "coda: prompt %d tokens in %.2f ms (%.2f tokens/s) | generation %d tokens in %.2f ms (%.2f tokens/s, "
               "%.2f ms/token) | %d threads\n",
               static_cast<int>(n_prompt), prefill_ms, n_prompt / (prefill_ms / 1000), n_gen, gen_ms,
               n_gen > 0 ? n_gen / (gen_ms / 1000) : 0.0, n_gen > 0 ? gen_ms / n_gen : 0.0, pool.size());
  return 0;
}

}  // namespace

void add_run(CLI::App& app, std::vector<Command>& out) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* sub = app.add_subcommand("run", "Continue a prompt with a model (greedy with --temp 0)");
  sub->add_option("-m,--model", flags->model, "GGUF model file (default: the bundled model)");
  sub->add_option("-p,--prompt", flags->prompt, "Prompt text")->capture_default_str();
  sub->add_option("-n,--n-predict", flags->n_predict, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  sub->add_option("-t,--threads", flags->threads, "Threads (default: all cores)")->check(CLI::Range(1, 256));
  sub->add_option("-c,--ctx-size", flags->ctx, "Context size (default: the model's trained context)")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--temp", flags->temp, "Temperature; 0 is greedy")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  sub->add_flag("--ignore-eos", flags->ignore_eos, "Keep generating after end-of-sequence tokens");
  sub->add_option("-s,--seed", flags->seed, "Random seed for sampling")->capture_default_str();
  out.push_back({sub, [flags] { return run(*flags); }});
}

}  // namespace coda::cli
