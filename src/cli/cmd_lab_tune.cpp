// `coda tune`: multi-objective TPE over sampling parameters under `coda bench`'s load, or on a
// noisy test problem (--test-problem, the tuner's benchmark against Optuna).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/load_flags.h"
#include "cli/progress.h"
#include "cli/target_flags.h"
#include "core/strings.h"
#include "lab/tune.h"
#include "lab/tune_load.h"

namespace coda::cli {

namespace {

struct TuneFlags {
  TargetFlags target;
  LoadFlags load;
  std::string space = "temperature=0.7:0.9,min_p=0:0.1,repetition_penalty=1.0:1.1";
  std::string objectives = "failure_rate,repetition_penalty_deviation";
  std::string baseline, study, study_name = "coda-tune", test_problem, out_dir;
  lab::TuneOptions tune;
};

int tune(TuneFlags& f, const CLI::App* sub) {
  lab::TuneOptions& t = f.tune;
  auto space = f.test_problem.empty() ? lab::parse_search_space(f.space) : lab::test_problem_space(f.test_problem);
  if (!space) return fail(space.message());
  t.space = *space;
  t.objectives = f.test_problem.empty() ? split_list(f.objectives) : std::vector<std::string>{"f1", "f2"};
  if (f.test_problem.empty())
    if (Status s = lab::check_objectives(t.objectives, t.space); !s.ok()) return fail(s.message());
  // The baseline: --baseline values, else the study's (vLLM's defaults as it ran them: temperature
  // 0.7, min_p 0, repetition_penalty 1.0) and each other parameter's neutral default, clamped into
  // the space.
  for (const auto& p : t.space) {
    auto n = lab::baseline_value(p.name);
    t.baseline[p.name] = p.snap(n ? *n : 0.5 * (p.low + p.high));
  }
  for (const auto& kv : split_list(f.baseline)) {
    const size_t eq = kv.find('=');
    char* end = nullptr;
    const double v = eq == std::string::npos ? 0 : std::strtod(kv.c_str() + eq + 1, &end);
    if (eq == std::string::npos || end == kv.c_str() + eq + 1 || *end != 0)
      return fail("--baseline: '" + kv + "' is not name=value");
    if (!t.baseline.count(kv.substr(0, eq))) return fail("--baseline: " + kv.substr(0, eq) + " is not in --space");
    t.baseline[kv.substr(0, eq)] = v;
  }
  std::error_code ec;
  std::filesystem::create_directories(f.out_dir, ec);
  if (ec) return fail("cannot create " + f.out_dir + ": " + ec.message());
  t.study_path = f.study.empty() ? f.out_dir + "/study.log" : f.study;
  t.study_name = f.study_name;
  InterruptFlag interrupt;
  ProgressLine bar("tune");
  auto report = [&](const lab::TuneTrial& tr, int done, int total) {
    std::string vals;
    for (double v : tr.eval.values) vals += (vals.empty() ? "" : ", ") + std::to_string(v);
    bar.finish();
    // As coda bench says it: a server that calls a cut at max_tokens "stop" (load_bench.h).
    const int64_t at_limit = tr.eval.details.value("stop_at_limit", int64_t{0});
    const std::string note =
        at_limit > 0 ? "; " + std::to_string(at_limit) + " answered \"stop\" at max_tokens, counted as " +
                           (f.load.load.trust_finish_reason ? "successes (--trust-finish-reason)" : "failures")
                     : "";
    std::fprintf(stderr, "tune: trial %d (phase %d%s) -> [%s]  (%d/%d)%s\n", tr.number, tr.phase,
                 tr.baseline ? ", baseline" : "", vals.c_str(), done, total, note.c_str());
  };
  Expected<lab::TuneResult> res = Error("");
  std::optional<Expected<BuiltTarget>> built;
  std::vector<lab::BenchPrompt> prompts;
  if (!f.test_problem.empty()) {
    res = lab::run_tune(t, lab::test_problem(f.test_problem), report, interrupt.flag());
  } else {
    built.emplace(make_target(f.target));
    if (!*built) return fail(built->message());
    lab::Target& target = *(*built)->target;
    auto p = finish_load_flags(sub, f.load, f.target.model_name, target);
    if (!p) return fail(p.message());
    prompts = std::move(*p);
    t.requests = f.load.load.requests * f.load.load.sets;
    std::fprintf(stderr, "coda tune: %s, %d trials of %lld requests, phase 2: top %d with %lld requests; study %s\n",
                 target.describe().c_str(), t.n_trials, static_cast<long long>(t.requests), t.phase2_top,
                 static_cast<long long>(t.phase2_requests), t.study_path.c_str());
    auto eval =
        lab::load_evaluator(target, prompts, f.load.load, t.objectives, interrupt.flag(),
                            [&](const lab::Progress& pr) { bar.update(pr.done, pr.total, "requests of this trial"); });
    res = lab::run_tune(t, eval, report, interrupt.flag());
  }
  bar.finish();
  if (!res) return fail(res.message());
  std::ofstream(f.out_dir + "/pareto.json") << lab::pareto_json(*res, t).dump(2) << "\n";
  std::ofstream(f.out_dir + "/report.html") << lab::tune_report_html(*res, t);
  std::fprintf(stderr, "coda tune: %s\ncoda tune: %s/pareto.json, %s/report.html, study %s\n",
               res->recommendation_text.c_str(), f.out_dir.c_str(), f.out_dir.c_str(), t.study_path.c_str());
  if (res->interrupted) return fail("interrupted; run the same command again to resume from " + t.study_path);
  return 0;
}

}  // namespace

void add_lab_tune(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<TuneFlags>();
  CLI::App* sub =
      app.add_subcommand("tune", "Multi-objective TPE over sampling parameters under load (Optuna study file)");
  add_target_flags(sub, f->target);
  add_load_flags(sub, f->load);
  sub->add_option("--space", f->space, "name=low:high[:log|:int|:STEP],... (request field names)")
      ->capture_default_str();
  sub->add_option("--objectives", f->objectives,
                  "Minimised: failure_rate, PARAM_deviation, error_rate, guard_event_rate, mean_output_tokens, "
                  "ttft_ms.p50, e2e_ms.p99, ...")
      ->capture_default_str();
  sub->add_option("--baseline", f->baseline,
                  "Trial 0's values, name=value,... (default: the fields' neutral defaults)");
  sub->add_option("--trials", f->tune.n_trials, "Phase-1 trials")->capture_default_str()->check(CLI::Range(1, 100000));
  sub->add_option("--phase2-top", f->tune.phase2_top, "Re-run the best K (and the baseline) in phase 2")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sub->add_option("--phase2-requests", f->tune.phase2_requests, "Requests per phase-2 configuration")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
  sub->add_option("--n-startup-trials", f->tune.tpe.n_startup_trials, "Random trials before TPE")
      ->capture_default_str();
  sub->add_option("--n-ei-candidates", f->tune.tpe.n_ei_candidates, "TPE candidates per proposal")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_flag("--consider-endpoints", f->tune.tpe.consider_endpoints,
                "Size the outermost Parzen kernels with the range's ends as neighbours (MOTPESampler's setting)");
  sub->add_flag("--flat-above-weights", f->tune.tpe.flat_above_weights,
                "Weigh every non-good trial the same (MOTPESampler's setting; default: Optuna's ramp)");
  sub->add_flag("--multivariate", f->tune.tpe.multivariate,
                "Joint Parzen kernels over all parameters (Optuna's multivariate=True)");
  sub->add_flag("--exact-density", f->tune.tpe.exact_density,
                "Score candidates with the exact Parzen density (default: Optuna 3.1.0's, kernels weighed by "
                "bandwidth; docs/lab.md)");
  sub->add_option("--gamma", f->tune.tpe.gamma,
                  "Share of the trials in TPE's good group, ceil(share x n) up to 25 (Optuna's: 0.1)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  sub->add_option("--denoise", f->tune.tpe.denoise_bandwidth,
                  "Smooth noisy objectives (failure rates) over neighbouring trials before the good/bad split: "
                  "the kernel bandwidth as a share of each range, 0 = off (Optuna's)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  sub->add_option("--denoise-degree", f->tune.tpe.denoise_degree,
                  "Degree of that smoother: 2 fits each parameter and its square, 1 fits lines (the stop-49 "
                  "smoother, used with --denoise 0.2)")
      ->capture_default_str()
      ->check(CLI::Range(1, 2));
  sub->add_option("--surrogate", f->tune.tpe.surrogate_bandwidth,
                  "Pick among TPE's candidates the one a local quadratic regression of the objectives predicts to "
                  "add the most hypervolume: its kernel bandwidth as a share of each range, 0 = off (TPE's pick, "
                  "Optuna's)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  sub->add_flag_callback(
      "--random-startup", [f] { f->tune.tpe.latin_hypercube_startup = false; },
      "Draw the startup trials independently at random, as Optuna does (default: a Latin hypercube)");
  sub->add_option("--tune-seed", f->tune.seed, "Seed of the sampler and of each trial's load")->capture_default_str();
  sub->add_option("--study", f->study, "Optuna journal file (default OUT/study.log); an existing one is resumed");
  sub->add_option("--study-name", f->study_name, "The study's name in the journal")->capture_default_str();
  sub->add_option("--test-problem", f->test_problem, "Tune a noisy test problem instead of a target: zdt1, failure");
  sub->add_option("-o,--out", f->out_dir, "Output directory: pareto.json, report.html, study.log")->required();
  out.push_back({sub, [f, sub] { return tune(*f, sub); }});
}

}  // namespace coda::cli
