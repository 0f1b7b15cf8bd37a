// `coda diagnose`: the three planes (system, decoding, context) in order, with a verdict for each.
#include <cstdio>

#include "cli/commands.h"
#include "cli/load_flags.h"
#include "cli/progress.h"
#include "cli/sampling_flags.h"
#include "cli/target_flags.h"
#include "guard/guard.h"
#include "lab/diagnose.h"

namespace coda::cli {

namespace {

struct DiagnoseFlags {
  TargetFlags target;
  GenerationRequest sampling;
  std::string prompts_file, sets = "narrative", languages = "en", out_dir;
  std::string api = "completions";  // the built-in prompts' route
  lab::DiagnoseOptions opts;
};

int diagnose(DiagnoseFlags& f, const CLI::App* sub) {
  f.opts.sampling = sampling_fields(sub, f.sampling);
  f.opts.sampling.erase("seed");
  f.opts.seed = f.sampling.sampling.seed;
  f.opts.model = f.target.model_name;
  if (!(f.opts.loop_rate > 0 && f.opts.loop_rate <= 1)) return fail("--loop-rate: must be in (0, 1], e.g. 0.1");
  if (f.opts.penalty < 0) return fail("--penalty: a repetition_penalty, e.g. 1.2 (0: the default variant)");
  // A battery shorter than the guard's loop minimum would call every run coherent.
  const int64_t floor = GuardConfig{}.loop_min_span;
  for (const auto& [flag, value] :
       {std::pair{"--decode-tokens", f.opts.decode_tokens}, {"--max-tokens", f.opts.max_tokens}})
    if (value < floor)
      return fail(std::string(flag) + " " + std::to_string(value) + ": below " + std::to_string(floor) +
                  ", the fewest tokens in which the guard can see a loop; use at least " + std::to_string(floor));
  auto built = make_target(f.target);
  if (!built) return fail(built.message());
  lab::Target& target = *built->target;
  if (f.prompts_file.empty()) f.api = resolve_api(f.api, target, "diagnose");
  auto prompts = f.prompts_file.empty() ? lab::builtin_prompts(f.sets, f.languages, f.api == "chat")
                                        : lab::load_prompts(f.prompts_file);
  if (!prompts) return fail(prompts.message());
  lab::SystemProbes probes;
  if (auto* http = dynamic_cast<lab::HttpTarget*>(&target)) {
    // A hung /metrics or /slots must not hold the diagnosis up: 5 s at most per read.
    probes.metrics = [http] { return http->client().get_text("/metrics", 5); };
    probes.slots = [http] { return http->client().get_text("/slots", 5); };
  } else if (auto* engine = dynamic_cast<lab::EngineTarget*>(&target)) {
    probes.metrics = [engine]() -> Expected<std::string> { return engine->metrics().prometheus(); };
  }
  std::fprintf(stderr,
               "coda diagnose: %s, %zu prompts, %d runs per group: decoding at %d tokens (current and a penalty "
               "variant), then context at %d tokens\n",
               target.describe().c_str(), prompts->size(), f.opts.runs, f.opts.decode_tokens, f.opts.max_tokens);
  ProgressLine bar("diagnose");
  InterruptFlag interrupt;
  auto d = lab::run_diagnosis(
      target, *prompts, f.opts, probes,
      [&](const lab::DiagnoseProgress& p) {
        bar.update(
            p.runs.done, p.runs.total,
            p.stage + ": degraded " + std::to_string(p.runs.degraded) + ", errors " + std::to_string(p.runs.errors));
      },
      interrupt.flag());
  bar.finish();
  if (Status s = lab::write_diagnosis_outputs(f.out_dir, d); !s.ok()) return fail(s.message());
  std::fputs(lab::diagnosis_summary(d).c_str(), stdout);
  std::fprintf(stderr, "coda diagnose: %s/diagnosis.json, %s/report.html\n", f.out_dir.c_str(), f.out_dir.c_str());
  if (interrupt.flag()->load()) return fail("interrupted; partial results are in " + f.out_dir);
  const auto& ev = d["planes"][0]["evidence"];
  if (ev["requests"].get<int64_t>() > 0 && ev["errors"] == ev["requests"])
    return fail("the target " + target.describe() +
                " answered no request successfully: " + ev.value("first_error", std::string("")));
  return 0;
}

}  // namespace

void add_diagnose(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<DiagnoseFlags>();
  CLI::App* sub = app.add_subcommand(
      "diagnose", "Walk the system, decoding and context planes of a deployment and name where the problem lies");
  add_target_flags(sub, f->target);
  sub->add_option(
      "--prompts", f->prompts_file,
      "Prompts (the user's task): JSONL ({\"prompt\"|\"messages\", \"group\"}), a JSON array, or a ShareGPT dump");
  sub->add_option("--set", f->sets, "Built-in tasks: narrative, technical, exam or all (comma-separated)")
      ->capture_default_str();
  sub->add_option("--lang", f->languages, "Built-in prompt languages: en, it, fr")->capture_default_str();
  sub->add_option("--api", f->api,
                  "The built-in prompts' route: completions (plain text, for a base model), chat (a user message, "
                  "for an instruct model behind /v1/chat/completions) or auto (chat when the model has a chat "
                  "template)")
      ->capture_default_str()
      ->check(CLI::IsMember({"completions", "chat", "auto"}));
  sub->add_option("--language", f->opts.language,
                  "The task's language for the system-prompt advice (default: from the prompts)");
  sub->add_option("--runs", f->opts.runs, "Runs per group in each battery")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_option("--decode-tokens", f->opts.decode_tokens, "max_tokens of the decoding batteries")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("-n,--max-tokens", f->opts.max_tokens, "max_tokens of the context battery (the threshold)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--penalty", f->opts.penalty,
                  "repetition_penalty of the decoding variant (default: max(1.2, current + 0.1))");
  sub->add_option("--loop-rate", f->opts.loop_rate, "Share of looping runs that makes decoding a problem")
      ->capture_default_str();
  add_coherence_flags(sub, f->opts.quantile, f->opts.margin, f->opts.max_concurrency, f->opts.top_logprobs);
  add_sampling_flags(sub, f->sampling);
  sub->add_option("-o,--out", f->out_dir, "Output directory: diagnosis.json, report.html")->required();
  out.push_back({sub, [f, sub] { return diagnose(*f, sub); }});
}

}  // namespace coda::cli
