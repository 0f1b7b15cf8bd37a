// `coda bench`: a load test that measures how often generations fail to end, beside latency.
//
// Records in, records out: requests are sent at drawn arrival times (arrivals.h) to a `Target`,
// each comes back as a `RequestRecord` (success or not), and every statistic is computed
// afterwards from the records by `summarize` (stats.h). A request is a **failure** when it ran
// until max_tokens without ending (finish_reason in `failure_reasons`, "length" by default); the
// failure rate is over the requests that finished, with a Wilson interval, per set and overall.
// Requests that errored (connection, timeout, HTTP error) are counted apart, never as failures.
//
// Some servers say "stop" for a generation cut at max_tokens (client::stopped_at_limit). Against
// them every failure would read as a success, so such a request counts as "length" too
// (`stop_at_limit`), unless `trust_finish_reason`; the summary counts these requests apart so a
// reader can tell which case a run was.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lab/prompts.h"
#include "lab/target.h"

namespace coda::lab {

struct LoadOptions {
  double rate_per_min = 60;  // 0: all at once
  double burstiness = 1;     // gamma shape; 1 = Poisson
  int max_concurrency = 0;   // 0: unlimited
  int64_t requests = 100;    // per set
  int sets = 1;
  uint64_t seed = 0;
  int max_tokens = 1024;
  std::string model;                                   // the request's `model`; empty: omitted
  nlohmann::json sampling = nlohmann::json::object();  // OpenAI/vLLM request fields
  bool stream = true;                                  // streaming gives TTFT and ITL
  std::vector<std::string> failure_reasons = {"length"};
  bool trust_finish_reason = false;  // true: "stop" at max_tokens is a success, as the server says
  int abort_after_errors = 8;        // this many errors before any success: the target is down, stop
  double goodput_ttft_ms = 0;        // SLOs for goodput; 0: not part of it
  double goodput_tpot_ms = 0;
};

struct RequestRecord {
  int set = 0;
  int64_t index = 0;  // within its set
  std::string group;
  double sent_at = 0;  // seconds since the start of the run
  int max_tokens = 0;
  client::Completion out;
};

struct Progress {
  int64_t total = 0, sent = 0, done = 0, failures = 0, errors = 0;
  int set = 0;
};

// Runs the load; returns every record, in completion order, also those cut short by `stop`
// (Ctrl-C): what was sent is kept, what was not is absent. `on_progress` is called from the
// calling thread about ten times a second and after each completion.
struct LoadRun {
  std::vector<RequestRecord> records;
  double duration_s = 0;
  bool interrupted = false;
  bool target_down = false;
  std::string first_error;
};
LoadRun run_load(Target& target, const std::vector<BenchPrompt>& prompts, const LoadOptions& opts,
                 const std::function<void(const Progress&)>& on_progress, std::atomic<bool>* stop);

// The request body sent for one prompt (completions or chat by the prompt's kind).
nlohmann::ordered_json request_body(const BenchPrompt& p, const LoadOptions& opts, uint64_t request_seed);

// Answered "stop" with completion_tokens at (or past) its max_tokens (see the top of this file).
bool stop_at_limit(const RequestRecord& r);
// A reasoning model's request that ended inside its thinking: reasoning and no answer (no content,
// no tool call), or content that opened <think> and never closed it. A failure of its own kind,
// whatever the finish_reason ("no_answer" in the summary's failure_kinds).
bool ended_in_reasoning(const RequestRecord& r);
bool is_failure(const RequestRecord& r, const LoadOptions& opts);
// summary.json: requests, completed, errors, failures, failure_rate, failure_rate_ci95, per set,
// finish_reasons, error_kinds, guard_events, ttft_ms/tpot_ms/itl_ms/e2e_ms {p50, p90, p99, mean},
// throughput and goodput.
nlohmann::ordered_json summarize(const LoadRun& run, const LoadOptions& opts, const std::string& target);
nlohmann::ordered_json record_json(const RequestRecord& r, const LoadOptions& opts);

}  // namespace coda::lab
