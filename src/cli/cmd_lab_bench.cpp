// `coda bench`: the failure-rate load test against a URL or the in-process engine.
#include <cstdio>

#include "cli/commands.h"
#include "cli/load_flags.h"
#include "cli/progress.h"
#include "cli/target_flags.h"
#include "lab/bench_report.h"
#include "lab/load_bench.h"

namespace coda::cli {

namespace {

struct BenchFlags {
  TargetFlags target;
  LoadFlags load;
  std::string out_dir;
};

int bench(BenchFlags& f, const CLI::App* sub) {
  auto built = make_target(f.target);
  if (!built) return fail(built.message());
  lab::Target& target = *built->target;
  auto prompts = finish_load_flags(sub, f.load, f.target.model_name, target);
  if (!prompts) return fail(prompts.message());
  const lab::LoadOptions& load = f.load.load;
  std::fprintf(stderr, "coda bench: %s, %lld x %d requests at %g/min, max_tokens %d, %zu prompts\n",
               target.describe().c_str(), static_cast<long long>(load.requests), load.sets, load.rate_per_min,
               load.max_tokens, prompts->size());
  ProgressLine bar("bench");
  InterruptFlag interrupt;
  auto run = lab::run_load(
      target, *prompts, load,
      [&](const lab::Progress& p) {
        bar.update(p.done, p.total,
                   "sent " + std::to_string(p.sent) + ", failures " + std::to_string(p.failures) + ", errors " +
                       std::to_string(p.errors));
      },
      interrupt.flag());
  bar.finish();
  const auto summary = lab::summarize(run, load, target.describe());
  if (Status s = lab::write_bench_outputs(f.out_dir, summary, run, load); !s.ok()) return fail(s.message());
  const auto ci = summary["failure_rate_ci95"];
  const auto& ttft = summary["ttft_ms"]["p50"];
  std::fprintf(stderr,
               "coda bench: %lld requests, %lld completed, %lld errors; failure rate %.2f%% (95%% CI %.2f%%-%.2f%%); "
               "TTFT p50 %s ms; %s\n",
               static_cast<long long>(summary["requests"].get<int64_t>()),
               static_cast<long long>(summary["completed"].get<int64_t>()),
               static_cast<long long>(summary["errors"].get<int64_t>()), summary["failure_rate"].get<double>() * 100,
               ci[0].get<double>() * 100, ci[1].get<double>() * 100,
               ttft.is_number() ? std::to_string(ttft.get<double>()).c_str() : "-",
               (f.out_dir + "/report.html").c_str());
  if (const int64_t n = summary["failure_kinds"]["no_answer"].get<int64_t>(); n > 0)
    std::fprintf(stderr,
                 "coda bench: %lld request(s) ended inside the model's thinking with no answer (counted as failures "
                 "of their own kind, no_answer); a budget (thinking_token_budget) or coda proxy in front closes the "
                 "thinking so that the model answers\n",
                 static_cast<long long>(n));
  if (const int64_t n = summary["stop_at_limit"].get<int64_t>(); n > 0)
    std::fprintf(stderr,
                 "coda bench: %lld request(s) answered finish_reason \"stop\" with completion_tokens at max_tokens %d. "
                 "Some servers say \"stop\" for a generation cut at the limit (ik_llama.cpp before August 2026, "
                 "llama.cpp before May 2024), %s\n",
                 static_cast<long long>(n), load.max_tokens,
                 load.trust_finish_reason ? "but --trust-finish-reason counted them as successes, as the server said"
                                          : "so they were counted as failures, as \"length\" (--trust-finish-reason "
                                            "takes the server at its word)");
  if (run.interrupted) return fail("interrupted; partial results are in " + f.out_dir);
  if (run.target_down || summary["completed"].get<int64_t>() == 0)
    return fail("the target " + target.describe() + " answered no request successfully" +
                (run.first_error.empty() ? "" : " (first error: " + run.first_error + ")") +
                "; results so far are in " + f.out_dir);
  return 0;
}

}  // namespace

void add_lab_bench(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Load test: failure rate (generations that never end) with intervals, finish reasons, latency");
  add_target_flags(sub, f->target);
  add_load_flags(sub, f->load);
  sub->add_option("-o,--out,--result-dir", f->out_dir,
                  "Output directory: summary.json, requests.jsonl, report.html (--result-dir is vLLM's bench name)")
      ->required();
  sub->add_flag("--save-result")->description("Accepted for vLLM's bench serve; coda bench always writes its results");
  out.push_back({sub, [f, sub] { return bench(*f, sub); }});
}

}  // namespace coda::cli
