#include "server/metrics.h"

#include <cstdio>
#include <sstream>
#include <string_view>

namespace coda {

Metrics::Metrics(bool server) {
  help_["coda:metrics_series_folded_total"] =
      "Label sets counted in a family's all-\"other\" series because the family had 1000 series already.";
  if (!server) return;
  const std::vector<double> latency = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  define_histogram("coda:time_to_first_token_seconds", latency, "Time to first token.");
  define_histogram("coda:inter_token_latency_seconds", latency, "Time per output token after the first.");
  define_histogram("coda:e2e_request_latency_seconds", latency, "End-to-end request latency.");
  define_histogram("coda:iteration_sequences", {1, 2, 4, 8, 16, 32, 64, 128, 256},
                   "Sequences in each batched forward pass (continuous batching at work).");
  define_reasoning_metrics(*this);
  help_.insert({{"coda:num_requests_running", "Requests being generated."},
                {"coda:num_requests_waiting", "Requests waiting in the queue."},
                {"coda:kv_cache_usage_perc", "KV cache in use, 0..1 of the budget."},
                {"coda:scheduler_paused", "1 while the scheduler is paused (POST /admin/pause), else 0."},
                {"coda:prompt_tokens_total", "Prompt tokens processed."},
                {"coda:generation_tokens_total", "Tokens generated."},
                {"coda:request_success_total", "Finished requests by finish_reason."},
                {"coda:request_rejected_total", "Requests refused before generation, by HTTP status."},
                {"coda:guard_events_total", "Degeneration guard events by type."},
                {"coda:guard_repairs_total", "Repairs made by the guard."}});
  for (const char* g :
       {"coda:num_requests_running", "coda:num_requests_waiting", "coda:kv_cache_usage_perc", "coda:scheduler_paused"})
    gauges_[g][""] = 0;
  for (const char* c : {"coda:prompt_tokens_total", "coda:generation_tokens_total", "coda:guard_repairs_total"})
    counters_[c][""] = 0;
  for (const char* r : {"stop", "length", "repetition", "degenerate", "abort", "error"})
    counters_["coda:request_success_total"][render({{"finished_reason", r}})] = 0;
  counters_["coda:guard_events_total"];
  counters_["coda:request_rejected_total"];
}

std::string Metrics::render(const MetricLabels& labels) {
  std::string out;
  for (const auto& [k, full] : labels) {
    if (!out.empty()) out += ',';
    out += k + "=\"";
    std::string_view v = full;
    if (v.size() > kMaxLabelValueBytes) {
      size_t cut = kMaxLabelValueBytes;
      while (cut > 0 && (static_cast<unsigned char>(v[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
      v = v.substr(0, cut);
    }
    for (char c : v) {  // the text format's escapes
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    out += '"';
  }
  return out;
}

template <class Family>
std::string Metrics::key_in(const Family& family, const MetricLabels& labels) {
  std::string key = render(labels);
  if (family.size() < kMaxSeriesPerFamily || family.count(key)) return key;
  MetricLabels other = labels;
  for (auto& kv : other) kv.second = "other";
  counters_["coda:metrics_series_folded_total"][""] += 1;
  return render(other);
}

void Metrics::set_help(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  help_[name] = help;
}

void Metrics::define_histogram(const std::string& name, std::vector<double> bounds, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  bounds_[name] = std::move(bounds);
  histograms_[name];
  help_[name] = help;
}

void Metrics::set_gauge(const std::string& name, double v, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& family = gauges_[name];
  family[key_in(family, labels)] = v;
}

void Metrics::add(const std::string& name, double v, const std::string& label_key, const std::string& label) {
  add(name, v, label_key.empty() ? MetricLabels{} : MetricLabels{{label_key, label}});
}

void Metrics::add(const std::string& name, double v, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& family = counters_[name];
  const std::string key = key_in(family, labels);
  family[key] += v;
}

void Metrics::observe(const std::string& name, double value, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto b = bounds_.find(name);
  if (b == bounds_.end()) return;
  auto& family = histograms_[name];
  Histogram& h = family[key_in(family, labels)];
  if (h.counts.empty()) h.counts.assign(b->second.size() + 1, 0);
  size_t i = 0;
  while (i < b->second.size() && value > b->second[i]) ++i;
  ++h.counts[i];
  h.sum += value;
  ++h.count;
}

double Metrics::value(const std::string& name, const std::string& label) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string needle = "=\"" + label + "\"";
  auto matches = [&](const std::string& rendered) {
    return label.empty() || rendered.find(needle) != std::string::npos;
  };
  double sum = 0;
  for (const auto* family : {&gauges_, &counters_})
    if (auto f = family->find(name); f != family->end()) {
      for (const auto& [rendered, v] : f->second)
        if (matches(rendered)) sum += v;
      return sum;
    }
  if (auto h = histograms_.find(name); h != histograms_.end())
    for (const auto& [rendered, hist] : h->second)
      if (matches(rendered)) sum += static_cast<double>(hist.count);
  return sum;
}

std::string Metrics::prometheus() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  auto head = [&](const std::string& name, const char* type) {
    auto h = help_.find(name);
    if (h != help_.end()) o << "# HELP " << name << ' ' << h->second << '\n';
    o << "# TYPE " << name << ' ' << type << '\n';
  };
  auto series = [&](const std::string& name, const std::string& labels, const std::string& extra = "") {
    std::string all = labels;
    if (!extra.empty()) all += (all.empty() ? "" : ",") + extra;
    o << name;
    if (!all.empty()) o << '{' << all << '}';
    o << ' ';
  };
  for (const auto& [name, values] : gauges_) {
    head(name, "gauge");
    for (const auto& [labels, v] : values) {
      series(name, labels);
      o << v << '\n';
    }
  }
  for (const auto& [name, values] : counters_) {
    head(name, "counter");
    for (const auto& [labels, v] : values) {
      series(name, labels);
      o << v << '\n';
    }
  }
  for (const auto& [name, per_labels] : histograms_) {
    head(name, "histogram");
    const std::vector<double>& bounds = bounds_.at(name);
    auto print = [&](const std::string& labels, const Histogram& h) {
      uint64_t cum = 0;
      for (size_t b = 0; b < bounds.size(); ++b) {
        cum += h.counts.empty() ? 0 : h.counts[b];
        char le[32];
        std::snprintf(le, sizeof le, "%g", bounds[b]);
        series(name + "_bucket", labels, std::string("le=\"") + le + "\"");
        o << cum << '\n';
      }
      series(name + "_bucket", labels, "le=\"+Inf\"");
      o << h.count << '\n';
      series(name + "_sum", labels);
      o << h.sum << '\n';
      series(name + "_count", labels);
      o << h.count << '\n';
    };
    if (per_labels.empty()) print("", Histogram{});  // declared, nothing observed yet
    for (const auto& [labels, h] : per_labels) print(labels, h);
  }
  return o.str();
}

}  // namespace coda

namespace coda {

void define_reasoning_metrics(Metrics& m) {
  m.define_histogram("coda:reasoning_tokens", {0, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768},
                     "Reasoning tokens per request that thought (inside its <think> block).");
  m.set_help("coda:reasoning_loops_answered_total",
             "Loops in a reasoning model's thinking that the guard dropped and closed, so that the model answered.");
  m.set_help("coda:reasoning_budgets_enforced_total", "Thinking blocks closed at their budget of reasoning tokens.");
  m.set_help("coda:answer_loops_total", "Loops the guard acted on in the answer after a reasoning model's thinking.");
  m.set_help("coda:reasoning_unfinished_total",
             "Requests that ended inside the thinking: no answer (by max_tokens, a stop, or the model's end).");
}

void record_reasoning(Metrics& m, const GuardReport& r, const MetricLabels& labels) {
  if (!r.thinking) return;
  m.observe("coda:reasoning_tokens", static_cast<double>(r.reasoning_tokens), labels);
  for (const GuardEvent& e : r.events) {
    if (e.action == "answer") m.add("coda:reasoning_loops_answered_total", 1, labels);
    if (!r.reasoning_end.empty() && (e.action == "stop" || e.action == "repair") && e.onset >= r.reasoning_tokens &&
        in_detector_family(e.type, "loop"))
      m.add("coda:answer_loops_total", 1, labels);
  }
  if (r.reasoning_end == "budget") m.add("coda:reasoning_budgets_enforced_total", 1, labels);
  if (r.reasoning_end.empty()) m.add("coda:reasoning_unfinished_total", 1, labels);
}

}  // namespace coda
