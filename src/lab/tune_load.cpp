#include "lab/tune_load.h"

#include <cmath>

#include "lab/stats.h"

namespace coda::lab {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* kMetrics[] = {"failure_rate", "error_rate", "guard_event_rate", "mean_output_tokens"};

bool is_latency(const std::string& o) {
  const size_t dot = o.find('.');
  if (dot == std::string::npos) return false;
  const std::string m = o.substr(0, dot), q = o.substr(dot + 1);
  return (m == "ttft_ms" || m == "tpot_ms" || m == "itl_ms" || m == "e2e_ms") &&
         (q == "p50" || q == "p90" || q == "p99" || q == "mean");
}

}  // namespace

Status check_objectives(const std::vector<std::string>& objectives, const SearchSpace& space) {
  if (objectives.empty()) return Error("objectives: give at least one");
  for (const auto& o : objectives) {
    bool ok = is_latency(o);
    for (const char* m : kMetrics) ok = ok || o == m;
    if (ends_with(o, "_deviation")) {
      const std::string p = o.substr(0, o.size() - 10);
      auto n = neutral_value(p);
      if (!n) return Error("objectives: " + o + ": " + n.message());
      ok = true;
    }
    if (!ok)
      return Error("objectives: unknown '" + o +
                   "'; use failure_rate, error_rate, guard_event_rate, mean_output_tokens, PARAM_deviation, or "
                   "ttft_ms|tpot_ms|itl_ms|e2e_ms . p50|p90|p99|mean");
  }
  (void)space;
  return Status::Ok();
}

Evaluator load_evaluator(Target& target, const std::vector<BenchPrompt>& prompts, const LoadOptions& base,
                         const std::vector<std::string>& objectives, std::atomic<bool>* stop,
                         std::function<void(const Progress&)> on_progress) {
  return [&target, &prompts, base, objectives, stop, on_progress](
             const std::map<std::string, double>& params, int64_t requests, uint64_t seed) -> Expected<Evaluation> {
    LoadOptions o = base;
    o.seed = seed;
    o.requests = std::max<int64_t>(1, (requests + o.sets - 1) / o.sets);
    for (const auto& [k, v] : params) {
      if (k == "top_k" || k == "min_tokens" || k == "dry_allowed_length" || k == "no_repeat_ngram_size" ||
          k == "repeat_last_n" || k == "dry_penalty_last_n")
        o.sampling[k] = static_cast<int64_t>(std::llround(v));
      else
        o.sampling[k] = v;
    }
    LoadRun run = run_load(target, prompts, o, on_progress, stop);
    if (run.target_down) return Error("the target stopped answering: " + run.first_error);
    const auto s = summarize(run, o, target.describe());
    const int64_t completed = s["completed"].get<int64_t>();
    if (completed == 0 && !(stop && stop->load()))
      return Error("no request of this configuration succeeded" +
                   (run.first_error.empty() ? std::string() : " (first error: " + run.first_error + ")"));
    Evaluation e;
    for (const auto& obj : objectives) {
      double v = 0;
      std::pair<double, double> iv;
      if (obj == "failure_rate") {
        v = s["failure_rate"].get<double>();
        iv = {s["failure_rate_ci95"][0].get<double>(), s["failure_rate_ci95"][1].get<double>()};
      } else if (obj == "error_rate") {
        const int64_t n = s["requests"].get<int64_t>(), k = s["errors"].get<int64_t>();
        v = n ? static_cast<double>(k) / static_cast<double>(n) : 0;
        iv = wilson_interval(k, n);
      } else if (obj == "guard_event_rate") {
        v = s["guard_event_rate"].get<double>();
        iv = wilson_interval(std::llround(v * static_cast<double>(completed)), completed);
      } else if (obj == "mean_output_tokens") {
        v = s["mean_output_tokens"].get<double>();
        iv = {v, v};
      } else if (const ExactObjective f = exact_objective(obj)) {  // "<param>_deviation"
        v = f(params);
        iv = {v, v};
      } else {  // a latency: "ttft_ms.p50"
        const size_t dot = obj.find('.');
        const auto& q = s[obj.substr(0, dot)][obj.substr(dot + 1)];
        v = q.is_number() ? q.get<double>() : std::nan("");
        iv = {v, v};
      }
      e.values.push_back(v);
      e.intervals.push_back(iv);
    }
    e.details = {{"requests", s["requests"]},
                 {"completed", s["completed"]},
                 {"failures", s["failures"]},
                 {"errors", s["errors"]},
                 {"finish_reasons", s["finish_reasons"]},
                 {"stop_at_limit", s["stop_at_limit"]},
                 {"mean_output_tokens", s["mean_output_tokens"]},
                 {"duration_s", s["duration_s"]}};
    return e;
  };
}

}  // namespace coda::lab
