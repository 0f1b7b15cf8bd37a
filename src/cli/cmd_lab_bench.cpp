// `coda bench`: the failure-rate load test against a URL or the in-process engine.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/sampling_flags.h"
#include "cli/target_flags.h"
#include "lab/bench_report.h"
#include "lab/load_bench.h"

namespace coda::cli {

namespace {

struct BenchFlags {
  TargetFlags target;
  GenerationRequest sampling;  // filled by the sampling flags; only the given ones are sent
  std::string prompts_file, sets = "exam", languages = "en,it,fr", out_dir;
  lab::LoadOptions load;
  std::string failure_reasons = "length";
  bool no_stream = false;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find(',', a);
    if (b == std::string::npos) b = s.size();
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

int bench(BenchFlags& f, const CLI::App* sub) {
  if (f.out_dir.empty()) return fail("give an output directory with -o DIR");
  auto prompts = f.prompts_file.empty() ? lab::builtin_prompts(f.sets, f.languages) : lab::load_prompts(f.prompts_file);
  if (!prompts) return fail(prompts.message());
  f.load.sampling = sampling_fields(sub, f.sampling);
  f.load.sampling.erase("seed");
  f.load.seed = f.sampling.sampling.seed;
  f.load.model = f.target.model_name;
  f.load.stream = !f.no_stream;
  f.load.failure_reasons = split(f.failure_reasons);
  auto built = make_target(f.target);
  if (!built) return fail(built.message());
  lab::Target& target = *built->target;
  std::fprintf(stderr, "coda bench: %s, %lld x %d requests at %g/min, max_tokens %d, %zu prompts\n",
               target.describe().c_str(), static_cast<long long>(f.load.requests), f.load.sets, f.load.rate_per_min,
               f.load.max_tokens, prompts->size());
  ProgressLine bar("bench");
  InterruptFlag interrupt;
  auto run = lab::run_load(target, *prompts, f.load,
                           [&](const lab::Progress& p) {
                             bar.update(p.done, p.total,
                                        "sent " + std::to_string(p.sent) + ", failures " + std::to_string(p.failures) +
                                            ", errors " + std::to_string(p.errors));
                           },
                           interrupt.flag());
  bar.finish();
  const auto summary = lab::summarize(run, f.load, target.describe());
  if (Status s = lab::write_bench_outputs(f.out_dir, summary, run, f.load); !s.ok()) return fail(s.message());
  const auto ci = summary["failure_rate_ci95"];
  std::fprintf(stderr,
               "coda bench: %lld requests, %lld completed, %lld errors; failure rate %.2f%% (95%% CI %.2f%%-%.2f%%); "
               "TTFT p50 %.1f ms; %s\n",
               static_cast<long long>(summary["requests"].get<int64_t>()),
               static_cast<long long>(summary["completed"].get<int64_t>()),
               static_cast<long long>(summary["errors"].get<int64_t>()), summary["failure_rate"].get<double>() * 100,
               ci[0].get<double>() * 100, ci[1].get<double>() * 100,
               summary["ttft_ms"]["p50"].is_number() ? summary["ttft_ms"]["p50"].get<double>() : 0.0,
               (f.out_dir + "/report.html").c_str());
  if (run.interrupted) return fail("interrupted; partial results are in " + f.out_dir);
  if (run.target_down || summary["completed"].get<int64_t>() == 0)
    return fail("the target " + target.describe() + " answered no request successfully" +
                (run.first_error.empty() ? "" : " (first error: " + run.first_error + ")") + "; results so far are in " +
                f.out_dir);
  return 0;
}

}  // namespace

void add_lab_bench(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Load test: failure rate (generations that never end) with intervals, finish reasons, latency");
  add_target_flags(sub, f->target);
  sub->add_option("--prompts", f->prompts_file, "JSONL prompts: {\"prompt\"|\"messages\", \"group\"} per line");
  sub->add_option("--set", f->sets, "Built-in prompt sets: exam, narrative, technical or all (comma-separated)")
      ->capture_default_str();
  sub->add_option("--lang", f->languages, "Built-in prompt languages: en, it, fr (comma-separated)")->capture_default_str();
  sub->add_option("--rate", f->load.rate_per_min, "Requests per minute (0: all at once)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--burstiness", f->load.burstiness, "Gamma shape of the arrival gaps; 1 is Poisson")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-concurrency", f->load.max_concurrency, "Requests in flight at most (0: unlimited)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--requests", f->load.requests, "Requests per set")->capture_default_str()->check(CLI::Range(1, 10000000));
  sub->add_option("--sets", f->load.sets, "Independent sets")->capture_default_str()->check(CLI::Range(1, 10000));
  sub->add_option("-n,--max-tokens", f->load.max_tokens, "max_tokens of every request")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--failure-reasons", f->failure_reasons,
                  "finish_reasons that count as failures (comma-separated; e.g. length,repetition)")
      ->capture_default_str();
  sub->add_option("--goodput-ttft", f->load.goodput_ttft_ms, "Goodput SLO: TTFT at most this many ms (0: none)");
  sub->add_option("--goodput-tpot", f->load.goodput_tpot_ms, "Goodput SLO: TPOT at most this many ms (0: none)");
  sub->add_flag("--no-stream", f->no_stream, "Non-streaming requests (no TTFT or ITL)");
  sub->add_option("-o,--out", f->out_dir, "Output directory: summary.json, requests.jsonl, report.html")->required();
  add_sampling_flags(sub, f->sampling);
  // -s/--seed (a sampling flag) seeds the run: arrivals, prompt choice, and a distinct seed per request.
  out.push_back({sub, [f, sub] { return bench(*f, sub); }});
}

}  // namespace coda::cli
