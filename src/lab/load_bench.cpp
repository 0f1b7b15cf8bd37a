#include "lab/load_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "lab/arrivals.h"
#include "lab/stats.h"

namespace coda::lab {

namespace {

using Clock = std::chrono::steady_clock;

nlohmann::ordered_json quantiles(const std::vector<double>& xs) {
  auto num = [](double v) { return std::isnan(v) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v); };
  double mean = 0;
  for (double x : xs) mean += x;
  return {{"p50", num(percentile(xs, 0.5))},
          {"p90", num(percentile(xs, 0.9))},
          {"p99", num(percentile(xs, 0.99))},
          {"mean", num(xs.empty() ? std::nan("") : mean / static_cast<double>(xs.size()))},
          {"n", xs.size()}};
}

double tpot_ms(const client::Completion& c) {
  if (c.completion_tokens <= 1 || c.ttft_ms < 0) return std::nan("");
  return (c.e2e_ms - c.ttft_ms) / static_cast<double>(c.completion_tokens - 1);
}

}  // namespace

nlohmann::ordered_json request_body(const BenchPrompt& p, const LoadOptions& opts, uint64_t request_seed) {
  nlohmann::ordered_json b = nlohmann::ordered_json::object();
  if (!opts.model.empty()) b["model"] = opts.model;
  if (p.chat())
    b["messages"] = p.messages;
  else
    b["prompt"] = p.prompt;
  b["max_tokens"] = opts.max_tokens;
  for (const auto& [k, v] : opts.sampling.items()) b[k] = v;
  if (!b.contains("seed")) b["seed"] = request_seed;
  if (opts.stream) {
    b["stream"] = true;
    b["stream_options"] = {{"include_usage", true}};
  }
  return b;
}

bool stop_at_limit(const RequestRecord& r) {
  return client::stopped_at_limit(r.out, r.max_tokens);
}

bool ended_in_reasoning(const RequestRecord& r) {
  const auto& c = r.out;
  if (!c.ok || c.finish_reason == "tool_calls") return false;
  const size_t lead = c.text.find_first_not_of(" \t\r\n");
  if (lead == std::string::npos) return !c.reasoning.empty();
  return c.text.compare(lead, 7, "<think>") == 0 && c.text.find("</think>") == std::string::npos;
}

bool is_failure(const RequestRecord& r, const LoadOptions& opts) {
  if (!r.out.ok) return false;
  if (ended_in_reasoning(r)) return true;
  auto counts = [&](const std::string& reason) {
    return std::find(opts.failure_reasons.begin(), opts.failure_reasons.end(), reason) != opts.failure_reasons.end();
  };
  return counts(r.out.finish_reason) || (!opts.trust_finish_reason && counts("length") && stop_at_limit(r));
}

LoadRun run_load(Target& target, const std::vector<BenchPrompt>& prompts, const LoadOptions& opts,
                 const std::function<void(const Progress&)>& on_progress, std::atomic<bool>* stop) {
  LoadRun run;
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  bool any_success = false;
  int64_t errors_before_success = 0;
  Progress prog;
  prog.total = opts.requests * opts.sets;
  std::atomic<bool> cancel_all{false};
  const auto start = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  auto stopping = [&] { return (stop && stop->load()) || cancel_all.load(); };
  // Progress is copied under the lock and reported outside it. Call without holding `mu`.
  auto tick = [&] {
    if (!on_progress) return;
    Progress copy;
    {
      std::lock_guard<std::mutex> lock(mu);
      copy = prog;
    }
    on_progress(copy);
  };

  std::vector<std::thread> workers;
  for (int set = 0; set < opts.sets && !stopping(); ++set) {
    prog.set = set;
    auto times = arrival_times(opts.requests, opts.rate_per_min / 60.0, opts.burstiness,
                               opts.seed * 1000003ULL + static_cast<uint64_t>(set));
    if (!times) {
      run.first_error = times.message();
      break;
    }
    std::mt19937_64 pick(opts.seed * 7919ULL + static_cast<uint64_t>(set));
    const double set_start = now_s();
    for (int64_t i = 0; i < opts.requests && !stopping(); ++i) {
      // Wait for the send time, reporting progress meanwhile; then for a concurrency slot.
      const double due = set_start + (*times)[static_cast<size_t>(i)];
      while (!stopping()) {
        const double left = due - now_s();
        if (left <= 0) break;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait_for(lock, std::chrono::duration<double>(std::min(left, 0.1)));
        }
        tick();
      }
      {
        std::unique_lock<std::mutex> lock(mu);
        while (opts.max_concurrency > 0 && in_flight >= opts.max_concurrency && !stopping()) {
          cv.wait_for(lock, std::chrono::milliseconds(100));
          lock.unlock();
          tick();
          lock.lock();
        }
        if (stopping()) break;
        ++in_flight;
        ++prog.sent;
      }
      const BenchPrompt& p = prompts[pick() % prompts.size()];
      RequestRecord rec;
      rec.set = set;
      rec.index = i;
      rec.group = p.group;
      rec.sent_at = now_s();
      rec.max_tokens = opts.max_tokens;
      const uint64_t request_seed =
          opts.seed * 1000003ULL + static_cast<uint64_t>(set) * 100000007ULL + static_cast<uint64_t>(i);
      nlohmann::ordered_json body = request_body(p, opts, request_seed);
      const bool chat = p.chat();
      workers.emplace_back([&, rec = std::move(rec), body = std::move(body), chat]() mutable {
        rec.out = target.send(body, chat, &cancel_all);
        std::lock_guard<std::mutex> lock(mu);
        --in_flight;
        ++prog.done;
        if (!rec.out.ok) {
          ++prog.errors;
          if (run.first_error.empty()) run.first_error = rec.out.error;
          if (!any_success && ++errors_before_success >= opts.abort_after_errors &&
              rec.out.error_kind != client::ErrorKind::Cancelled) {
            run.target_down = true;
            cancel_all = true;
          }
        } else {
          any_success = true;
          if (is_failure(rec, opts)) ++prog.failures;
        }
        run.records.push_back(std::move(rec));
        cv.notify_all();
      });
      tick();
    }
    // The next set starts when this one has drained, so the sets are independent.
    std::unique_lock<std::mutex> lock(mu);
    while (in_flight > 0) {
      if (stop && stop->load()) cancel_all = true;
      cv.wait_for(lock, std::chrono::milliseconds(100));
      lock.unlock();
      tick();
      lock.lock();
    }
  }
  for (auto& w : workers) w.join();
  run.interrupted = stop && stop->load();
  run.duration_s = now_s();
  tick();
  std::sort(run.records.begin(), run.records.end(), [](const RequestRecord& a, const RequestRecord& b) {
    return a.set != b.set ? a.set < b.set : a.index < b.index;
  });
  return run;
}

nlohmann::ordered_json record_json(const RequestRecord& r, const LoadOptions& opts) {
  const auto& c = r.out;
  auto num = [](double v) {
    return std::isnan(v) || v < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v);
  };
  nlohmann::ordered_json j{
      {"set", r.set},
      {"index", r.index},
      {"group", r.group},
      {"sent_at", r.sent_at},
      {"ttft_ms", num(c.ttft_ms)},
      {"tpot_ms", num(tpot_ms(c))},
      {"e2e_ms", c.e2e_ms},
      {"prompt_tokens",
       c.prompt_tokens < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.prompt_tokens)},
      {"completion_tokens",
       c.completion_tokens < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.completion_tokens)},
      {"max_tokens", r.max_tokens},
      {"finish_reason",
       c.finish_reason.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.finish_reason)},
      {"failure", is_failure(r, opts)},
      {"no_answer", ended_in_reasoning(r)},
      {"stop_at_limit", stop_at_limit(r)},
      {"error", c.ok ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.error)},
      {"error_kind", c.ok ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(client::to_string(c.error_kind))},
      {"status", c.status}};
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  if (c.coda.is_object() && c.coda.contains("events") && c.coda["events"].is_array())
    for (const auto& e : c.coda["events"])
      if (e.is_object() && e.contains("type") && e["type"].is_string()) events.push_back(e["type"].get<std::string>());
  j["guard_events"] = events;
  return j;
}

nlohmann::ordered_json summarize(const LoadRun& run, const LoadOptions& opts, const std::string& target) {
  int64_t completed = 0, failures = 0, errors = 0, out_tokens = 0, good = 0, with_events = 0, at_limit = 0,
          no_answer = 0;
  std::map<std::string, int64_t> reasons, kinds, events;
  std::map<int, std::pair<int64_t, int64_t>> per_set;  // set -> (completed, failures)
  std::map<std::string, std::pair<int64_t, int64_t>> per_group;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& r : run.records) {
    const auto& c = r.out;
    if (!c.ok) {
      ++errors;
      ++kinds[client::to_string(c.error_kind)];
      continue;
    }
    ++completed;
    const bool fail = is_failure(r, opts);
    failures += fail;
    no_answer += ended_in_reasoning(r);
    ++reasons[c.finish_reason.empty() ? "unknown" : c.finish_reason];
    at_limit += stop_at_limit(r);
    per_set[r.set].first += 1;
    per_set[r.set].second += fail;
    per_group[r.group].first += 1;
    per_group[r.group].second += fail;
    if (c.completion_tokens > 0) out_tokens += c.completion_tokens;
    if (c.ttft_ms >= 0) ttft.push_back(c.ttft_ms);
    const double tp = tpot_ms(c);
    if (!std::isnan(tp)) tpot.push_back(tp);
    for (size_t i = 1; i < c.chunk_ms.size(); ++i) itl.push_back(c.chunk_ms[i] - c.chunk_ms[i - 1]);
    e2e.push_back(c.e2e_ms);
    bool any = false;
    if (c.coda.is_object() && c.coda.contains("events") && c.coda["events"].is_array())
      for (const auto& e : c.coda["events"])
        if (e.is_object() && e.contains("type") && e["type"].is_string()) {
          ++events[e["type"].get<std::string>()];
          any = true;
        }
    with_events += any;
    const bool slo = !fail && (opts.goodput_ttft_ms <= 0 || c.ttft_ms <= opts.goodput_ttft_ms) &&
                     (opts.goodput_tpot_ms <= 0 || std::isnan(tp) || tp <= opts.goodput_tpot_ms);
    good += slo;
  }
  auto rate_json = [](int64_t k, int64_t n) {
    auto ci = wilson_interval(k, n);
    return nlohmann::ordered_json{{"requests", n},
                                  {"failures", k},
                                  {"failure_rate", n ? static_cast<double>(k) / static_cast<double>(n) : 0.0},
                                  {"failure_rate_ci95", {ci.first, ci.second}}};
  };
  nlohmann::ordered_json s;
  s["target"] = target;
  s["requests"] = static_cast<int64_t>(run.records.size());
  s["planned_requests"] = opts.requests * opts.sets;
  s["completed"] = completed;
  s["errors"] = errors;
  s["failures"] = failures;
  const auto ci = wilson_interval(failures, completed);
  s["failure_rate"] = completed ? static_cast<double>(failures) / static_cast<double>(completed) : 0.0;
  s["failure_rate_ci95"] = {ci.first, ci.second};
  s["failure_definition"] = opts.failure_reasons;
  // The failures by kind: ended inside a reasoning model's thinking (no answer), or by a
  // failure_reason (length, by default) with an answer begun.
  s["failure_kinds"] = {{"no_answer", no_answer}, {"finish_reason", failures - no_answer}};
  s["stop_at_limit"] = at_limit;
  s["trust_finish_reason"] = opts.trust_finish_reason;
  nlohmann::ordered_json sets = nlohmann::ordered_json::array();
  for (const auto& [set, v] : per_set) {
    auto j = rate_json(v.second, v.first);
    j["set"] = set;
    sets.push_back(j);
  }
  s["sets"] = sets;
  nlohmann::ordered_json groups = nlohmann::ordered_json::object();
  for (const auto& [g, v] : per_group) groups[g] = rate_json(v.second, v.first);
  s["groups"] = groups;
  s["finish_reasons"] = nlohmann::ordered_json::object();
  for (const char* r : {"stop", "length", "repetition", "degenerate", "abort"}) s["finish_reasons"][r] = 0;
  for (const auto& [k, v] : reasons) s["finish_reasons"][k] = v;
  s["error_kinds"] = kinds;
  s["guard_events"] = events;
  s["guard_event_rate"] = completed ? static_cast<double>(with_events) / static_cast<double>(completed) : 0.0;
  s["ttft_ms"] = quantiles(ttft);
  s["tpot_ms"] = quantiles(tpot);
  s["itl_ms"] = quantiles(itl);
  s["e2e_ms"] = quantiles(e2e);
  double mean_len = 0;
  for (const auto& r : run.records)
    if (r.out.ok && r.out.completion_tokens > 0) mean_len += static_cast<double>(r.out.completion_tokens);
  s["mean_output_tokens"] = completed ? mean_len / static_cast<double>(completed) : 0.0;
  s["duration_s"] = run.duration_s;
  s["output_tokens_per_s"] = run.duration_s > 0 ? static_cast<double>(out_tokens) / run.duration_s : 0.0;
  s["request_throughput"] = run.duration_s > 0 ? static_cast<double>(completed) / run.duration_s : 0.0;
  s["goodput"] = run.duration_s > 0 ? static_cast<double>(good) / run.duration_s : 0.0;
  s["interrupted"] = run.interrupted;
  s["options"] = {{"rate_per_min", opts.rate_per_min},
                  {"burstiness", opts.burstiness},
                  {"max_concurrency", opts.max_concurrency},
                  {"requests_per_set", opts.requests},
                  {"sets", opts.sets},
                  {"seed", opts.seed},
                  {"max_tokens", opts.max_tokens},
                  {"sampling", opts.sampling},
                  {"stream", opts.stream}};
  return s;
}

}  // namespace coda::lab
