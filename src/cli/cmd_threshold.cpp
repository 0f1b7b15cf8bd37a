// `coda threshold`: the coherence threshold per prompt group (Kaplan-Meier over long generations).
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/load_flags.h"
#include "cli/progress.h"
#include "cli/sampling_flags.h"
#include "cli/target_flags.h"
#include "guard/guard.h"
#include "lab/threshold.h"

namespace coda::cli {

namespace {

struct ThresholdFlags {
  TargetFlags target;
  GenerationRequest sampling;
  std::string prompts_file, sets = "narrative,technical,exam", languages = "en,it,fr", out_dir;
  std::string api = "completions";  // the built-in prompts' route
  lab::ThresholdOptions opts;
};

int threshold(ThresholdFlags& f, const CLI::App* sub) {
  f.opts.sampling = sampling_fields(sub, f.sampling);
  f.opts.sampling.erase("seed");
  f.opts.seed = f.sampling.sampling.seed;
  f.opts.model = f.target.model_name;
  if (f.opts.max_tokens < GuardConfig{}.loop_min_span)
    return fail("--max-tokens " + std::to_string(f.opts.max_tokens) + ": below " +
                std::to_string(GuardConfig{}.loop_min_span) +
                ", the fewest tokens in which the guard can see a loop; use at least that");
  auto built = make_target(f.target);
  if (!built) return fail(built.message());
  lab::Target& target = *built->target;
  if (f.prompts_file.empty()) f.api = resolve_api(f.api, target, "threshold");
  auto prompts = f.prompts_file.empty() ? lab::builtin_prompts(f.sets, f.languages, f.api == "chat")
                                        : lab::load_prompts(f.prompts_file);
  if (!prompts) return fail(prompts.message());
  std::fprintf(stderr, "coda threshold: %s, %d runs per group, max_tokens %d, %zu prompts\n", target.describe().c_str(),
               f.opts.runs, f.opts.max_tokens, prompts->size());
  ProgressLine bar("threshold");
  InterruptFlag interrupt;
  auto runs = lab::run_threshold(
      target, *prompts, f.opts,
      [&](const lab::ThresholdProgress& p) {
        bar.update(p.done, p.total, "degraded " + std::to_string(p.degraded) + ", errors " + std::to_string(p.errors));
      },
      interrupt.flag());
  bar.finish();
  const auto summary = lab::summarize_threshold(runs, f.opts, target.describe());
  if (Status s = lab::write_threshold_outputs(f.out_dir, summary, runs); !s.ok()) return fail(s.message());
  int64_t completed = 0;
  for (const auto& [g, gj] : summary["groups"].items()) {
    completed += gj["completed"].get<int64_t>();
    const auto& t = gj["threshold_tokens"];
    const auto& ci = gj["threshold_ci95"];
    std::string types;
    for (const auto& e : gj["episode_types"]) types += (types.empty() ? "" : " -> ") + e["type"].get<std::string>();
    if (t.is_null() && gj["status"] == "none_within")
      std::printf("%-16s %3lld runs, %3lld degraded: no threshold within %d tokens (%lld reached it coherent)\n",
                  g.c_str(), static_cast<long long>(gj["completed"].get<int64_t>()),
                  static_cast<long long>(gj["degraded"].get<int64_t>()), f.opts.max_tokens,
                  static_cast<long long>(gj["reached_max_tokens"].get<int64_t>()));
    else if (t.is_null())  // ended_early: the runs stopped before the length they were asked to reach
      std::printf("%-16s %3lld runs, %3lld degraded: ENDED EARLY: %s\n", g.c_str(),
                  static_cast<long long>(gj["completed"].get<int64_t>()),
                  static_cast<long long>(gj["degraded"].get<int64_t>()), gj.value("note", "").c_str());
    else
      std::printf("%-16s %3lld runs, %3lld degraded: threshold %.0f tokens (95%% CI %s-%s), max_tokens <= %lld; %s\n",
                  g.c_str(), static_cast<long long>(gj["completed"].get<int64_t>()),
                  static_cast<long long>(gj["degraded"].get<int64_t>()), t.get<double>(),
                  ci[0].is_null() ? "?" : std::to_string(std::lround(ci[0].get<double>())).c_str(),
                  ci[1].is_null() ? "beyond" : std::to_string(std::lround(ci[1].get<double>())).c_str(),
                  static_cast<long long>(gj["recommended_max_tokens"].get<int64_t>()), types.c_str());
  }
  std::fprintf(stderr, "coda threshold: %s/threshold.json, %s/report.html\n", f.out_dir.c_str(), f.out_dir.c_str());
  if (interrupt.flag()->load()) return fail("interrupted; partial results are in " + f.out_dir);
  if (completed == 0) return fail("the target " + target.describe() + " answered no request successfully");
  return 0;
}

}  // namespace

void add_threshold(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<ThresholdFlags>();
  CLI::App* sub = app.add_subcommand(
      "threshold", "Coherence threshold per prompt group: how long generations stay coherent (Kaplan-Meier)");
  add_target_flags(sub, f->target);
  sub->add_option(
      "--prompts", f->prompts_file,
      "Prompts: JSONL ({\"prompt\"|\"messages\", \"group\"} per line), a JSON array of them, or a ShareGPT dump");
  sub->add_option("--set", f->sets, "Built-in tasks: narrative, technical, exam or all (comma-separated)")
      ->capture_default_str();
  sub->add_option("--lang", f->languages, "Built-in prompt languages: en, it, fr")->capture_default_str();
  sub->add_option("--api", f->api,
                  "The built-in prompts' route: completions (plain text, for a base model), chat (a user message, "
                  "for an instruct model behind /v1/chat/completions) or auto (chat when the model has a chat "
                  "template)")
      ->capture_default_str()
      ->check(CLI::IsMember({"completions", "chat", "auto"}));
  sub->add_option("--runs", f->opts.runs, "Runs per group")->capture_default_str()->check(CLI::Range(1, 100000));
  sub->add_option("-n,--max-tokens", f->opts.max_tokens, "max_tokens of every run (long: the threshold must lie below)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  add_coherence_flags(sub, f->opts.quantile, f->opts.margin, f->opts.max_concurrency, f->opts.top_logprobs);
  sub->add_option("--bootstrap", f->opts.bootstrap, "Bootstrap resamples for the interval")
      ->capture_default_str()
      ->check(CLI::Range(10, 1000000));
  add_sampling_flags(sub, f->sampling);
  sub->add_option("-o,--out", f->out_dir, "Output directory: threshold.json, runs.jsonl, report.html")->required();
  out.push_back({sub, [f, sub] { return threshold(*f, sub); }});
}

}  // namespace coda::cli
