// Server metrics in the Prometheus text format, named like vLLM's where they overlap and prefixed
// `coda:`: both planes, the system (requests, queue, KV use, latencies) and the output quality
// (finish reasons including the guard's, guard events by type, repairs).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace coda {

class Metrics {
 public:
  Metrics();
  void set_gauge(const std::string& name, double v);
  void add(const std::string& name, double v = 1, const std::string& label_key = "", const std::string& label = "");
  void observe(const std::string& name, double value);  // seconds, or a count for coda:iteration_sequences
  std::string prometheus() const;
  double value(const std::string& name, const std::string& label = "") const;  // tests

 private:
  struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket, cumulative when printed
    double sum = 0;
    uint64_t count = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, double> gauges_;
  std::map<std::string, std::map<std::string, double>> counters_;  // name -> label -> value
  std::map<std::string, std::string> counter_label_key_;
  std::map<std::string, Histogram> histograms_;
  std::map<std::string, std::string> help_;
};

}  // namespace coda
