// `coda diagnose`: a short battery that walks the three planes of a deployment in order, because a
// problem on one plane masks the plane below it.
//
// - **System** (KV cache, queueing, latency, errors): from the target's /metrics (coda's, vLLM's
//   or llama.cpp's names) sampled during the battery, or the in-process engine's metrics, plus what
//   the client saw. A target that errors or runs out of KV cache cannot be judged on its text.
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
};
// Folds one scrape into the sample.
void fold_metrics(const std::map<std::string, double>& m, const std::map<std::string, double>& first, SystemSample& s);

struct DiagnoseProgress {
  std::string stage;  // "decoding", "variant", "context"
  ThresholdProgress runs;
};

// The three batteries and the verdicts. `metrics` reads the target's metrics text (empty function:
// none); it is called about once a second from another thread while requests run.
nlohmann::ordered_json run_diagnosis(Target& target, const std::vector<BenchPrompt>& prompts,
                                     const DiagnoseOptions& opts, const std::function<Expected<std::string>()>& metrics,
                                     const std::function<void(const DiagnoseProgress&)>& on_progress,
                                     std::atomic<bool>* stop);

// The terminal summary and report.html of a diagnosis.json.
std::string diagnosis_summary(const nlohmann::ordered_json& d);
std::string diagnosis_report_html(const nlohmann::ordered_json& d);
// DIR/diagnosis.json and DIR/report.html.
Status write_diagnosis_outputs(const std::string& dir, const nlohmann::ordered_json& d);

}  // namespace coda::lab
