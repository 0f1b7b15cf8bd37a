// `coda diagnose`: a short battery that walks the three planes of a deployment in order, because a
// problem on one plane masks the plane below it.
//
// - **System** (KV cache, queueing, latency, errors): from the target's /metrics (coda's, vLLM's
//   or llama.cpp's names) and llama.cpp's /slots sampled during the battery, or the in-process
//   engine's metrics, plus what the client saw. A target that errors or runs out of KV cache cannot be judged on its
//   text.
// - **Decoding** (sampling parameters, repetition, entropy): the user's task at the current
//   parameters, then the same prompts and seeds with a repetition-penalty variant. Loops that the
//   variant removes are a decoding problem, fixed by the variant's setting.
// - **Context** (behaviour against generated length): the coherence threshold (as `coda threshold`)
//   on the same task with the decoding problem suppressed (the variant's setting when decoding had
//   a problem). A threshold within max_tokens is a context problem: max_tokens below it, and a
//   language constraint in the system prompt when the text drifted.
//
// The verdict names the first plane with a problem and the plane its fix may reveal next.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lab/prompts.h"
#include "lab/target.h"
#include "lab/threshold.h"

namespace coda::lab {

struct DiagnoseOptions {
  int runs = 6;             // per prompt group, in each battery
  int decode_tokens = 512;  // max_tokens of the decoding battery
  int max_tokens = 2048;    // max_tokens of the context battery
  double penalty = 0;       // the variant's repetition_penalty; 0: max(1.2, current + 0.1)
  double loop_rate = 0.1;   // share of decoding runs with a loop at or above which decoding has a problem
  double quantile = 0.1;    // as coda threshold
  double margin = 0.2;
  uint64_t seed = 0;
  int max_concurrency = 2;
  int top_logprobs = 20;
  std::string model;
  nlohmann::json sampling = nlohmann::json::object();  // the current parameters (OpenAI/vLLM fields)
  std::string language;                                // the task's language (en, it, fr); empty: from the prompts
};

// A Prometheus text exposition summed per metric name (labels dropped); comments skipped.
std::map<std::string, double> parse_prometheus(const std::string& text);

// What the system plane looks at, sampled while the batteries run.
struct SystemSample {
  bool available = false;     // some metrics were read
  std::string source;         // "coda", "vllm", "llama.cpp" or "in-process"
  double kv_usage_peak = -1;  // 0..1; -1: not exported
  double waiting_peak = -1;
  double preemptions = -1;  // counter increase over the battery
  int samples = 0;
  std::string error;  // why no metrics were read
  // llama.cpp's GET /slots: each slot holds one sequence in a context of its own n_ctx, so the
  // fullest busy slot is how close a request came to being cut (or shifted) by the context. Its
  // server has no /metrics unless started with --metrics, and no KV gauge there (llama.cpp of August
  // 2026; ik_llama.cpp keeps llamacpp:kv_cache_usage_ratio).
  bool slots_available = false;
  int slots_total = 0;
  int slots_busy_peak = -1;
  double slot_context_peak = -1;  // 0..1 of n_ctx; -1: no slot told its token count
  int64_t slot_n_ctx = 0;         // that slot's n_ctx
  std::string slots_error;
};
// Folds one scrape into the sample.
void fold_metrics(const std::map<std::string, double>& m, const std::map<std::string, double>& first, SystemSample& s);
// Folds one GET /slots body (llama.cpp's shape, or ik_llama.cpp's older `state`) into the sample; false
// when it is not a list of slots.
bool fold_slots(const std::string& body, SystemSample& s);

// How the system plane reads the deployment while the batteries run (empty functions: not at all),
// each called about once a second from another thread: `metrics` the Prometheus text, `slots`
// llama.cpp's /slots (given up after the first answer that is not a list of slots).
struct SystemProbes {
  std::function<Expected<std::string>()> metrics;
  std::function<Expected<std::string>()> slots;
};

struct DiagnoseProgress {
  std::string stage;  // "decoding", "variant", "context"
  ThresholdProgress runs;
};

// The three batteries and the verdicts.
nlohmann::ordered_json run_diagnosis(Target& target, const std::vector<BenchPrompt>& prompts,
                                     const DiagnoseOptions& opts, const SystemProbes& probes,
                                     const std::function<void(const DiagnoseProgress&)>& on_progress,
                                     std::atomic<bool>* stop);

// The terminal summary and report.html of a diagnosis.json.
std::string diagnosis_summary(const nlohmann::ordered_json& d);
std::string diagnosis_report_html(const nlohmann::ordered_json& d);
// DIR/diagnosis.json and DIR/report.html.
Status write_diagnosis_outputs(const std::string& dir, const nlohmann::ordered_json& d);

}  // namespace coda::lab
