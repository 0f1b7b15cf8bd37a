// `coda run`: generate a continuation of a prompt, streamed to stdout.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "core/timer.h"
#include "model/model.h"
#include "sampling/chain.h"
#include "tokenizer/vocab.h"

namespace coda::cli {

namespace {

struct RunFlags {
  std::string model;
  std::string prompt = "In the beginning God";
  int n_predict = 128;
  int threads = 0;
  int ctx = 0;
  bool ignore_eos = false;
  SamplingParams sampling;  // temperature defaults to 0 here: greedy unless asked
};

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

  auto chain = SamplerChain::create(f.sampling, static_cast<int32_t>(m.config().n_vocab));
  if (!chain) return fail(chain.message());
  SamplerRng rng(f.sampling.seed);
  TokenHistory history{*tokens, {}};
  ThreadPool pool(f.threads > 0 ? f.threads : default_threads());
  auto kv_or = KvCache::create(m.config(), needed);
  if (!kv_or) return fail(kv_or.message());
  KvCache& kv = *kv_or;
  ForwardBuffers buf;
  std::vector<float> logits(static_cast<size_t>(m.config().n_vocab));

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
    const int32_t next = chain->sample(logits.data(), static_cast<int32_t>(logits.size()), history, rng);
    history.generated.push_back(next);
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
  SamplingParams& sp = flags->sampling;
  sp.temperature = 0.0f;
  // Ranges are checked by SamplingParams::validate, whose errors name the parameter and the range.
  sub->add_option("--temp", sp.temperature, "Temperature [0, 2]; 0 is greedy")->capture_default_str();
  sub->add_option("--top-k", sp.top_k, "Keep the k most probable tokens (-1/0: off)")->capture_default_str();
  sub->add_option("--top-p", sp.top_p, "Nucleus sampling mass (0, 1]")->capture_default_str();
  sub->add_option("--min-p", sp.min_p, "Drop tokens below min_p x the top probability [0, 1]")->capture_default_str();
  sub->add_option("--typical", sp.typical_p, "Locally typical sampling mass (0, 1]")->capture_default_str();
  sub->add_option("--repeat-penalty", sp.repetition_penalty, "Repetition penalty (0, 2]; 1 is off")
      ->capture_default_str();
  sub->add_option("--repeat-last-n", sp.repetition_window, "Tokens the repetition penalty looks back over (0: all)")
      ->capture_default_str();
  sub->add_option("--frequency-penalty", sp.frequency_penalty, "OpenAI frequency penalty [-2, 2]")
      ->capture_default_str();
  sub->add_option("--presence-penalty", sp.presence_penalty, "OpenAI presence penalty [-2, 2]")->capture_default_str();
  sub->add_flag("--ignore-eos", flags->ignore_eos, "Keep generating after end-of-sequence tokens");
  sub->add_option("-s,--seed", sp.seed, "Random seed for sampling")->capture_default_str();
  out.push_back({sub, [flags] { return run(*flags); }});
}

}  // namespace coda::cli
