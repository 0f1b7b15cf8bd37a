#include "server/metrics.h"

#include <cstdio>
#include <sstream>

namespace coda {

Metrics::Metrics() {
  const std::vector<double> latency = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  for (const char* h :
       {"coda:time_to_first_token_seconds", "coda:inter_token_latency_seconds", "coda:e2e_request_latency_seconds"})
    histograms_[h] = Histogram{latency, std::vector<uint64_t>(latency.size() + 1, 0), 0, 0};
  const std::vector<double> sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  histograms_["coda:iteration_sequences"] = Histogram{sizes, std::vector<uint64_t>(sizes.size() + 1, 0), 0, 0};
  help_ = {{"coda:num_requests_running", "Requests being generated."},
           {"coda:num_requests_waiting", "Requests waiting in the queue."},
           {"coda:kv_cache_usage_perc", "KV cache in use, 0..1 of the budget."},
           {"coda:scheduler_paused", "1 while the scheduler is paused (POST /admin/pause), else 0."},
           {"coda:iteration_sequences", "Sequences in each batched forward pass (continuous batching at work)."},
           {"coda:prompt_tokens_total", "Prompt tokens processed."},
           {"coda:generation_tokens_total", "Tokens generated."},
           {"coda:request_success_total", "Finished requests by finish_reason."},
           {"coda:request_rejected_total", "Requests refused before generation, by HTTP status."},
           {"coda:guard_events_total", "Degeneration guard events by type."},
           {"coda:guard_repairs_total", "Repairs made by the guard."},
           {"coda:time_to_first_token_seconds", "Time to first token."},
           {"coda:inter_token_latency_seconds", "Time per output token after the first."},
           {"coda:e2e_request_latency_seconds", "End-to-end request latency."}};
  for (const char* g : {"coda:num_requests_running", "coda:num_requests_waiting", "coda:kv_cache_usage_perc",
                        "coda:scheduler_paused"})
    gauges_[g] = 0;
  for (const char* c : {"coda:prompt_tokens_total", "coda:generation_tokens_total", "coda:guard_repairs_total"})
    counters_[c][""] = 0;
  counter_label_key_["coda:request_success_total"] = "finished_reason";
  for (const char* r : {"stop", "length", "repetition", "degenerate", "abort", "error"})
    counters_["coda:request_success_total"][r] = 0;
  counter_label_key_["coda:guard_events_total"] = "type";
  counters_["coda:guard_events_total"];
  counter_label_key_["coda:request_rejected_total"] = "status";
  counters_["coda:request_rejected_total"];
}

void Metrics::set_gauge(const std::string& name, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  gauges_[name] = v;
}

void Metrics::add(const std::string& name, double v, const std::string& label_key, const std::string& label) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!label_key.empty()) counter_label_key_[name] = label_key;
  counters_[name][label] += v;
}

void Metrics::observe(const std::string& name, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = histograms_.find(name);
  if (it == histograms_.end()) return;
  Histogram& h = it->second;
  size_t b = 0;
  while (b < h.bounds.size() && value > h.bounds[b]) ++b;
  ++h.counts[b];
  h.sum += value;
  ++h.count;
}

double Metrics::value(const std::string& name, const std::string& label) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto g = gauges_.find(name); g != gauges_.end()) return g->second;
  if (auto c = counters_.find(name); c != counters_.end()) {
    auto l = c->second.find(label);
    return l == c->second.end() ? 0 : l->second;
  }
  if (auto h = histograms_.find(name); h != histograms_.end()) return static_cast<double>(h->second.count);
  return 0;
}

std::string Metrics::prometheus() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  auto head = [&](const std::string& name, const char* type) {
    auto h = help_.find(name);
    if (h != help_.end()) o << "# HELP " << name << ' ' << h->second << '\n';
    o << "# TYPE " << name << ' ' << type << '\n';
  };
  for (const auto& [name, v] : gauges_) {
    head(name, "gauge");
    o << name << ' ' << v << '\n';
  }
  for (const auto& [name, labels] : counters_) {
    head(name, "counter");
    auto key = counter_label_key_.find(name);
    for (const auto& [label, v] : labels) {
      if (key != counter_label_key_.end() && !label.empty()) {
        o << name << '{' << key->second << "=\"" << label << "\"} " << v << '\n';
      } else if (key == counter_label_key_.end()) {
        o << name << ' ' << v << '\n';
      }
    }
  }
  for (const auto& [name, h] : histograms_) {
    head(name, "histogram");
    uint64_t cum = 0;
    for (size_t b = 0; b < h.bounds.size(); ++b) {
      cum += h.counts[b];
      char le[32];
      std::snprintf(le, sizeof le, "%g", h.bounds[b]);
      o << name << "_bucket{le=\"" << le << "\"} " << cum << '\n';
    }
    o << name << "_bucket{le=\"+Inf\"} " << h.count << '\n';
    o << name << "_sum " << h.sum << '\n' << name << "_count " << h.count << '\n';
  }
  return o.str();
}

}  // namespace coda
