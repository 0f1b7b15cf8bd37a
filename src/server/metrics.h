// Metrics in the Prometheus text format, named like vLLM's where they overlap and prefixed
// `coda:`: both planes, the system (requests, queue, KV use, latencies) and the output quality
// (finish reasons including the guard's, guard events by type, repairs). `coda serve` and
// `coda proxy` share the names where they measure the same thing; the proxy labels its series
// with the upstream and the model.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "guard/guard.h"

namespace coda {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Bounds on what a label can hold, whatever calls add(): each series costs memory for as long as the
// process runs, and /metrics prints them all on every scrape. A longer value is cut (at a UTF-8
// character boundary); a family that already has kMaxSeriesPerFamily series takes a new label set
// as the series whose every value is "other" (counted in coda:metrics_series_folded_total).
// Callers still keep their label values to a known set (a client's model name is "other" unless
// served); these bounds hold if one forgets.
constexpr size_t kMaxLabelValueBytes = 128;
constexpr size_t kMaxSeriesPerFamily = 1000;

class Metrics {
 public:
  // `server`: the series `coda serve` exports (declared at zero so dashboards see them at once).
  explicit Metrics(bool server = true);
  void set_help(const std::string& name, const std::string& help);
  void define_histogram(const std::string& name, std::vector<double> bounds, const std::string& help);

  void set_gauge(const std::string& name, double v, const MetricLabels& labels = {});
  void add(const std::string& name, double v = 1, const std::string& label_key = "", const std::string& label = "");
  void add(const std::string& name, double v, const MetricLabels& labels);
  void observe(const std::string& name, double value, const MetricLabels& labels = {});  // unknown names: ignored
  std::string prometheus() const;
  // For tests: a gauge or counter summed over the series with `label` as one of its label values
  // (all series when empty); a histogram's count.
  double value(const std::string& name, const std::string& label = "") const;

 private:
  struct Histogram {
    std::vector<uint64_t> counts;  // per bucket, cumulative when printed
    double sum = 0;
    uint64_t count = 0;
  };
  static std::string render(const MetricLabels& labels);
  // The rendered key a label set takes in `family`: its own, or the all-"other" one once the family
  // is full (kMaxSeriesPerFamily). Called with mu_ held.
  template <class Family>
  std::string key_in(const Family& family, const MetricLabels& labels);
  mutable std::mutex mu_;
  // name -> rendered labels (`k="v",k2="v2"`, "" for none) -> value
  std::map<std::string, std::map<std::string, double>> gauges_, counters_;
  std::map<std::string, std::vector<double>> bounds_;
  std::map<std::string, std::map<std::string, Histogram>> histograms_;
  std::map<std::string, std::string> help_;
};

// A reasoning model's thinking, from one request's guard report: the reasoning tokens histogram,
// loops answered, budgets enforced, loops in the answer, requests that never answered (serve and
// proxy alike; the proxy labels them with its upstream and model).
void define_reasoning_metrics(Metrics& m);
void record_reasoning(Metrics& m, const GuardReport& r, const MetricLabels& labels = {});

}  // namespace coda
