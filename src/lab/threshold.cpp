#include "lab/threshold.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "guard/detector.h"
#include "lab/load_bench.h"
#include "lab/outputs.h"
#include "lab/stats.h"
#include "lab/svg.h"
#include "proxy/session.h"
#include "proxy/stream_guard.h"

namespace coda::lab {

// Coherence episodes: the guard registry's loop and degenerate families (length is not coherence).
const std::vector<std::string>& coherence_episode_types() {
  static const std::vector<std::string> t = [] {
    std::vector<std::string> out = detector_family("loop");
    for (auto& d : detector_family("degenerate")) out.push_back(std::move(d));
    return out;
  }();
  return t;
}

namespace {

bool is_coherence_episode(const std::string& type) {
  const auto& t = coherence_episode_types();
  return std::find(t.begin(), t.end(), type) != t.end();
}

// The EOS probability's mean over the first half of a run and over its last 16 steps before the
// end (the end's own step left out: a run ended by EOS has its highest value there).
void eos_trend(const std::vector<double>& eos, ThresholdRun& r) {
  if (eos.size() < 8) return;
  const size_t n = eos.size() - 1, half = n / 2;
  double a = 0, b = 0;
  for (size_t k = 0; k < half; ++k) a += eos[k];
  const size_t from = n > 16 ? n - 16 : half;
  for (size_t k = from; k < n; ++k) b += eos[k];
  r.eos_prob_first_half = half ? a / static_cast<double>(half) : -1;
  r.eos_prob_before_end = n > from ? b / static_cast<double>(n - from) : -1;
}

ThresholdRun run_one(Target& target, const BenchPrompt& p, const ThresholdOptions& o, uint64_t seed, bool engine,
                     const std::atomic<bool>* stop) {
  ThresholdRun r;
  r.group = p.group;
  LoadOptions lo;
  lo.max_tokens = o.max_tokens;
  lo.model = o.model;
  lo.sampling = o.sampling;
  lo.stream = true;
  nlohmann::ordered_json body = request_body(p, lo, seed);
  // The tokens themselves (0 alternatives) from coda's engine, whose report has the episodes;
  // the top-k for the guard here from any other server.
  const int top = engine ? 0 : o.top_logprobs;
  const bool asked = engine || top > 0;
  // coda's engine also sends its per-token trace: the EOS probability before the end (diagnose).
  if (engine) body["coda"] = {{"trace", true}};
  nlohmann::ordered_json with_lp = body;
  if (asked) client::ask_logprobs(with_lp, p.chat(), top);
  client::Completion c = target.send(with_lp, p.chat(), stop);
  if (!c.ok && asked && c.status == 400) c = target.send(body, p.chat(), stop);  // a server that refuses logprobs
  if (!c.ok) {
    r.error = c.error.empty() ? "request failed" : c.error;
    return r;
  }
  r.ok = true;
  r.ttft_ms = c.ttft_ms;
  r.e2e_ms = c.e2e_ms;
  r.text = c.text;
  r.finish_reason = c.finish_reason;
  for (const auto& t : c.logprobs) r.tokens.push_back(t.token);
  if (c.coda.is_object() && c.coda.contains("events") && c.coda["events"].is_array()) {
    r.guarded_on = "engine";
    for (const auto& e : c.coda["events"])
      if (e.is_object() && e.value("type", "") != "" && is_coherence_episode(e.value("type", "")))
        r.episodes.emplace_back(e.value("type", ""), e.value("onset", int64_t{0}));
    r.length = c.completion_tokens >= 0 ? c.completion_tokens : static_cast<int64_t>(c.logprobs.size());
    if (c.coda.contains("trace") && c.coda["trace"].is_array()) {
      std::vector<double> eos;
      for (const auto& t : c.coda["trace"])
        if (t.is_object() && t.contains("eos_prob") && t["eos_prob"].is_number())
          eos.push_back(t["eos_prob"].get<double>());
      eos_trend(eos, r);
    }
    if (c.coda.contains("reasoning") && c.coda["reasoning"].is_object())
      r.reasoning_length = c.coda["reasoning"].value("tokens", int64_t{-1});
    const auto& sig = c.coda.contains("signals") ? c.coda["signals"] : nlohmann::ordered_json();
    if (sig.is_object() && sig.contains("mean_entropy") && sig["mean_entropy"].is_number())
      r.mean_entropy = sig["mean_entropy"].get<double>();
  } else {
    GuardConfig gc;
    gc.policy = GuardPolicy::Observe;
    gc.trace = true;
    proxy::StreamGuard sg(gc, proxy::prompt_text_of(body, p.chat()));
    sg.feed(c.reasoning + c.text, c.logprobs);  // a reasoning model's thinking (vLLM's parsers) comes first
    sg.finish();
    // The thinking: the reasoning field (vLLM's parsers), or content that opens with <think> (a server
    // without a parser), up to its close.
    size_t thought = c.reasoning.size();
    const size_t lead = c.text.find_first_not_of(" \t\r\n");
    if (thought == 0 && lead != std::string::npos && c.text.compare(lead, 7, "<think>") == 0) {
      const size_t close = c.text.find("</think>");
      thought = close == std::string::npos ? c.text.size() : close;
    }
    if (thought > 0) {
      // Its share of the units: the upstream's count when it gave one, else the units whose text
      // lies inside it.
      int64_t inside = 0;
      while (inside < static_cast<int64_t>(sg.units()) && sg.text_end(static_cast<size_t>(inside) + 1) <= thought)
        ++inside;
      r.reasoning_length = c.reasoning_tokens >= 0 ? c.reasoning_tokens : inside;
    }
    for (const auto& e : sg.report().events)
      if (is_coherence_episode(e.type)) r.episodes.emplace_back(e.type, e.onset);
    r.length = static_cast<int64_t>(sg.units());
    r.guarded_on = sg.text_only() ? "text" : "tokens";
    if (!sg.text_only()) {
      // From the top-k: an end-of-generation token among the alternatives; none seen: unknown.
      std::vector<double> eos;
      bool seen = false;
      for (const auto& t : sg.trace())
        if (t.contains("eos_prob") && t["eos_prob"].is_number()) {
          eos.push_back(t["eos_prob"].get<double>());
          seen = seen || eos.back() > 0;
        }
      if (seen) eos_trend(eos, r);
    }
    const GuardReport rep = sg.report();
    if (rep.has_signals && rep.tokens > 0) r.mean_entropy = rep.mean_entropy;
  }
  std::stable_sort(r.episodes.begin(), r.episodes.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  if (!r.episodes.empty()) {
    r.degraded = true;
    r.onset = r.episodes.front().second;
    r.episode = r.episodes.front().first;
  }
  return r;
}

}  // namespace

std::vector<ThresholdRun> run_threshold(Target& target, const std::vector<BenchPrompt>& prompts,
                                        const ThresholdOptions& o,
                                        const std::function<void(const ThresholdProgress&)>& on_progress,
                                        std::atomic<bool>* stop) {
  // The jobs: each group in the order it first appears, `runs` runs over its prompts in turn.
  std::vector<std::string> groups;
  std::map<std::string, std::vector<const BenchPrompt*>> by_group;
  for (const auto& p : prompts) {
    if (!by_group.count(p.group)) groups.push_back(p.group);
    by_group[p.group].push_back(&p);
  }
  struct Job {
    const BenchPrompt* prompt;
    int index;
  };
  std::vector<Job> jobs;
  for (const auto& g : groups)
    for (int i = 0; i < o.runs; ++i) jobs.push_back({by_group[g][static_cast<size_t>(i) % by_group[g].size()], i});
  const bool engine = dynamic_cast<HttpTarget*>(&target) == nullptr;
  std::vector<ThresholdRun> out(jobs.size());
  std::vector<bool> sent(jobs.size(), false);
  std::mutex mu;
  std::atomic<size_t> next{0};
  ThresholdProgress prog;
  prog.total = static_cast<int64_t>(jobs.size());
  auto worker = [&] {
    for (;;) {
      const size_t k = next.fetch_add(1);
      if (k >= jobs.size() || (stop && stop->load())) return;
      ThresholdRun r = run_one(target, *jobs[k].prompt, o, o.seed + k, engine, stop);
      r.index = jobs[k].index;
      std::lock_guard<std::mutex> lock(mu);
      if (stop && stop->load() && !r.ok) return;  // cut short by Ctrl-C: not a run
      out[k] = std::move(r);
      sent[k] = true;
      ++prog.done;
      prog.degraded += out[k].degraded;
      prog.errors += !out[k].ok;
      if (on_progress) on_progress(prog);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < std::max(1, o.max_concurrency); ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  std::vector<ThresholdRun> done;
  for (size_t k = 0; k < out.size(); ++k)
    if (sent[k]) done.push_back(std::move(out[k]));
  return done;
}

nlohmann::ordered_json summarize_threshold(const std::vector<ThresholdRun>& runs, const ThresholdOptions& o,
                                           const std::string& target) {
  nlohmann::ordered_json s;
  s["target"] = target;
  s["max_tokens"] = o.max_tokens;
  s["quantile"] = o.quantile;
  s["margin"] = o.margin;
  s["sampling"] = o.sampling;
  s["episode_types"] = coherence_episode_types();
  auto& groups = s["groups"] = nlohmann::ordered_json::object();
  std::vector<std::string> order;
  for (const auto& r : runs)
    if (std::find(order.begin(), order.end(), r.group) == order.end()) order.push_back(r.group);
  for (const auto& g : order) {
    std::vector<SurvivalObservation> obs;
    int64_t n = 0, errors = 0, degraded = 0;
    std::map<std::string, std::vector<double>> first_onsets;  // type -> its first onset in each run
    // Coherent runs that reached the horizon (max_tokens), and those that ended before it by
    // themselves (EOS, a stop string): a run that ended early says nothing about the length it
    // never reached.
    int64_t reached = 0;
    std::vector<double> early_lengths;
    // A reasoning model's runs: the thinking and the answer measured apart, and the runs that never
    // answered.
    std::vector<double> reasoning_lengths, answer_lengths;
    int64_t no_answer = 0;
    nlohmann::ordered_json run_list = nlohmann::ordered_json::array();
    for (const auto& r : runs) {
      if (r.group != g) continue;
      ++n;
      nlohmann::ordered_json x = {{"index", r.index}};
      if (!r.ok) {
        ++errors;
        x["error"] = r.error;
        run_list.push_back(std::move(x));
        continue;
      }
      obs.push_back({static_cast<double>(r.degraded ? r.onset : r.length), r.degraded});
      degraded += r.degraded;
      if (r.degraded) {
        x["onset"] = r.onset;
        x["episode"] = r.episode;
      } else {
        x["censored_at"] = r.length;
        if (r.finish_reason == "length" || r.length >= o.max_tokens)
          ++reached;
        else
          early_lengths.push_back(static_cast<double>(r.length));
      }
      x["length"] = r.length;
      if (r.reasoning_length >= 0) {
        x["reasoning_length"] = r.reasoning_length;
        x["answer_length"] = std::max<int64_t>(0, r.length - r.reasoning_length);
        reasoning_lengths.push_back(static_cast<double>(r.reasoning_length));
        answer_lengths.push_back(static_cast<double>(std::max<int64_t>(0, r.length - r.reasoning_length)));
        if (r.length - r.reasoning_length <= 0) ++no_answer;
      }
      x["finish_reason"] = r.finish_reason;
      x["guarded_on"] = r.guarded_on;
      auto& eps = x["episodes"] = nlohmann::ordered_json::array();
      std::map<std::string, bool> seen;
      for (const auto& [type, onset] : r.episodes) {
        eps.push_back({{"type", type}, {"onset", onset}});
        if (!seen[type]) first_onsets[type].push_back(static_cast<double>(onset));
        seen[type] = true;
      }
      run_list.push_back(std::move(x));
    }
    const auto curve = kaplan_meier(obs);
    const double thr = survival_quantile(curve, o.quantile);
    const auto boots = bootstrap_survival_quantiles(obs, o.quantile, o.bootstrap, o.seed + 17);
    const auto ci = bootstrap_interval(boots);
    // Types in the order they appear: by the median of their first onsets over the runs.
    std::vector<std::pair<double, std::string>> types;
    for (const auto& [type, onsets] : first_onsets) types.emplace_back(percentile(onsets, 0.5), type);
    std::sort(types.begin(), types.end());
    nlohmann::ordered_json gj;
    gj["runs"] = n;
    gj["completed"] = n - errors;
    gj["errors"] = errors;
    gj["degraded"] = degraded;
    gj["threshold_tokens"] = finite_or_null<nlohmann::json>(thr);
    gj["threshold_ci95"] = {finite_or_null<nlohmann::json>(ci.first), finite_or_null<nlohmann::json>(ci.second)};
    // A recommendation never cuts an answer seen to end coherently by itself.
    const double longest_coherent =
        early_lengths.empty() ? 0.0 : *std::max_element(early_lengths.begin(), early_lengths.end());
    gj["recommended_max_tokens"] = std::isfinite(thr) ? nlohmann::ordered_json(static_cast<int64_t>(std::max(
                                                            std::floor(thr * (1.0 - o.margin)), longest_coherent)))
                                                      : nlohmann::ordered_json(nullptr);
    const int64_t completed = n - errors;
    const auto early = static_cast<int64_t>(early_lengths.size());
    if (!reasoning_lengths.empty())
      gj["reasoning"] = {
          {"runs", static_cast<int64_t>(reasoning_lengths.size())},
          {"median_reasoning_tokens", percentile(reasoning_lengths, 0.5)},
          {"median_answer_tokens", percentile(answer_lengths, 0.5)},
          {"max_reasoning_tokens", *std::max_element(reasoning_lengths.begin(), reasoning_lengths.end())},
          {"no_answer", no_answer}};
    gj["reached_max_tokens"] = reached;
    gj["ended_early"] = early;
    gj["ended_early_median_length"] = early ? nlohmann::ordered_json(percentile(early_lengths, 0.5)) : nullptr;
    const std::string pct_q = std::to_string(static_cast<int>(std::lround(100 * o.quantile))) + "%";
    if (std::isfinite(thr)) {
      gj["status"] = "threshold";
    } else if (completed > 0 && static_cast<double>(degraded + early) < o.quantile * static_cast<double>(completed)) {
      // Even if every run that ended early had been about to degrade, fewer than `quantile` of
      // the runs would have by max_tokens: the task fits this length.
      gj["status"] = "none_within";
      gj["note"] = std::to_string(reached) + " of " + std::to_string(completed) + " runs reached " +
                   std::to_string(o.max_tokens) + " tokens coherent: fewer than " + pct_q +
                   " degrade within this length; to find the threshold, raise --max-tokens";
    } else {
      gj["status"] = "ended_early";
      gj["note"] = "only " + std::to_string(reached) + " of " + std::to_string(completed) + " runs reached " +
                   std::to_string(o.max_tokens) + " tokens; " + std::to_string(early) +
                   " ended early by themselves (median length " +
                   (early ? std::to_string(static_cast<int64_t>(percentile(early_lengths, 0.5))) : std::string("-")) +
                   "), so no threshold can be measured at this length. Keep them going with min_tokens (or coda's "
                   "perpetual mode, --perpetual-min-tokens), give a task that asks for a longer text, or try "
                   "another prompt";
    }
    auto& et = gj["episode_types"] = nlohmann::ordered_json::array();
    for (const auto& [median, type] : types) et.push_back({{"type", type}, {"median_first_onset", median}});
    auto& sv = gj["survival"] = nlohmann::ordered_json::array();
    for (const auto& st : curve)
      sv.push_back({{"tokens", st.time}, {"survival", st.survival}, {"at_risk", st.at_risk}, {"degraded", st.events}});
    gj["runs_detail"] = std::move(run_list);
    groups[g] = std::move(gj);
  }
  return s;
}

svg::Curve survival_curve(const std::string& group, const nlohmann::ordered_json& gj, double max_tokens,
                          const std::string& color) {
  svg::Curve c{group, color, {{0, 1}}};
  for (const auto& st : gj["survival"]) c.points.emplace_back(st["tokens"].get<double>(), st["survival"].get<double>());
  c.points.emplace_back(max_tokens, c.points.back().second);
  return c;
}

std::string threshold_report_html(const nlohmann::ordered_json& s) {
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"};
  std::map<std::string, std::string> episode_color = {{"loop", "#d62728"},           {"near_loop", "#ff7f0e"},
                                                      {"flooding", "#9467bd"},       {"gibberish", "#8c564b"},
                                                      {"language_drift", "#1f77b4"}, {"entropy_collapse", "#2ca02c"},
                                                      {"phrase_loop", "#e377c2"}};
  std::ostringstream b;
  const int max_tokens = s.value("max_tokens", 0);
  b << "<p>Target: " << svg::escape(s.value("target", "")) << "; max_tokens " << max_tokens
    << "; threshold = the length by which " << std::lround(100 * s.value("quantile", 0.1))
    << "% of runs have degraded (Kaplan-Meier, runs that ended coherent censored at their length); recommended "
       "max_tokens = threshold less "
    << std::lround(100 * s.value("margin", 0.2)) << "%.</p>";
  std::vector<svg::Curve> curves;
  int k = 0;
  b << "<table><tr><th>group</th><th>runs</th><th>degraded</th><th>status</th><th>threshold (tokens)</th>"
       "<th>95% interval</th><th>recommended max_tokens</th><th>episodes, in order of appearance</th></tr>";
  auto num = [](const nlohmann::ordered_json& v) { return v.is_null() ? std::string("&mdash;") : v.dump(); };
  for (const auto& [g, gj] : s["groups"].items()) {
    curves.push_back(survival_curve(g, gj, max_tokens, kColors[k++ % 7]));
    std::string types;
    for (const auto& t : gj["episode_types"]) types += (types.empty() ? "" : " &rarr; ") + t["type"].get<std::string>();
    const auto& ci = gj["threshold_ci95"];
    b << "<tr><td>" << svg::escape(g) << "</td><td>" << gj["completed"] << "</td><td>" << gj["degraded"] << "</td><td>"
      << svg::escape(gj.value("status", "")) << "</td><td>" << num(gj["threshold_tokens"]) << "</td><td>[" << num(ci[0])
      << ", " << (ci[1].is_null() ? "beyond" : ci[1].dump()) << "]</td><td>" << num(gj["recommended_max_tokens"])
      << "</td><td>" << (types.empty() ? "none" : types) << "</td></tr>";
  }
  b << "</table>";
  for (const auto& [g, gj] : s["groups"].items())
    if (gj.value("status", "") != "threshold" && gj.contains("note"))
      b << "<p><b>" << svg::escape(g) << "</b>: " << svg::escape(gj["note"].get<std::string>()) << ".</p>";
  svg::Axes a;
  a.title = "Coherence against generated tokens (Kaplan-Meier)";
  a.x_label = "generated tokens";
  a.y_label = "share of runs still coherent";
  a.width = 760;
  b << svg::step_curves(a, curves);
  // A strip per run: its length in grey, each episode's onset as a coloured mark.
  b << "<h2>Runs</h2><p>";
  for (const auto& [type, color] : episode_color)
    b << "<span style=\"color:" << color << "\">&#9632;</span> " << type << " &nbsp; ";
  b << "</p>";
  for (const auto& [g, gj] : s["groups"].items()) {
    const auto& rl = gj["runs_detail"];
    const int w = 760, row = 12, left = 60;
    const int h = 24 + row * static_cast<int>(rl.size());
    const double scale = max_tokens > 0 ? static_cast<double>(w - left - 20) / max_tokens : 1;
    b << "<h3>" << svg::escape(g) << "</h3><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\""
      << h << "\" font-family=\"sans-serif\" font-size=\"10\">";
    int i = 0;
    for (const auto& r : rl) {
      const double y = 10 + row * i++;
      b << "<text x=\"" << left - 4 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">run " << r["index"] << "</text>";
      if (!r.contains("length")) {
        b << "<text x=\"" << left << "\" y=\"" << y + 4 << "\" fill=\"#d62728\">error</text>";
        continue;
      }
      b << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + scale * r["length"].get<double>()
        << "\" y2=\"" << y << "\" stroke=\"#bbb\" stroke-width=\"4\"/>";
      for (const auto& e : r["episodes"]) {
        const std::string type = e["type"];
        b << "<rect x=\"" << left + scale * e["onset"].get<double>() - 2 << "\" y=\"" << y - 5
          << "\" width=\"4\" height=\"10\" fill=\"" << (episode_color.count(type) ? episode_color[type] : "#000")
          << "\"><title>" << svg::escape(type) << " from token " << e["onset"] << "</title></rect>";
      }
    }
    b << "<text x=\"" << left << "\" y=\"" << h - 2 << "\">0</text><text x=\"" << w - 20 << "\" y=\"" << h - 2
      << "\" text-anchor=\"end\">" << max_tokens << " tokens</text></svg>";
  }
  return svg::page("coda threshold", b.str());
}

Status write_threshold_outputs(const std::string& dir, const nlohmann::ordered_json& summary,
                               const std::vector<ThresholdRun>& runs) {
  std::string lines;
  for (const auto& r : runs) {
    nlohmann::ordered_json j = {{"group", r.group}, {"index", r.index}, {"ok", r.ok}};
    if (!r.ok) j["error"] = r.error;
    j["length"] = r.length;
    if (r.reasoning_length >= 0) j["reasoning_length"] = r.reasoning_length;
    j["degraded"] = r.degraded;
    if (r.degraded) j["onset"] = r.onset, j["episode"] = r.episode;
    j["finish_reason"] = r.finish_reason;
    j["guarded_on"] = r.guarded_on;
    j["text"] = r.text;
    j["tokens"] = r.tokens;
    lines += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  return write_output_files(dir, {{"threshold.json", summary.dump(2) + "\n"},
                                  {"runs.jsonl", lines},
                                  {"report.html", threshold_report_html(summary)}});
}

}  // namespace coda::lab
