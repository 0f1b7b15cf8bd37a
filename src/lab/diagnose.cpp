#include "lab/diagnose.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "guard/detector.h"
#include "guard/language.h"
#include "lab/outputs.h"
#include "lab/stats.h"
#include "lab/svg.h"

namespace coda::lab {

using ojson = nlohmann::ordered_json;

namespace {

bool is_loop_family(const std::string& t) {
  return in_detector_family(t, "loop");
}

// One battery's decoding figures: how many runs looped, how early, how sure the model was.
ojson decoding_stats(const std::vector<ThresholdRun>& runs, double repetition_penalty, int max_tokens) {
  int64_t completed = 0, errors = 0, looped = 0, hit_max = 0, ended_early = 0;
  std::vector<double> onsets, entropies, lengths, eos_first, eos_end;
  std::map<std::string, int64_t> episodes, finish;
  std::string first_error;
  for (const auto& r : runs) {
    if (!r.ok) {
      ++errors;
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++completed;
    lengths.push_back(static_cast<double>(r.length));
    ++finish[r.finish_reason.empty() ? "unknown" : r.finish_reason];
    // A run counted in tokens that reached max_tokens hit it, whatever the server called the end:
    // some say "stop" there (load_bench.h).
    const bool hit =
        r.finish_reason == "length" || (r.finish_reason == "stop" && r.guarded_on != "text" && r.length >= max_tokens);
    hit_max += hit;
    // Ended by itself (EOS or a stop string) before the length asked, without degrading.
    ended_early += !hit && !r.degraded && r.length < max_tokens;
    if (r.mean_entropy >= 0) entropies.push_back(r.mean_entropy);
    if (!hit && !r.degraded && r.length < max_tokens && r.eos_prob_before_end >= 0) {
      eos_first.push_back(r.eos_prob_first_half);
      eos_end.push_back(r.eos_prob_before_end);
    }
    bool loop = false;
    for (const auto& [type, onset] : r.episodes) {
      ++episodes[type];
      if (is_loop_family(type) && !loop) {
        loop = true;
        onsets.push_back(static_cast<double>(onset));
      }
    }
    looped += loop;
  }
  ojson s;
  s["repetition_penalty"] = repetition_penalty;
  s["max_tokens"] = max_tokens;
  s["runs"] = static_cast<int64_t>(runs.size());
  s["completed"] = completed;
  s["errors"] = errors;
  if (!first_error.empty()) s["first_error"] = first_error;
  s["looped"] = looped;
  s["loop_rate"] = completed ? static_cast<double>(looped) / static_cast<double>(completed) : 0.0;
  const auto ci = wilson_interval(looped, completed);
  s["loop_rate_ci95"] = {finite_or_null<ojson>(ci.first), finite_or_null<ojson>(ci.second)};
  s["loop_onset_median"] = onsets.empty() ? ojson(nullptr) : ojson(percentile(onsets, 0.5));
  s["mean_entropy"] = entropies.empty() ? ojson(nullptr) : ojson(percentile(entropies, 0.5));
  s["mean_length"] = lengths.empty() ? ojson(nullptr) : ojson(percentile(lengths, 0.5));
  s["hit_max_tokens"] = hit_max;
  s["ended_early"] = ended_early;
  s["ended_early_share"] = completed ? static_cast<double>(ended_early) / static_cast<double>(completed) : 0.0;
  // Where known, the runs that ended early: the EOS probability over their first half and over the
  // last 16 tokens before their end (medians over the runs).
  s["eos_prob_trend"] = eos_end.empty() ? ojson(nullptr)
                                        : ojson{{"runs", static_cast<int64_t>(eos_end.size())},
                                                {"first_half", percentile(eos_first, 0.5)},
                                                {"before_end", percentile(eos_end, 0.5)}};
  s["episodes"] = episodes;
  s["finish_reasons"] = finish;
  return s;
}

// The task's language: the option, else the groups' suffix (exam-it), else the prompts' words.
std::string task_language(const std::vector<BenchPrompt>& prompts, const std::string& given) {
  if (!given.empty()) return given;
  std::map<std::string, int> votes;
  for (const auto& p : prompts) {
    const size_t dash = p.group.rfind('-');
    const std::string suffix = dash == std::string::npos ? "" : p.group.substr(dash + 1);
    if (suffix == "en" || suffix == "it" || suffix == "fr") {
      ++votes[suffix];
      continue;
    }
    std::string text = p.prompt;
    if (p.chat())
      for (const auto& m : p.messages)
        if (m.is_object() && m.contains("content") && m["content"].is_string())
          text += " " + m["content"].get<std::string>();
    const std::string l = language_profile(text).language(4, 0.5);
    if (!l.empty()) ++votes[l];
  }
  std::string best;
  int n = 0;
  for (const auto& [l, v] : votes)
    if (v > n) best = l, n = v;
  return best;
}

std::string language_instruction(const std::string& lang) {
  if (lang == "it") return "Rispondi solo in italiano.";
  if (lang == "fr") return "Réponds uniquement en français.";
  if (lang == "en") return "Answer only in English.";
  return "";
}

std::string fmt(double v, int digits = 2) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(digits);
  o << v;
  return o.str();
}

std::string pct(double share) {
  return fmt(100 * share, 0) + "%";
}

}  // namespace

std::map<std::string, double> parse_prometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos || name_end == 0) continue;
    const std::string name = line.substr(0, name_end);
    size_t value_at = name_end;
    if (line[name_end] == '{') {
      // Label values may hold '}' inside quotes: find the closing brace outside them.
      bool quoted = false;
      size_t i = name_end + 1;
      for (; i < line.size(); ++i) {
        if (line[i] == '\\' && quoted) {
          ++i;
          continue;
        }
        if (line[i] == '"') quoted = !quoted;
        if (line[i] == '}' && !quoted) break;
      }
      if (i >= line.size()) continue;
      value_at = i + 1;
    }
    std::istringstream v(line.substr(value_at));
    std::string token;
    if (!(v >> token)) continue;
    char* end = nullptr;
    const double x = std::strtod(token.c_str(), &end);
    if (end == token.c_str() || !std::isfinite(x)) continue;
    out[name] += x;
  }
  return out;
}

void fold_metrics(const std::map<std::string, double>& m, const std::map<std::string, double>& first, SystemSample& s) {
  auto find = [&](std::initializer_list<const char*> names, const std::map<std::string, double>& from) -> double {
    for (const char* n : names)
      if (auto it = from.find(n); it != from.end()) return it->second;
    return -1;
  };
  if (s.source.empty() || s.source == "in-process") {
    if (m.count("coda:kv_cache_usage_perc") || m.count("coda:num_requests_waiting"))
      s.source = s.source.empty() ? "coda" : s.source;
    else if (m.count("vllm:kv_cache_usage_perc") || m.count("vllm:gpu_cache_usage_perc") ||
             m.count("vllm:num_requests_waiting"))
      s.source = "vllm";
    else if (m.count("llamacpp:kv_cache_usage_ratio") || m.count("llamacpp:requests_processing"))
      s.source = "llama.cpp";
  }
  s.available = true;
  ++s.samples;
  const double kv = find({"coda:kv_cache_usage_perc", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                          "llamacpp:kv_cache_usage_ratio"},
                         m);
  if (kv >= 0) s.kv_usage_peak = std::max(s.kv_usage_peak, kv);
  const double waiting =
      find({"coda:num_requests_waiting", "vllm:num_requests_waiting", "llamacpp:requests_deferred"}, m);
  if (waiting >= 0) s.waiting_peak = std::max(s.waiting_peak, waiting);
  const double pre = find({"vllm:num_preemptions_total", "vllm:num_preemptions"}, m);
  const double pre0 = find({"vllm:num_preemptions_total", "vllm:num_preemptions"}, first);
  if (pre >= 0) s.preemptions = std::max(s.preemptions, pre - std::max(0.0, pre0));
}

bool fold_slots(const std::string& body, SystemSample& s) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_array() || j.empty()) return false;
  int busy = 0, total = 0;
  double fullest = -1;
  int64_t fullest_n_ctx = 0;
  for (const auto& slot : j) {
    if (!slot.is_object() || !slot.contains("n_ctx")) return false;
    ++total;
    // llama.cpp says is_processing; ik_llama.cpp's older shape says state (0: idle).
    const auto proc = slot.find("is_processing");
    const auto state = slot.find("state");
    const bool is_busy = proc != slot.end()    ? proc->is_boolean() && proc->get<bool>()
                         : state != slot.end() ? state->is_number() && state->get<double>() != 0
                                               : false;
    if (!is_busy) continue;
    ++busy;
    // The sequence's tokens in the slot's context: llama.cpp counts the generated tokens into
    // n_prompt_tokens (its prompt cache holds them); older servers said n_past.
    const auto n_ctx = slot["n_ctx"];
    const auto past = slot.find("n_past");
    const auto held = past != slot.end() ? past : slot.find("n_prompt_tokens");
    if (held != slot.end() && held->is_number() && n_ctx.is_number() && n_ctx.get<double>() >= 1) {
      const double share = held->get<double>() / n_ctx.get<double>();
      if (share > fullest) {
        fullest = share;
        fullest_n_ctx = static_cast<int64_t>(n_ctx.get<double>());
      }
    }
  }
  if (fullest > s.slot_context_peak) {
    s.slot_context_peak = fullest;
    s.slot_n_ctx = fullest_n_ctx;
  }
  s.slots_available = true;
  s.slots_total = total;
  s.slots_busy_peak = std::max(s.slots_busy_peak, busy);
  return true;
}

ojson run_diagnosis(Target& target, const std::vector<BenchPrompt>& prompts, const DiagnoseOptions& o,
                    const SystemProbes& probes, const std::function<void(const DiagnoseProgress&)>& on_progress,
                    std::atomic<bool>* stop) {
  // The system plane is sampled while the batteries run.
  SystemSample sys;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread sampler;
  if (probes.metrics || probes.slots)
    sampler = std::thread([&] {
      std::map<std::string, double> first;
      bool read_slots = static_cast<bool>(probes.slots);
      std::unique_lock<std::mutex> lock(mu);
      // At least one reading, even of a battery over before this thread first ran.
      for (bool first_pass = true; first_pass || !done; first_pass = false) {
        if (probes.metrics) {
          lock.unlock();
          auto text = probes.metrics();
          lock.lock();
          if (text) {
            const auto m = parse_prometheus(*text);
            if (first.empty()) first = m;
            fold_metrics(m, first, sys);
          } else if (sys.error.empty()) {
            sys.error = text.message();
          }
        }
        if (read_slots) {
          lock.unlock();
          auto body = probes.slots();
          lock.lock();
          const bool folded = body && fold_slots(*body, sys);
          // vLLM and SGLang have no /slots: a first answer that is not a list of slots ends the polling.
          if (!folded && !sys.slots_available) {
            read_slots = false;
            sys.slots_error = body ? "GET /slots: not a list of slots" : body.message();
          }
        }
        cv.wait_for(lock, std::chrono::seconds(1), [&] { return done; });
      }
    });

  auto battery = [&](const std::string& stage, const nlohmann::json& sampling, int max_tokens) {
    ThresholdOptions t;
    t.runs = o.runs;
    t.max_tokens = max_tokens;
    t.quantile = o.quantile;
    t.margin = o.margin;
    t.seed = o.seed;  // the same seeds in every battery: the variant differs only in its setting
    t.max_concurrency = o.max_concurrency;
    t.top_logprobs = o.top_logprobs;
    t.model = o.model;
    t.sampling = sampling;
    auto runs = run_threshold(
        target, prompts, t,
        [&](const ThresholdProgress& p) {
          if (on_progress) on_progress({stage, p});
        },
        stop);
    return std::make_pair(t, std::move(runs));
  };

  ojson d;
  d["target"] = target.describe();
  d["sampling"] = o.sampling;
  d["runs_per_group"] = o.runs;
  std::vector<std::string> groups;
  for (const auto& p : prompts)
    if (std::find(groups.begin(), groups.end(), p.group) == groups.end()) groups.push_back(p.group);
  d["groups"] = groups;
  const std::string lang = task_language(prompts, o.language);
  d["language"] = lang.empty() ? ojson(nullptr) : ojson(lang);

  // Decoding: the current parameters, then the penalty variant on the same prompts and seeds.
  const double rp = o.sampling.contains("repetition_penalty") && o.sampling["repetition_penalty"].is_number()
                        ? o.sampling["repetition_penalty"].get<double>()
                        : 1.0;
  const double variant_rp = o.penalty > 0 ? o.penalty : std::max(1.2, std::round((rp + 0.1) * 100) / 100);
  nlohmann::json variant_sampling = o.sampling;
  variant_sampling["repetition_penalty"] = variant_rp;
  std::vector<ThresholdRun> all;
  auto [cur_opts, cur_runs] = battery("decoding", o.sampling, o.decode_tokens);
  const ojson cur = decoding_stats(cur_runs, rp, o.decode_tokens);
  all.insert(all.end(), cur_runs.begin(), cur_runs.end());
  const bool reached = cur["completed"].get<int64_t>() > 0 && !(stop && stop->load());
  ojson var;
  if (reached) {
    auto [var_opts, var_runs] = battery("variant", variant_sampling, o.decode_tokens);
    var = decoding_stats(var_runs, variant_rp, o.decode_tokens);
    all.insert(all.end(), var_runs.begin(), var_runs.end());
  }

  // Decoding verdict.
  ojson dec;
  dec["plane"] = "decoding";
  dec["current"] = cur;
  dec["variant"] = var;
  nlohmann::json context_sampling = o.sampling;
  if (!reached) {
    dec["status"] = "unknown";
    dec["finding"] = "no request completed, so the text could not be judged";
  } else {
    const double lr = cur["loop_rate"].get<double>(), vr = var["loop_rate"].get<double>();
    const bool problem = lr >= o.loop_rate;
    // Half the runs or more ending by themselves well short of the length asked: premature EOS,
    // the failure the perpetual-text study reports, and a length no other plane can judge.
    const double early = cur["ended_early_share"].get<double>();
    const bool premature = !problem && early >= 0.5;
    const bool variant_helps = vr < lr;
    dec["status"] = problem || premature ? "problem" : "ok";
    if (premature)
      dec["problem"] = "premature_eos";
    else if (problem)
      dec["problem"] = "loops";
    std::string f =
        cur["looped"].dump() + " of " + cur["completed"].dump() + " runs looped within " +
        std::to_string(o.decode_tokens) + " tokens at repetition_penalty " + fmt(rp) + " (" + pct(lr) +
        (cur["loop_onset_median"].is_null() ? "" : ", median onset " + cur["loop_onset_median"].dump() + " tokens") +
        "); " + var["looped"].dump() + " of " + var["completed"].dump() + " at " + fmt(variant_rp) + " (" + pct(vr) +
        ").";
    if (problem && variant_helps) {
      f += " The loops are a decoding problem: the penalty variant removes " +
           std::to_string(cur["looped"].get<int64_t>() - var["looped"].get<int64_t>()) + " of them.";
      dec["settings"] = {{"repetition_penalty", variant_rp}};
      context_sampling = variant_sampling;
    } else if (problem) {
      f += " The penalty variant does not reduce them: try a higher temperature or min_p, and see the context plane.";
      dec["settings"] = ojson::object();
    } else if (premature) {
      f += " But " + cur["ended_early"].dump() + " of " + cur["completed"].dump() + " runs (" + pct(early) +
           ") ended by themselves before " + std::to_string(o.decode_tokens) + " tokens (median length " +
           cur["mean_length"].dump() +
           "): premature EOS. The model ends before the length this task asks for, so nothing about longer text "
           "can be judged. Ask for a longer text in the prompt, set min_tokens, or use coda's perpetual mode "
           "(--perpetual-min-tokens).";
      if (cur.contains("eos_prob_trend") && !cur["eos_prob_trend"].is_null())
        f += " The EOS probability went from " + fmt(cur["eos_prob_trend"]["first_half"].get<double>(), 4) +
             " (median over each run's first half) to " + fmt(cur["eos_prob_trend"]["before_end"].get<double>(), 4) +
             " over the last 16 tokens before the end.";
      dec["settings"] = ojson::object();
    } else {
      f += " Below the " + pct(o.loop_rate) + " bound: the current parameters are fine for this length.";
    }
    if (!cur["mean_entropy"].is_null())
      f += " Median per-run mean entropy " + fmt(cur["mean_entropy"].get<double>()) + " nats.";
    dec["finding"] = f;
  }

  // Context: the threshold at the decoding plane's fix.
  ojson ctx;
  ctx["plane"] = "context";
  ctx["sampling"] = context_sampling;
  if (!reached || (stop && stop->load())) {
    ctx["status"] = "unknown";
    ctx["finding"] = "not reached";
  } else {
    auto [t_opts, t_runs] = battery("context", context_sampling, o.max_tokens);
    all.insert(all.end(), t_runs.begin(), t_runs.end());
    ojson summary = summarize_threshold(t_runs, t_opts, target.describe());
    for (auto& [g, gj] : summary["groups"].items()) gj.erase("runs_detail");  // the strip is in coda threshold
    ctx["threshold"] = summary;
    int64_t best = -1;
    std::string worst_group;
    bool drift = false;
    std::vector<std::string> types;
    for (const auto& [g, gj] : summary["groups"].items()) {
      if (!gj["recommended_max_tokens"].is_null()) {
        const int64_t r = gj["recommended_max_tokens"].get<int64_t>();
        if (best < 0 || r < best) best = r, worst_group = g;
      }
      for (const auto& t : gj["episode_types"]) {
        const std::string type = t["type"].get<std::string>();
        drift |= type == "language_drift";
        if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
      }
    }
    ojson settings = ojson::object();
    std::string f;
    int64_t early_groups = 0;
    std::string early_note;
    for (const auto& [g, gj] : summary["groups"].items())
      if (gj.value("status", "") == "ended_early") {
        ++early_groups;
        if (early_note.empty()) early_note = g + ": " + gj.value("note", "");
      }
    if (best < 0 && early_groups > 0) {
      ctx["status"] = "unknown";
      f = "No threshold can be measured: in " + std::to_string(early_groups) + " of " +
          std::to_string(summary["groups"].size()) + " groups too few runs reached max_tokens " +
          std::to_string(o.max_tokens) + " (" + early_note + ").";
    } else if (best >= 0) {
      const auto& gj = summary["groups"][worst_group];
      ctx["status"] = "problem";
      f = "Coherence ends before max_tokens " + std::to_string(o.max_tokens) + ": in " + worst_group + ", " +
          std::to_string(static_cast<int>(std::lround(100 * o.quantile))) + "% of runs have degraded by " +
          gj["threshold_tokens"].dump() + " generated tokens (95% interval " + gj["threshold_ci95"][0].dump() + " to " +
          (gj["threshold_ci95"][1].is_null() ? std::string("beyond") : gj["threshold_ci95"][1].dump()) +
          "). Set max_tokens to " + std::to_string(best) + " (the threshold less " + pct(o.margin) + ").";
      settings["max_tokens"] = best;
      ctx["threshold_tokens"] = gj["threshold_tokens"];
      ctx["recommended_max_tokens"] = best;
    } else {
      ctx["status"] = "ok";
      f = "No threshold within " + std::to_string(o.max_tokens) + " tokens: fewer than " +
          std::to_string(static_cast<int>(std::lround(100 * o.quantile))) +
          "% of runs degraded; the task fits this length.";
    }
    if (!types.empty()) {
      std::string seq;
      for (const auto& t : types) seq += (seq.empty() ? "" : " -> ") + t;
      f += " Episodes in order of appearance: " + seq + ".";
    }
    if (drift && !language_instruction(lang).empty()) {
      settings["system_prompt"] = language_instruction(lang);
      f += " The text drifted out of the task's language: constrain it in the system prompt.";
    }
    if (!settings.empty()) ctx["settings"] = settings;
    ctx["finding"] = f;
  }

  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  if (sampler.joinable()) sampler.join();

  // System verdict, from everything sent.
  ojson sysv;
  sysv["plane"] = "system";
  int64_t sent = 0, failed = 0;
  std::vector<double> e2e, ttft;
  std::string first_error;
  for (const auto& r : all) {
    ++sent;
    if (!r.ok) {
      ++failed;
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    e2e.push_back(r.e2e_ms);
    if (r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
  }
  ojson ev;
  ev["requests"] = sent;
  ev["errors"] = failed;
  if (!first_error.empty()) ev["first_error"] = first_error;
  ev["e2e_ms_p50"] = e2e.empty() ? ojson(nullptr) : ojson(percentile(e2e, 0.5));
  ev["e2e_ms_p90"] = e2e.empty() ? ojson(nullptr) : ojson(percentile(e2e, 0.9));
  ev["ttft_ms_p50"] = ttft.empty() ? ojson(nullptr) : ojson(percentile(ttft, 0.5));
  ev["ttft_ms_p90"] = ttft.empty() ? ojson(nullptr) : ojson(percentile(ttft, 0.9));
  ev["metrics"] = sys.available ? ojson(sys.source) : ojson(nullptr);
  if (!sys.available && probes.metrics) ev["metrics_error"] = sys.error;
  ev["kv_cache_usage_peak"] = sys.kv_usage_peak >= 0 ? ojson(sys.kv_usage_peak) : ojson(nullptr);
  ev["requests_waiting_peak"] = sys.waiting_peak >= 0 ? ojson(sys.waiting_peak) : ojson(nullptr);
  ev["preemptions"] = sys.preemptions >= 0 ? ojson(sys.preemptions) : ojson(nullptr);
  ev["metrics_samples"] = sys.samples;
  if (sys.slots_available) {
    ev["slots"] = sys.slots_total;
    ev["slots_busy_peak"] = sys.slots_busy_peak;
    ev["slot_context_peak"] = sys.slot_context_peak >= 0 ? ojson(sys.slot_context_peak) : ojson(nullptr);
    if (sys.slot_context_peak >= 0) ev["slot_n_ctx"] = sys.slot_n_ctx;
  } else if (probes.slots) {
    ev["slots_error"] = sys.slots_error;
  }
  sysv["evidence"] = ev;
  std::vector<std::string> issues;
  if (failed > 0) {
    std::string e = std::to_string(failed) + " of " + std::to_string(sent) + " requests failed (" + first_error + ")";
    // A 4xx is the deployment refusing these requests (a context shorter than max_tokens, a wrong
    // model name, a missing key), not a failure under load.
    if (first_error.find("HTTP 4") != std::string::npos)
      e += "; the target refused the requests as sent: check -n/--decode-tokens against its context, --model and "
           "--api-key";
    issues.push_back(e);
  }
  if (sys.kv_usage_peak >= 0.95) issues.push_back("the KV cache reached " + pct(sys.kv_usage_peak));
  // llama.cpp splits -c among its -np slots (unless --kv-unified), and a sequence that fills its
  // slot is cut (or shifted, with --context-shift): the commonest way its users run out of context.
  if (sys.slot_context_peak >= 0.95)
    issues.push_back("a request filled " + pct(sys.slot_context_peak) + " of its slot's context (GET /slots: " +
                     std::to_string(sys.slots_total) + " slots of n_ctx " + std::to_string(sys.slot_n_ctx) +
                     "); raise -c (llama-server splits it among the -np slots unless the KV cache is unified), "
                     "lower -np or lower max_tokens");
  if (sys.preemptions > 0) issues.push_back(fmt(sys.preemptions, 0) + " preemptions");
  if (!issues.empty()) {
    std::string f;
    for (const auto& s : issues) f += (f.empty() ? "" : "; ") + s;
    if (!sys.available && probes.metrics) f += "; no metrics (" + sys.error + ")";
    sysv["status"] = "problem";
    sysv["finding"] = f + ". Fix the deployment first: the text of failing or preempted requests says little.";
  } else {
    sysv["status"] = "ok";
    std::string f = "All " + std::to_string(sent) + " requests completed";
    if (!e2e.empty()) f += "; end-to-end p50 " + fmt(percentile(e2e, 0.5) / 1000, 2) + " s";
    if (sys.kv_usage_peak >= 0) f += "; KV cache peak " + pct(sys.kv_usage_peak);
    if (sys.slot_context_peak >= 0) f += "; fullest slot " + pct(sys.slot_context_peak) + " of its context";
    if (!sys.available) f += probes.metrics ? "; no metrics (" + sys.error + ")" : "; no metrics endpoint";
    sysv["finding"] = f + ".";
  }

  d["planes"] = ojson::array({sysv, dec, ctx});
  // The verdict: the first plane with a problem, and the one its fix may reveal.
  const char* order[] = {"system", "decoding", "context"};
  std::string plane, next;
  for (int i = 0; i < 3; ++i)
    if (d["planes"][i]["status"] == "problem") {
      plane = order[i];
      if (i < 2) next = order[i + 1];
      break;
    }
  ojson settings = ojson::object();
  for (const auto& p : d["planes"])
    if (p.contains("settings"))
      for (const auto& [k, v] : p["settings"].items()) settings[k] = v;
  ojson verdict;
  verdict["plane"] = plane.empty() ? ojson(nullptr) : ojson(plane);
  verdict["next_plane"] = next.empty() ? ojson(nullptr) : ojson(next);
  verdict["settings"] = settings;
  std::string s;
  bool unknown = false;
  for (const auto& p : d["planes"]) unknown |= p["status"] == "unknown";
  if (plane.empty() && unknown) {
    s = "No problem found, but not every plane could be judged (see the planes marked unknown).";
  } else if (plane.empty()) {
    s = "No problem found on the three planes at these settings.";
  } else if (plane == "decoding" && dec.value("problem", "") == "premature_eos") {
    s = "The problem is on the decoding plane: premature EOS (the runs end before the length asked). Keep them "
        "going (min_tokens, perpetual mode) or ask for a longer text, then run coda diagnose again.";
  } else if (plane == "system") {
    s = "The problem is on the system plane. Fix it, then run coda diagnose again: the decoding plane is next.";
  } else if (plane == "decoding") {
    s = "The problem is on the decoding plane (loops). With the fix, the context plane is next";
    s += ctx["status"] == "problem" ? ", and it already shows a threshold at the fixed settings."
                                    : "; at the fixed settings it showed no threshold within max_tokens.";
  } else {
    s = "Decoding is fine; the problem is on the context plane: generations degrade with length. Keep max_tokens "
        "below the threshold.";
  }
  verdict["summary"] = s;
  d["verdict"] = verdict;
  return d;
}

std::string diagnosis_summary(const ojson& d) {
  std::ostringstream o;
  for (const auto& p : d["planes"]) {
    o << p["plane"].get<std::string>() << ": " << p["status"].get<std::string>() << ". "
      << p.value("finding", std::string()) << "\n";
  }
  const auto& v = d["verdict"];
  o << "verdict: " << v["summary"].get<std::string>() << "\n";
  if (!v["settings"].empty()) {
    o << "settings:";
    for (const auto& [k, x] : v["settings"].items()) o << " " << k << "=" << x.dump();
    o << "\n";
  }
  return o.str();
}

std::string diagnosis_report_html(const ojson& d) {
  std::ostringstream b;
  const auto& v = d["verdict"];
  b << "<p>Target: " << svg::escape(d.value("target", "")) << "; groups:";
  for (const auto& g : d["groups"]) b << " " << svg::escape(g.get<std::string>());
  b << "; " << d["runs_per_group"] << " runs per group and battery; current sampling "
    << svg::escape(d["sampling"].dump()) << ".</p>";
  b << "<h2>Verdict</h2><p><b>" << svg::escape(v["summary"].get<std::string>()) << "</b></p>";
  if (!v["settings"].empty()) {
    b << "<table><tr><th>setting</th><th>value</th></tr>";
    for (const auto& [k, x] : v["settings"].items())
      b << "<tr><td>" << svg::escape(k) << "</td><td>" << svg::escape(x.is_string() ? x.get<std::string>() : x.dump())
        << "</td></tr>";
    b << "</table>";
  }
  auto badge = [](const std::string& status) {
    const char* color = status == "problem" ? "#d62728" : status == "ok" ? "#2ca02c" : "#7f7f7f";
    return std::string("<span style=\"background:") + color + ";color:white;padding:1px 6px;border-radius:3px\">" +
           status + "</span>";
  };
  for (const auto& p : d["planes"]) {
    const std::string plane = p["plane"].get<std::string>();
    b << "<h2>" << plane << " " << badge(p["status"].get<std::string>()) << "</h2><p>"
      << svg::escape(p.value("finding", std::string())) << "</p>";
    if (plane == "system") {
      b << "<table><tr><th>evidence</th><th>value</th></tr>";
      for (const auto& [k, x] : p["evidence"].items())
        b << "<tr><td>" << svg::escape(k) << "</td><td>"
          << (x.is_null() ? "&mdash;" : svg::escape(x.is_string() ? x.get<std::string>() : x.dump())) << "</td></tr>";
      b << "</table>";
    } else if (plane == "decoding" && !p["variant"].is_null()) {
      const auto& c = p["current"];
      const auto& w = p["variant"];
      std::vector<std::string> cats = {"current (rp " + fmt(c["repetition_penalty"].get<double>()) + ")",
                                       "variant (rp " + fmt(w["repetition_penalty"].get<double>()) + ")"};
      auto val = [](const ojson& x, const char* k) { return static_cast<double>(x[k].get<int64_t>()); };
      std::vector<svg::Series> series = {
          {"looped", "#d62728", {val(c, "looped"), val(w, "looped")}},
          {"no loop", "#2ca02c", {val(c, "completed") - val(c, "looped"), val(w, "completed") - val(w, "looped")}},
          {"error", "#7f7f7f", {val(c, "errors"), val(w, "errors")}}};
      svg::Axes a;
      a.title = "Runs that looped within " + std::to_string(c["max_tokens"].get<int>()) + " tokens";
      a.y_label = "runs";
      b << svg::stacked_bars(a, cats, series);
      b << "<table><tr><th></th><th>loop rate (95% interval)</th><th>median loop onset</th><th>median mean "
           "entropy (nats)</th><th>median length</th><th>finish reasons</th></tr>";
      for (const auto* x : {&c, &w}) {
        const auto& ci = (*x)["loop_rate_ci95"];
        b << "<tr><td>rp " << fmt((*x)["repetition_penalty"].get<double>()) << "</td><td>"
          << pct((*x)["loop_rate"].get<double>()) << " [" << pct(ci[0].is_null() ? 0 : ci[0].get<double>()) << ", "
          << pct(ci[1].is_null() ? 0 : ci[1].get<double>()) << "]</td><td>"
          << ((*x)["loop_onset_median"].is_null() ? "&mdash;" : (*x)["loop_onset_median"].dump()) << "</td><td>"
          << ((*x)["mean_entropy"].is_null() ? "&mdash;" : fmt((*x)["mean_entropy"].get<double>())) << "</td><td>"
          << ((*x)["mean_length"].is_null() ? "&mdash;" : (*x)["mean_length"].dump()) << "</td><td>"
          << svg::escape((*x)["finish_reasons"].dump()) << "</td></tr>";
      }
      b << "</table>";
    } else if (plane == "context" && p.contains("threshold")) {
      const auto& t = p["threshold"];
      static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};
      std::vector<svg::Curve> curves;
      int k = 0;
      const double max_tokens = t.value("max_tokens", 0);
      std::vector<std::pair<double, std::string>> marks;
      for (const auto& [g, gj] : t["groups"].items()) {
        curves.push_back(survival_curve(g, gj, max_tokens, kColors[k++ % 6]));
        if (!gj["threshold_tokens"].is_null())
          marks.emplace_back(gj["threshold_tokens"].get<double>(), g + " threshold");
      }
      svg::Axes a;
      a.title = "Coherence against generated tokens at " + svg::escape(p["sampling"].dump());
      a.x_label = "generated tokens";
      a.y_label = "share of runs still coherent";
      a.width = 760;
      b << svg::step_curves(a, curves, marks);
      b << "<table><tr><th>group</th><th>runs</th><th>degraded</th><th>threshold</th><th>recommended "
           "max_tokens</th></tr>";
      for (const auto& [g, gj] : t["groups"].items())
        b << "<tr><td>" << svg::escape(g) << "</td><td>" << gj["completed"] << "</td><td>" << gj["degraded"]
          << "</td><td>" << (gj["threshold_tokens"].is_null() ? "&mdash;" : gj["threshold_tokens"].dump())
          << "</td><td>" << (gj["recommended_max_tokens"].is_null() ? "&mdash;" : gj["recommended_max_tokens"].dump())
          << "</td></tr>";
      b << "</table>";
    }
  }
  return svg::page("coda diagnose", b.str());
}

Status write_diagnosis_outputs(const std::string& dir, const ojson& d) {
  return write_output_files(dir, {{"diagnosis.json", d.dump(2) + "\n"}, {"report.html", diagnosis_report_html(d)}});
}

}  // namespace coda::lab
