#include "lab/bench_report.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "lab/outputs.h"
#include "lab/svg.h"

namespace coda::lab {

namespace {

std::string pct(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f%%", v * 100);
  return b;
}

std::string num(const nlohmann::ordered_json& j) {
  if (!j.is_number()) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", j.get<double>());
  return b;
}

const char* reason_color(const std::string& r) {
  if (r == "stop") return "#2ca02c";
  if (r == "length") return "#d62728";
  if (r == "repetition") return "#ff7f0e";
  if (r == "degenerate") return "#9467bd";
  if (r == "abort") return "#7f7f7f";
  return "#8c564b";
}

}  // namespace

std::string bench_report_html(const nlohmann::ordered_json& s, const LoadRun& run, const LoadOptions& opts) {
  std::ostringstream o;
  const auto ci = s["failure_rate_ci95"];
  o << "<p>Target <code>" << svg::escape(s["target"].get<std::string>()) << "</code>: " << s["requests"].get<int64_t>()
    << " requests in " << opts.sets << " set(s), " << opts.rate_per_min << " per minute (burstiness " << opts.burstiness
    << "), max_tokens " << opts.max_tokens << ", " << num(s["duration_s"]) << " s.</p>";
  o << "<p><b>Failure rate " << pct(s["failure_rate"].get<double>()) << "</b> (" << s["failures"].get<int64_t>()
    << " of " << s["completed"].get<int64_t>()
    << " ran to max_tokens without ending, or never answered), 95% Wilson interval " << pct(ci[0].get<double>())
    << " to " << pct(ci[1].get<double>()) << ". Errors: " << s["errors"].get<int64_t>() << ".</p>";
  if (const int64_t n = s["failure_kinds"].value("no_answer", int64_t{0}); n > 0)
    o << "<p class=\"note\">Of the failures, " << n
      << " ended inside a reasoning model's thinking, with no answer (whatever their finish_reason).</p>";
  if (s["interrupted"].get<bool>()) o << "<p class=\"note\">Interrupted: these are partial results.</p>";
  if (const int64_t n = s.value("stop_at_limit", int64_t{0}); n > 0)
    o << "<p class=\"note\">" << n
      << " request(s) were answered <code>finish_reason: \"stop\"</code> at max_tokens, as "
      << "servers that call a cut at the limit \"stop\" answer (ik_llama.cpp before August 2026, llama.cpp before "
      << "May 2024); they were counted "
      << (opts.trust_finish_reason ? "as successes (--trust-finish-reason)." : "as failures, as \"length\".") << "</p>";

  o << "<h2>Per set</h2><table><tr><th>set</th><th>requests</th><th>failures</th><th>rate</th><th>95% "
       "interval</th></tr>";
  for (const auto& st : s["sets"])
    o << "<tr><td>" << st["set"].get<int>() << "</td><td>" << st["requests"].get<int64_t>() << "</td><td>"
      << st["failures"].get<int64_t>() << "</td><td>" << pct(st["failure_rate"].get<double>()) << "</td><td>"
      << pct(st["failure_rate_ci95"][0].get<double>()) << " - " << pct(st["failure_rate_ci95"][1].get<double>())
      << "</td></tr>";
  o << "</table>";

  o << "<h2>Latency (ms)</h2><table><tr><th>metric</th><th>p50</th><th>p90</th><th>p99</th><th>mean</th></tr>";
  for (const char* m : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
    o << "<tr><td>" << m << "</td><td>" << num(s[m]["p50"]) << "</td><td>" << num(s[m]["p90"]) << "</td><td>"
      << num(s[m]["p99"]) << "</td><td>" << num(s[m]["mean"]) << "</td></tr>";
  o << "</table><p>Output " << num(s["output_tokens_per_s"]) << " tokens/s; goodput " << s["goodput"].get<double>()
    << " requests/s.</p>";

  std::vector<double> ttft, e2e, lengths;
  std::vector<svg::Point> length_points;
  for (const auto& r : run.records) {
    if (!r.out.ok) continue;
    if (r.out.ttft_ms >= 0) ttft.push_back(r.out.ttft_ms);
    e2e.push_back(r.out.e2e_ms);
    if (r.out.completion_tokens >= 0) {
      lengths.push_back(static_cast<double>(r.out.completion_tokens));
      length_points.push_back({r.sent_at, static_cast<double>(r.out.completion_tokens),
                               reason_color(r.out.finish_reason),
                               "set " + std::to_string(r.set) + " #" + std::to_string(r.index) + ": " +
                                   std::to_string(r.out.completion_tokens) + " tokens, " + r.out.finish_reason});
    }
  }
  svg::Axes a;
  a.title = "Time to first token";
  a.x_label = "ms";
  a.y_label = "requests";
  o << svg::histogram(a, ttft, 30) << "<br>";
  a.title = "End-to-end latency";
  o << svg::histogram(a, e2e, 30) << "<br>";

  o << "<h2>Finish reasons per set</h2>";
  std::vector<std::string> cats;
  std::map<std::string, std::vector<double>> by_reason;
  for (int set = 0; set < opts.sets; ++set) cats.push_back("set " + std::to_string(set));
  for (const auto& r : run.records)
    if (r.out.ok) {
      auto& v = by_reason[r.out.finish_reason];
      v.resize(cats.size(), 0);
      v[static_cast<size_t>(r.set)] += 1;
    }
  std::vector<svg::Series> series;
  for (const auto& [reason, v] : by_reason) series.push_back({reason, reason_color(reason), v});
  a.title = "Finish reasons";
  a.x_label = "";
  a.y_label = "requests";
  o << svg::stacked_bars(a, cats, series);

  o << "<h2>Output length against max_tokens</h2><p class=\"note\">Each dot is a request (colour: finish reason; "
       "red = length, the failures). Dots on the dashed line ran until max_tokens.</p>";
  a.title = "Completion tokens by send time";
  a.x_label = "sent at (s)";
  a.y_label = "completion tokens";
  o << svg::scatter(a, length_points, {{static_cast<double>(opts.max_tokens), "max_tokens"}}) << "<br>";
  a.title = "Completion length distribution";
  a.x_label = "completion tokens";
  a.y_label = "requests";
  o << svg::histogram(a, lengths, 30, opts.max_tokens, "max_tokens");

  if (!s["guard_events"].empty()) {
    o << "<h2>Guard events reported by the target</h2><table><tr><th>type</th><th>count</th></tr>";
    for (const auto& [k, v] : s["guard_events"].items())
      o << "<tr><td>" << svg::escape(k) << "</td><td>" << v << "</td></tr>";
    o << "</table>";
  }
  return svg::page("coda bench", o.str());
}

Status write_bench_outputs(const std::string& dir, const nlohmann::ordered_json& summary, const LoadRun& run,
                           const LoadOptions& opts) {
  std::string lines;
  for (const auto& r : run.records)
    lines += record_json(r, opts).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return write_output_files(dir, {{"summary.json", summary.dump(2) + "\n"},
                                  {"requests.jsonl", lines},
                                  {"report.html", bench_report_html(summary, run, opts)}});
}

}  // namespace coda::lab
