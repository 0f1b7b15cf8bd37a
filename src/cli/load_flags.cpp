#include "cli/load_flags.h"

#include <cstdio>

#include "cli/sampling_flags.h"
#include "core/strings.h"

namespace coda::cli {

void add_load_flags(CLI::App* sub, LoadFlags& f) {
  sub->add_option("--prompts,--dataset-path", f.prompts_file,
                  "Prompts: JSONL ({\"prompt\"|\"messages\", \"group\"} per line), a JSON array of them, or a "
                  "ShareGPT dump (--dataset-path is vLLM's name)");
  // vLLM's `bench serve` names the file's kind; coda reads it from the file itself.
  sub->add_option("--dataset-name", f.dataset_name,
                  "Accepted for vLLM's bench serve: sharegpt or custom (JSONL with \"prompt\"); coda reads the kind "
                  "from the file given by --prompts/--dataset-path")
      ->check(CLI::IsMember({"sharegpt", "custom"}));
  sub->add_option("--set", f.sets, "Built-in prompt sets: exam, narrative, technical or all (comma-separated)")
      ->capture_default_str();
  sub->add_option("--lang", f.languages, "Built-in prompt languages: en, it, fr (comma-separated)")
      ->capture_default_str();
  sub->add_option("--api", f.api,
                  "The built-in prompts' route: completions (plain text, for a base model), chat (a user message, "
                  "for an instruct model behind /v1/chat/completions) or auto (chat when the model has a chat "
                  "template: /props, else a one-token chat request; the GGUF in process)")
      ->capture_default_str()
      ->check(CLI::IsMember({"completions", "chat", "auto"}));
  auto* per_min = sub->add_option("--rate", f.load.rate_per_min, "Requests per minute (0: all at once)")
                      ->capture_default_str()
                      ->check(CLI::NonNegativeNumber);
  // vLLM's --request-rate counts per second, and "inf" sends everything at once.
  sub->add_option_function<std::string>(
         "--request-rate",
         [&f](const std::string& v) {
           if (v == "inf") {
             f.load.rate_per_min = 0;
             return;
           }
           double per_s = 0;
           if (!parse_number(v, per_s) || !(per_s > 0) || per_s > 1e6)
             throw CLI::ValidationError("--request-rate", "'" + v + "': give requests per second (> 0) or inf");
           f.load.rate_per_min = per_s * 60;
         },
         "Requests per second, or inf for all at once (vLLM's bench serve flag; --rate counts per minute)")
      ->type_name("RATE")
      ->excludes(per_min);
  sub->add_option("--burstiness", f.load.burstiness, "Gamma shape of the arrival gaps; 1 is Poisson")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-concurrency", f.load.max_concurrency, "Requests in flight at most (0: unlimited)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--requests,--num-prompts", f.load.requests, "Requests per set (--num-prompts is vLLM's name)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  sub->add_option("--sets", f.load.sets, "Independent sets")->capture_default_str()->check(CLI::Range(1, 10000));
  sub->add_option("-n,--max-tokens", f.load.max_tokens, "max_tokens of every request")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--failure-reasons", f.failure_reasons,
                  "finish_reasons that count as failures (comma-separated; e.g. length,repetition)")
      ->capture_default_str();
  sub->add_flag("--trust-finish-reason", f.load.trust_finish_reason,
                "Count a request answered finish_reason \"stop\" at exactly max_tokens as the server says (a "
                "success); by default it counts as \"length\", since some servers say \"stop\" for a cut at the limit");
  sub->add_option("--goodput-ttft", f.load.goodput_ttft_ms, "Goodput SLO: TTFT at most this many ms (0: none)");
  sub->add_option("--goodput-tpot", f.load.goodput_tpot_ms, "Goodput SLO: TPOT at most this many ms (0: none)");
  sub->add_flag("--no-stream", f.no_stream, "Non-streaming requests (no TTFT or ITL)");
  // -s/--seed (a sampling flag) seeds the run: arrivals, prompt choice, and a distinct seed per request.
  add_sampling_flags(sub, f.sampling);
}

std::string resolve_api(const std::string& api, lab::Target& target, const char* command) {
  if (api != "auto") return api;
  std::string why;
  const std::string route = target.takes_chat(why) ? "chat" : "completions";
  std::fprintf(stderr, "coda %s: --api auto: %s (%s)\n", command, route.c_str(), why.c_str());
  return route;
}

Expected<std::vector<lab::BenchPrompt>> finish_load_flags(const CLI::App* sub, LoadFlags& f, const std::string& model,
                                                          lab::Target& target) {
  if (f.prompts_file.empty()) f.api = resolve_api(f.api, target, sub->get_name().c_str());
  auto prompts = f.prompts_file.empty() ? lab::builtin_prompts(f.sets, f.languages, f.api == "chat")
                                        : lab::load_prompts(f.prompts_file);
  if (!prompts) return prompts.error();
  f.load.sampling = sampling_fields(sub, f.sampling);
  f.load.sampling.erase("seed");
  f.load.seed = f.sampling.sampling.seed;
  f.load.model = model;
  f.load.stream = !f.no_stream;
  f.load.failure_reasons = split_list(f.failure_reasons);
  if (f.load.failure_reasons.empty()) return Error("--failure-reasons: give at least one finish_reason");
  return prompts;
}

}  // namespace coda::cli
