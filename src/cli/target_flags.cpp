#include "cli/target_flags.h"

#include <cstdlib>

#include "cli/cache_flags.h"
#include "cli/commands.h"
#include "cli/llama_compat.h"
#include "client/openai_client.h"
#include "guard/guard.h"

namespace coda::cli {

void add_target_flags(CLI::App* sub, TargetFlags& f) {
  sub->add_option("--url,--base-url", f.url,
                  "An OpenAI-compatible server (vLLM, llama.cpp, SGLang, coda serve): http(s)://HOST:PORT[/v1] (a bare "
                  "HOST:PORT means http://; --base-url is vLLM's bench name)");
  sub->add_option("--model", f.model_name, "The model name sent in requests (--url targets)");
  sub->add_option("--api-key", f.api_key,
                  "Sent as 'Authorization: Bearer KEY' (--url targets; default: $OPENAI_API_KEY, which vLLM's "
                  "benchmark and the OpenAI SDKs read)");
  sub->add_option("--ca-cert", f.ca_cert,
                  "https --url targets: PEM file of the certificate authorities to trust (a private CA or a "
                  "self-signed server)")
      ->check(CLI::ExistingFile);
  sub->add_option("--timeout", f.timeout_s,
                  "Seconds without a token (silence, or only keep-alive comments) before a request counts as timed out")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("-m,--model-file", f.model_file,
                  "A GGUF file run in this process (default without --url: the bundled model)");
  sub->add_option("-t,--threads", f.threads, kThreadsHelp)
      ->check(CLI::Range(1, 256));
  sub->add_option("-c,--ctx-size", f.ctx, "Context size, in-process (default and 0: the model's)")
      ->check(CLI::Range(0, 1 << 24));
  add_cache_type_flags(sub, f.ctk, f.ctv);
  add_llama_device_flags(sub);
  sub->add_option("--max-num-seqs", f.max_num_seqs, "Sequences batched together, in-process")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("--guard", f.guard,
                  "The guard's policy, in-process: observe, stop or repair, optionally for some detectors (stop:loop)")
      ->capture_default_str();
}

void add_coherence_flags(CLI::App* sub, double& quantile, double& margin, int& max_concurrency, int& top_logprobs) {
  sub->add_option("--quantile", quantile, "Share of runs degraded that defines the threshold")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& s) {
            const double q = std::strtod(s.c_str(), nullptr);
            return q > 0 && q < 1 ? std::string() : std::string("must be between 0 and 1, e.g. 0.1");
          },
          "(0, 1)"));
  sub->add_option("--margin", margin, "Recommended max_tokens = threshold x (1 - margin)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& s) {
            const double m = std::strtod(s.c_str(), nullptr);
            return m >= 0 && m < 1 ? std::string() : std::string("must be in [0, 1), e.g. 0.2");
          },
          "[0, 1)"));
  sub->add_option("--max-concurrency", max_concurrency, "Runs in flight at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub->add_option("--top-logprobs", top_logprobs,
                  "top_logprobs asked of a server without coda's report, for the guard's signals (0: text alone)")
      ->capture_default_str()
      ->check(CLI::Range(0, 20));
}

Expected<BuiltTarget> make_target(const TargetFlags& f) {
  BuiltTarget b;
  if (!f.url.empty()) {
    if (!f.model_file.empty()) return Error("give --url or -m/--model-file, not both");
    client::Endpoint ep;
    ep.url = f.url;
    ep.api_key = f.api_key;
    if (const char* env = std::getenv("OPENAI_API_KEY"); ep.api_key.empty() && env != nullptr) ep.api_key = env;
    ep.ca_cert = f.ca_cert;
    ep.read_timeout_s = f.timeout_s;
    auto c = client::OpenAIClient::create(ep);
    if (!c) return c.error();
    auto http = std::make_unique<lab::HttpTarget>(std::move(*c));
    http->speaks_llamacpp();  // asked now, so that no request of a timed load waits for it
    b.target = std::move(http);
    return b;
  }
  GuardConfig guard;
  if (Status s = set_guard_policy(f.guard, guard); !s.ok()) return Error("--guard: " + s.message());
  GeneratorOptions opts;
  opts.threads = f.threads;
  opts.n_ctx = f.ctx;
  opts.kv_type_k = f.ctk;
  opts.kv_type_v = f.ctv;
  auto loaded = load_generator(f.model_file.empty() ? default_model_path() : f.model_file, opts);
  if (!loaded) return loaded.error();
  b.loaded = std::move(*loaded);
  lab::EngineTargetOptions to;
  to.max_batch = f.max_num_seqs;
  to.guard = guard;
  b.target = std::make_unique<lab::EngineTarget>(*b.loaded.generator, to);
  return b;
}

}  // namespace coda::cli
