#include "guard/guard.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "engine/generator.h"
#include "engine/prompt.h"

namespace coda {

namespace {

// The periodic loop family: one episode however many of its detectors see it. A phrase loop is an
// episode of its own, so that the periodic detectors still report (and are measured on) the loops
// it sees first; a stop for either says "repetition".
bool is_loop_type(const std::string& t) {
  return t == "loop" || t == "near_loop" || t == "flooding";
}

double mean_of(const std::vector<StepSignals>& s, size_t window, float StepSignals::*field) {
  const size_t n = std::min(window, s.size());
  if (n == 0) return 0;
  double sum = 0;
  for (size_t i = s.size() - n; i < s.size(); ++i) sum += s[i].*field;
  return sum / static_cast<double>(n);
}

// The last `n` bytes of `text`, starting at a UTF-8 character boundary.
std::string tail(const std::string& text, size_t n) {
  if (text.size() <= n) return text;
  size_t from = text.size() - n;
  while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  return text.substr(from);
}

}  // namespace

Expected<GuardPolicy> parse_guard_policy(const std::string& s) {
  if (s == "observe") return GuardPolicy::Observe;
  if (s == "stop") return GuardPolicy::Stop;
  if (s == "repair") return GuardPolicy::Repair;
  return Error("guard policy: '" + s + "' is not one of observe, stop, repair");
}

const char* guard_policy_name(GuardPolicy p) {
  switch (p) {
    case GuardPolicy::Observe:
      return "observe";
    case GuardPolicy::Stop:
      return "stop";
    case GuardPolicy::Repair:
      return "repair";
  }
  return "?";
}

const std::vector<std::string>& guard_event_types() {
  static const std::vector<std::string> types = {"flooding",         "loop",      "near_loop",      "phrase_loop",
                                                 "entropy_collapse", "gibberish", "language_drift", "runaway",
                                                 "eos_starvation"};
  return types;
}

Status set_guard_policy(const std::string& spec, GuardConfig& config) {
  const size_t colon = spec.find(':');
  auto policy = parse_guard_policy(spec.substr(0, colon));
  if (!policy) return policy.error();
  std::vector<std::string> act_on;
  if (colon != std::string::npos) {
    const std::string list = spec.substr(colon + 1);
    size_t from = 0;
    while (from <= list.size()) {
      const size_t comma = std::min(list.find(',', from), list.size());
      const std::string type = list.substr(from, comma - from);
      const auto& known = guard_event_types();
      if (std::find(known.begin(), known.end(), type) == known.end()) {
        std::string names;
        for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
        return Error("guard policy '" + spec + "': '" + type + "' is not a detector; detectors: " + names);
      }
      if (std::find(act_on.begin(), act_on.end(), type) == act_on.end()) act_on.push_back(type);
      from = comma + 1;
    }
  }
  config.policy = *policy;
  config.act_on = std::move(act_on);
  return Status();
}

std::string guard_policy_spec(const GuardConfig& config) {
  std::string s = guard_policy_name(config.policy);
  for (size_t i = 0; i < config.act_on.size(); ++i) s += (i ? "," : ":") + config.act_on[i];
  return s;
}

Guard::Guard(GuardConfig config, std::vector<int32_t> eos_ids)
    : cfg_(std::move(config)), eos_ids_(std::move(eos_ids)), periods_(std::max(1, cfg_.max_period)) {}

void Guard::on_start(const std::vector<int32_t>&, const std::string& prompt_text) {
  const LanguageProfile p = language_profile(prompt_text);
  prompt_language_ = p.language(4, 0.5);
  prompt_script_ = p.script_share() >= 0.7 && p.letters >= 20 ? p.script() : "";
}

// One event per episode: a new event of the same family (loops, floods and near loops are one
// family) is quiet while it starts before the last one of that family was detected, or while the
// last one's quiet period lasts.
bool Guard::cooling_down(const std::string& type, int64_t index) const {
  const bool loop_family = is_loop_type(type);
  for (const auto& [t, until] : fired_)
    if ((t == type || (loop_family && is_loop_type(t))) && index < until) return true;
  return false;
}

bool Guard::same_episode(const std::string& type, int64_t onset) const {
  const bool loop_family = is_loop_type(type);
  for (auto it = events_.rbegin(); it != events_.rend(); ++it)
    if (it->type == type || (loop_family && is_loop_type(it->type))) return onset < it->detected_at;
  return false;
}

std::string_view Guard::tail_text(const std::string& text, int64_t tokens) const {
  const size_t n = text_ends_.size();
  if (tokens <= 0 || static_cast<size_t>(tokens) > n) return {};
  const size_t from = static_cast<size_t>(tokens) == n ? 0 : text_ends_[n - 1 - static_cast<size_t>(tokens)];
  return std::string_view(text).substr(std::min(from, text.size()));
}

bool Guard::structural_tail(const std::string& text, int64_t tokens, double max_share) const {
  const std::string_view t = tail_text(text, tokens);
  // Letters and digits: ASCII ones, and any non-ASCII byte (letters of other scripts).
  size_t alnum = 0, visible = 0;
  for (char ch : t) {
    const auto c = static_cast<unsigned char>(ch);
    alnum += c >= 0x80 || std::isalnum(c);
    visible += !std::isspace(c);
  }
  if (t.empty()) return false;
  return max_share > 0 ? static_cast<double>(alnum) <= max_share * static_cast<double>(visible) : alnum == 0;
}

bool Guard::line_tail(const std::string& text, int64_t tokens) const {
  return tail_text(text, tokens).find('\n') != std::string_view::npos;
}

std::optional<GuardEvent> Guard::detect(int32_t token, const std::string& text) {
  const int64_t n = static_cast<int64_t>(periods_.tokens().size());
  const int64_t i = n - 1;
  auto event = [&](const char* type, int64_t onset, double confidence, nlohmann::ordered_json evidence,
                   int64_t quiet_for) -> std::optional<GuardEvent> {
    fired_.emplace_back(type, i + quiet_for);
    if (same_episode(type, std::max<int64_t>(0, onset))) return std::nullopt;  // already reported
    GuardEvent e;
    e.type = type;
    e.onset = std::max<int64_t>(0, onset);
    e.detected_at = i;
    e.confidence = std::clamp(confidence, 0.0, 1.0);
    e.evidence = std::move(evidence);
    return e;
  };

  // Flooding: one token over and over.
  const int64_t flood = periods_.run(1) + 1;
  if (flood >= cfg_.flood_min_run && (flood >= cfg_.structural_min_span || !structural_tail(text, 1)) &&
      !cooling_down("flooding", i))
    return event("flooding", n - flood, static_cast<double>(flood) / (2.0 * cfg_.flood_min_run),
                 {{"token", token}, {"run", flood}}, flood);
  // Exact loops of period >= 2 (a flood also repeats at every period; it is reported above).
  Loop loop =
      periods_.exact(cfg_.loop_min_repeats, cfg_.loop_min_span, 2, cfg_.loop_long_period, cfg_.loop_long_min_repeats);
  const bool typography = loop.period > 0 && loop.span < cfg_.structural_min_span && structural_tail(text, loop.period);
  if (typography) loop = Loop{};
  if (loop.period > 0 && flood < loop.span && !cooling_down("loop", i))
    return event("loop", loop.onset, loop.repeats / (cfg_.loop_min_repeats + 2),
                 {{"period", loop.period}, {"repeats", loop.repeats}, {"span", loop.span}}, loop.span);
  // Approximate loops and phrase loops, checked every few tokens while no loop-family episode is
  // quiet (cooling_down of one loop type covers the family).
  const bool approximate_step =
      cfg_.near_every > 0 && n % cfg_.near_every == 0 && loop.period == 0 && !typography && !cooling_down("loop", i);
  if (approximate_step) {
    Loop near = near_loop(periods_.tokens(), 2, cfg_.max_period, cfg_.near_min_match, cfg_.near_min_repeats,
                          cfg_.near_min_span);
    if (near.period > 0 && line_tail(text, near.span))  // structured text: the stricter test
      near = near_loop(periods_.tokens(), 2, cfg_.max_period, std::max(cfg_.near_min_match, cfg_.near_line_min_match),
                       std::max(cfg_.near_min_repeats, cfg_.near_line_min_repeats), cfg_.near_min_span);
    // An exact repetition still growing (exact but for its first period) is the exact detector's,
    // with its rule for long periods; the near detector is for loops that change as they go.
    const bool exact_so_far = near.period > 0 && periods_.run(near.period) + 2 * near.period >= near.span;
    // A near loop over typography (a banner of asterisks broken by a title, a ruled table) is
    // judged by the whole span: the few letters where the pattern breaks do not make it prose.
    if (near.period > 0 && !exact_so_far &&
        !(near.span < cfg_.structural_min_span && structural_tail(text, near.span, cfg_.structural_max_share)))
      return event("near_loop", near.onset, near.match * std::min(1.0, near.repeats / (cfg_.near_min_repeats + 2)),
                   {{"period", near.period}, {"repeats", near.repeats}, {"span", near.span}, {"match", near.match}},
                   near.span);
  }
  // Phrase loops: recombined phrases with no period, few distinct 3-grams (typography aside, as for
  // near loops).
  const int64_t w = cfg_.phrase_window;
  if (approximate_step && cfg_.phrase_max_distinct > 0 && w > 0 && n >= w && !cooling_down("phrase_loop", i)) {
    const double d3 = distinct_ngrams(periods_.tokens(), 3, static_cast<size_t>(w));
    if (d3 < cfg_.phrase_max_distinct && !structural_tail(text, w, cfg_.structural_max_share))
      return event("phrase_loop", n - w, 1.0 - 0.5 * d3 / cfg_.phrase_max_distinct, {{"distinct3", d3}, {"window", w}},
                   w);
  }
  // Entropy collapse: near-certain steps over a repetitive window.
  if (signals_known_ && cfg_.collapse_window > 0 && n >= cfg_.collapse_window && !cooling_down("entropy_collapse", i)) {
    const double h = mean_of(signals_, static_cast<size_t>(cfg_.collapse_window), &StepSignals::entropy);
    if (h < cfg_.collapse_entropy) {
      const double d3 = distinct_ngrams(periods_.tokens(), 3, static_cast<size_t>(cfg_.collapse_window));
      if (d3 < cfg_.collapse_distinct)
        return event("entropy_collapse", n - cfg_.collapse_window, 1.0 - h / cfg_.collapse_entropy,
                     {{"mean_entropy", h}, {"distinct3", d3}, {"window", cfg_.collapse_window}}, cfg_.collapse_window);
    }
  }
  // Gibberish: the model keeps picking tokens it finds unlikely from flat distributions.
  if (signals_known_ && cfg_.gibberish_window > 0 && n >= cfg_.gibberish_window && !cooling_down("gibberish", i)) {
    const size_t w = static_cast<size_t>(cfg_.gibberish_window);
    const double s = mean_of(signals_, w, &StepSignals::surprisal);
    const double h = mean_of(signals_, w, &StepSignals::entropy);
    if (s > cfg_.gibberish_surprisal && h > cfg_.gibberish_entropy)
      return event("gibberish", n - cfg_.gibberish_window, s / (2 * cfg_.gibberish_surprisal),
                   {{"mean_surprisal", s}, {"mean_entropy", h}, {"window", cfg_.gibberish_window}},
                   cfg_.gibberish_window);
  }
  // Language or script drift against the prompt, every 16 tokens.
  if (cfg_.drift_window_chars > 0 && n % 16 == 0 && !cooling_down("language_drift", i) &&
      (!prompt_language_.empty() || !prompt_script_.empty())) {
    const LanguageProfile recent = language_profile(tail(text, cfg_.drift_window_chars));
    const std::string lang = recent.language(cfg_.drift_min_words, 0.6);
    const std::string script = recent.letters >= 40 && recent.script_share() >= 0.7 ? recent.script() : "";
    const bool lang_drift = !prompt_language_.empty() && !lang.empty() && lang != prompt_language_;
    const bool script_drift = !prompt_script_.empty() && !script.empty() && script != prompt_script_;
    if (lang_drift || script_drift) {
      const int64_t words = recent.en_words + recent.it_words;
      return event("language_drift", n - 64,
                   lang_drift
                       ? static_cast<double>(std::max(recent.en_words, recent.it_words)) / std::max<int64_t>(1, words)
                       : recent.script_share(),
                   {{"prompt_language", prompt_language_},
                    {"language", lang},
                    {"prompt_script", prompt_script_},
                    {"script", script},
                    {"en_words", recent.en_words},
                    {"it_words", recent.it_words}},
                   128);
    }
  }
  if (cfg_.runaway_tokens > 0 && n >= cfg_.runaway_tokens && !cooling_down("runaway", i))
    return event("runaway", cfg_.runaway_tokens - 1, 1.0, {{"tokens", n}, {"limit", cfg_.runaway_tokens}},
                 INT64_MAX / 2);
  if (signals_known_ && cfg_.eos_starvation_after > 0 && n >= cfg_.eos_starvation_after &&
      !cooling_down("eos_starvation", i)) {
    const size_t w = static_cast<size_t>(std::min<int64_t>(cfg_.eos_starvation_window, n));
    float max_p = 0;
    for (size_t k = signals_.size() - w; k < signals_.size(); ++k) max_p = std::max(max_p, signals_[k].eos_prob);
    if (max_p < cfg_.eos_starvation_prob)
      return event("eos_starvation", n - static_cast<int64_t>(w), 1.0 - max_p / cfg_.eos_starvation_prob,
                   {{"max_eos_prob", max_p}, {"window", w}}, INT64_MAX / 2);
  }
  return std::nullopt;
}

StepVerdict Guard::on_step(const StepView& v) {
  const StepSignals sig = step_signals(v.logits, v.n_vocab, v.token, eos_ids_);
  return observe(v.token, &sig, v.text);
}

StepVerdict Guard::observe(int32_t token, const StepSignals* given, const std::string& text) {
  if (!given) signals_known_ = false;
  const StepSignals sig = given ? *given : StepSignals{};
  signals_.push_back(sig);
  periods_.push(token);
  text_ends_.push_back(text.size());
  const int64_t i = static_cast<int64_t>(periods_.tokens().size()) - 1;
  if (cfg_.trace)
    trace_.push_back({{"i", i},
                      {"token", token},
                      {"entropy", sig.entropy},
                      {"varentropy", sig.varentropy},
                      {"surprisal", sig.surprisal},
                      {"eos_prob", sig.eos_prob},
                      {"eos_rank", sig.eos_rank},
                      {"top1_prob", sig.top1_prob},
                      {"top1_margin", sig.top1_margin}});
  StepVerdict verdict;
  const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  if (is_eos && i < cfg_.perpetual_min_tokens && static_cast<int>(repairs_.size()) < cfg_.max_repairs) {
    RepairAction r = cfg_.repair;
    r.keep = std::max<int64_t>(0, i - cfg_.eos_backstep);
    repairs_.push_back({i, r.keep, "early_eos"});
    verdict.repair = r;
    return verdict;
  }
  if (cfg_.rd_max_pattern > 0 && cfg_.rd_min_count >= 2) {
    const int hi = std::min(cfg_.rd_max_pattern, cfg_.max_period);
    for (int p = std::max(1, cfg_.rd_min_pattern); p <= hi; ++p) {
      const int64_t need = static_cast<int64_t>(cfg_.rd_min_count - 1) * p;  // matches at period p
      if (periods_.run(p) < need) continue;
      GuardEvent e;
      e.type = "loop";
      e.onset = i + 1 - need - p;
      e.detected_at = i;
      e.confidence = 1.0;
      e.evidence = {{"rule", "repetition_detection"}, {"period", p}, {"repeats", cfg_.rd_min_count}};
      e.action = "stop";
      events_.push_back(std::move(e));
      verdict.stop = true;
      verdict.finish_reason = "repetition";
      return verdict;
    }
  }
  std::optional<GuardEvent> e = detect(token, text);
  if (!e) return verdict;
  const bool loop_type = is_loop_type(e->type) || e->type == "phrase_loop";
  const char* stop_reason = loop_type ? "repetition" : "degenerate";
  const bool repairable = e->type != "runaway" && e->type != "eos_starvation";
  const bool in_scope =
      cfg_.act_on.empty() || std::find(cfg_.act_on.begin(), cfg_.act_on.end(), e->type) != cfg_.act_on.end();
  switch (in_scope ? cfg_.policy : GuardPolicy::Observe) {
    case GuardPolicy::Observe:
      e->action = "observe";
      break;
    case GuardPolicy::Stop:
      e->action = "stop";
      verdict.stop = true;
      verdict.finish_reason = stop_reason;
      break;
    case GuardPolicy::Repair:
      if (repairable && static_cast<int>(repairs_.size()) < cfg_.max_repairs) {
        RepairAction r = cfg_.repair;
        const int64_t period = e->evidence.contains("period") ? e->evidence["period"].get<int64_t>() : 0;
        r.keep = loop_type ? e->onset + std::max<int64_t>(period, 1) : e->onset;  // keep the first copy
        e->action = "repair";
        repairs_.push_back({i, r.keep, e->type});
        verdict.repair = r;
      } else {
        e->action = "stop";
        verdict.stop = true;
        verdict.finish_reason = stop_reason;
      }
      break;
  }
  if (cfg_.trace) trace_.back()["event"] = e->type;
  events_.push_back(std::move(*e));
  return verdict;
}

void Guard::on_rollback(int64_t keep) {
  periods_.truncate(static_cast<size_t>(keep));
  if (signals_.size() > static_cast<size_t>(keep)) signals_.resize(static_cast<size_t>(keep));
  if (text_ends_.size() > static_cast<size_t>(keep)) text_ends_.resize(static_cast<size_t>(keep));
  fired_.clear();
  if (cfg_.trace) trace_.push_back({{"rollback_to", keep}});
}

GuardReport Guard::report() const {
  GuardReport r;
  r.policy = guard_policy_spec(cfg_);
  r.events = events_;
  r.repairs = repairs_;
  r.tokens = static_cast<int64_t>(signals_.size());
  r.has_signals = signals_known_;
  for (const auto& s : signals_) {
    r.mean_entropy += s.entropy;
    r.mean_varentropy += s.varentropy;
    r.mean_surprisal += s.surprisal;
    r.mean_eos_prob += s.eos_prob;
    r.max_eos_prob = std::max(r.max_eos_prob, static_cast<double>(s.eos_prob));
  }
  if (r.tokens > 0) {
    const double n = static_cast<double>(r.tokens);
    r.mean_entropy /= n;
    r.mean_varentropy /= n;
    r.mean_surprisal /= n;
    r.mean_eos_prob /= n;
  }
  r.distinct2 = distinct_ngrams(periods_.tokens(), 2, periods_.tokens().size());
  return r;
}

nlohmann::ordered_json GuardReport::to_json() const {
  nlohmann::ordered_json j;
  j["policy"] = policy;
  auto& ev = j["events"] = nlohmann::ordered_json::array();
  for (const auto& e : events)
    ev.push_back({{"type", e.type},
                  {"onset", e.onset},
                  {"detected_at", e.detected_at},
                  {"delay", e.detected_at - e.onset},
                  {"confidence", e.confidence},
                  {"action", e.action},
                  {"evidence", e.evidence}});
  auto& rp = j["repairs"] = nlohmann::ordered_json::array();
  for (const auto& r : repairs) rp.push_back({{"at", r.at}, {"keep", r.keep}, {"reason", r.reason}});
  if (has_signals)
    j["signals"] = {{"tokens", tokens},
                    {"mean_entropy", mean_entropy},
                    {"mean_varentropy", mean_varentropy},
                    {"mean_surprisal", mean_surprisal},
                    {"mean_eos_prob", mean_eos_prob},
                    {"max_eos_prob", max_eos_prob},
                    {"distinct2", distinct2}};
  else
    j["signals"] = {{"tokens", tokens}, {"distinct2", distinct2}};
  return j;
}

std::unique_ptr<Guard> make_guard(const Generator& gen, GenerationRequest& request, const GuardConfig& config) {
  const Vocab& vocab = gen.vocab();
  std::vector<int32_t> eos;
  for (int32_t id : {vocab.eos(), vocab.eot()})
    if (id >= 0) eos.push_back(id);
  if (request.messages)
    for (int32_t id : end_of_turn_ids(vocab))
      if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  if (config.policy == GuardPolicy::Repair)
    request.stream_delay_tokens = std::max(request.stream_delay_tokens, config.stream_delay_tokens);
  return std::make_unique<Guard>(config, std::move(eos));
}

Expected<GuardedResult> generate_guarded(Generator& gen, GenerationRequest request, const GuardConfig& config,
                                         const StreamCallback& on_chunk) {
  auto guard = make_guard(gen, request, config);
  auto res = gen.generate(request, on_chunk, guard.get());
  if (!res) return res.error();
  GuardedResult out{std::move(*res), guard->report(), guard->trace()};
  return out;
}

}  // namespace coda
