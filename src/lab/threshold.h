// `coda threshold`: the coherence threshold of a model on a task, measured rather than assumed.
//
// Each prompt group (model x task x language) gets `runs` long generations. The guard's detectors
// watch each one (loop, near loop, flooding, entropy collapse, gibberish, language drift). The
// **onset** of a run is the first token of its first episode; a run that ends coherent is
// censored at its length. Per group, a Kaplan-Meier curve of coherence against generated tokens;
// the **threshold** is the length by which `quantile` of the runs have degraded, with a bootstrap
// 95% interval; the recommended max_tokens is the threshold less a `margin`.
//
// Episodes come from coda's own report when the target sends one (the engine's guard on full
// logits: coda serve or in process); otherwise the proxy's stream guard runs here on the streamed
// tokens and their top-k logprobs, or on the text alone when the server gives no logprobs.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "lab/prompts.h"
#include "lab/svg.h"
#include "lab/target.h"

namespace coda::lab {

struct ThresholdOptions {
  int runs = 10;  // per group
  int max_tokens = 2048;
  double quantile = 0.1;  // share of runs degraded that defines the threshold
  double margin = 0.2;    // recommended max_tokens = threshold x (1 - margin)
  int bootstrap = 1000;   // resamples for the interval
  uint64_t seed = 0;
  int max_concurrency = 2;
  int top_logprobs = 20;                               // asked of a server that sends no coda report; 0: text alone
  std::string model;                                   // the request's `model`; empty: omitted
  nlohmann::json sampling = nlohmann::json::object();  // OpenAI/vLLM request fields
};

// The episode types that end a run's coherence (runaway length and EOS starvation are about
// length, not coherence, and are left out).
const std::vector<std::string>& coherence_episode_types();

struct ThresholdRun {
  std::string group;
  int index = 0;  // within its group
  bool ok = false;
  std::string error;
  int64_t length = 0;  // generated tokens (text pieces when guarded on text alone)
  // A reasoning model's part of `length` inside its thinking (the rest is the answer); -1: the
  // reply did not think.
  int64_t reasoning_length = -1;
  bool degraded = false;
  int64_t onset = 0;                                      // first token of the first episode
  std::string episode;                                    // its type
  std::vector<std::pair<std::string, int64_t>> episodes;  // every coherence episode (type, onset)
  std::string finish_reason;
  std::string guarded_on;  // "engine" (coda's report), "tokens" (streamed logprobs) or "text"
  std::string text;
  std::vector<std::string> tokens;  // each token's text, when the server sent logprobs
  double mean_entropy = -1;         // nats per token, from coda's report or the top logprobs; -1: unknown
  // The probability of the end of generation: its mean over the run's first half, and over the last
  // 16 tokens before the end (a model that ends early raises it there); -1: unknown (no
  // distribution, or no EOS among the alternatives a server sent).
  double eos_prob_first_half = -1, eos_prob_before_end = -1;
  double ttft_ms = -1, e2e_ms = 0;  // as the client saw them
};

struct ThresholdProgress {
  int64_t total = 0, done = 0, degraded = 0, errors = 0;
};

// Sends every run (groups in the prompts' order, `runs` each, prompts of a group in turn) and
// returns them in that order; `stop` ends early (runs not sent are absent).
std::vector<ThresholdRun> run_threshold(Target& target, const std::vector<BenchPrompt>& prompts,
                                        const ThresholdOptions& opts,
                                        const std::function<void(const ThresholdProgress&)>& on_progress,
                                        std::atomic<bool>* stop);

// threshold.json: {"groups": {LABEL: {runs, completed, errors, degraded, threshold_tokens,
// threshold_ci95, recommended_max_tokens, episode_types, survival, runs: [...]}}, ...}.
nlohmann::ordered_json summarize_threshold(const std::vector<ThresholdRun>& runs, const ThresholdOptions& opts,
                                           const std::string& target);
// A group's Kaplan-Meier curve from threshold.json ("survival"), held flat to max_tokens.
svg::Curve survival_curve(const std::string& group, const nlohmann::ordered_json& group_json, double max_tokens,
                          const std::string& color);
// report.html: survival curves and a strip per run showing where each episode began.
std::string threshold_report_html(const nlohmann::ordered_json& summary);
// DIR/threshold.json, DIR/runs.jsonl (each run with its text and tokens) and DIR/report.html.
Status write_threshold_outputs(const std::string& dir, const nlohmann::ordered_json& summary,
                               const std::vector<ThresholdRun>& runs);

}  // namespace coda::lab
