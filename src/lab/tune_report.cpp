// report.html of `coda tune`: a Pareto plot per phase (the front in red; the baseline boxed), the
// phase-1 trials, phase 2 beside phase 1, and the recommendation line.
#include <algorithm>
#include <cstdio>

#include "lab/svg.h"
#include "lab/tune.h"

namespace coda::lab {

namespace {

std::string f4(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string params_cell(const std::map<std::string, double>& p) {
  std::string s;
  for (const auto& [k, v] : p) s += (s.empty() ? "" : ", ") + k + "=" + f4(v);
  return svg::escape(s);
}

std::string value_cell(const TuneTrial& t, size_t k) {
  if (k >= t.eval.values.size()) return "-";
  std::string s = f4(t.eval.values[k]);
  if (k < t.eval.intervals.size() && t.eval.intervals[k].first != t.eval.intervals[k].second)
    s += " <span class=\"note\">[" + f4(t.eval.intervals[k].first) + ", " + f4(t.eval.intervals[k].second) + "]</span>";
  return s;
}

}  // namespace

std::string tune_report_html(const TuneResult& r, const TuneOptions& opts) {
  std::string body;
  body += "<p class=\"rec\"><b>" + svg::escape(r.recommendation_text) + "</b></p>";
  if (r.interrupted) body += "<p class=\"note\">Interrupted: the study resumes from its file.</p>";
  // The Pareto plot of each phase (first two objectives); phase 2's front is among its re-runs.
  auto plot = [&](int phase) {
    std::vector<svg::Point> pts;
    for (const auto& t : r.trials) {
      if (t.phase != phase || t.eval.values.empty()) continue;
      svg::Point p;
      p.x = t.eval.values[0];
      p.y = t.eval.values.size() > 1 ? t.eval.values[1] : 0;
      p.color = t.on_front ? "#d62728" : "#1f77b4";  // the study's colours: front red, others blue (drawn first)
      p.boxed = t.baseline;
      p.label = "trial " + std::to_string(t.number) + (t.baseline ? " (baseline)" : "") +
                (phase == 2 ? " re-running " + std::to_string(t.source) : "") + ": " + [&] {
                  std::string s;
                  for (const auto& [k, v] : t.params) s += k + "=" + f4(v) + " ";
                  return s;
                }();
      pts.push_back(p);
    }
    svg::Axes a;
    a.title = "Phase " + std::to_string(phase) + ": Pareto front (red), baseline boxed";
    a.x_label = opts.objectives[0];
    a.y_label = opts.objectives.size() > 1 ? opts.objectives[1] : "";
    return svg::scatter(a, pts);
  };
  body +=
      "<h2>Pareto plot</h2><p class=\"note\">Lower is better on both axes. A red point is on the front: no "
      "other trial is at least as good on every objective and better on one. The boxed point is the baseline "
      "(trial 0); the others are blue. Phase-1 values are noisy; phase 2 re-measures the best with more requests, and "
      "its own plot "
      "follows.</p>";
  body += plot(1);
  if (std::any_of(r.trials.begin(), r.trials.end(), [](const TuneTrial& t) { return t.phase == 2; }))
    body +=
        "<h2>Pareto plot, phase 2</h2><p class=\"note\">The baseline and the best of phase 1, re-run; the front "
        "among them in red.</p>" +
        plot(2);
  // Trials.
  auto table = [&](int phase) {
    std::string s = "<table><tr><th>trial</th>";
    if (phase == 2) s += "<th>re-runs</th>";
    s += "<th>params</th>";
    for (const auto& o : opts.objectives) s += "<th>" + svg::escape(o) + "</th>";
    if (phase == 2) s += "<th>phase 1 " + svg::escape(opts.objectives[0]) + "</th>";
    s += "</tr>";
    for (const auto& t : r.trials) {
      if (t.phase != phase) continue;
      s += std::string("<tr") + (t.on_front && phase == 1 ? " class=\"front\"" : "") + "><td>" +
           std::to_string(t.number) + (t.baseline ? " (baseline)" : "") + "</td>";
      if (phase == 2) s += "<td>" + std::to_string(t.source) + "</td>";
      s += "<td>" + params_cell(t.params) + "</td>";
      for (size_t k = 0; k < opts.objectives.size(); ++k) s += "<td>" + value_cell(t, k) + "</td>";
      if (phase == 2) {
        for (const auto& p1 : r.trials)
          if (p1.phase == 1 && p1.number == t.source) s += "<td>" + value_cell(p1, 0) + "</td>";
      }
      s += "</tr>";
    }
    return s + "</table>";
  };
  body += "<h2>Phase 1 trials</h2>" + table(1);
  if (std::any_of(r.trials.begin(), r.trials.end(), [](const TuneTrial& t) { return t.phase == 2; }))
    body += "<h2>Phase 2: the baseline and the best, re-run with " + std::to_string(opts.phase2_requests) +
            " requests</h2><p class=\"note\">Beside each, its phase-1 value: how much of the phase-1 difference "
            "survives a larger sample.</p>" +
            table(2);
  return svg::page("coda tune", body);
}

}  // namespace coda::lab
