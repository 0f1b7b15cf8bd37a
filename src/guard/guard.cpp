#include "guard/guard.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "engine/generator.h"
#include "engine/prompt.h"

namespace coda {

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
  static const std::vector<std::string> types = [] {
    std::vector<std::string> t;
    for (const auto& d : detector_infos()) t.emplace_back(d.name);
    return t;
  }();
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
    : cfg_(std::move(config)),
      eos_ids_(std::move(eos_ids)),
      periods_(std::max(1, cfg_.max_period)),
      detectors_(make_detectors(cfg_)),
      thinking_(cfg_.thinking) {}

void Guard::on_start(const std::vector<int32_t>&, const std::string& prompt_text) {
  const LanguageProfile p = language_profile(prompt_text);
  language_ = cfg_.language;
  language_from_ = language_.empty() ? "" : "config";
  if (language_.empty()) {
    language_ = p.language(6, 0.7);
    if (!language_.empty()) language_from_ = "prompt";
  }
  prompt_script_ = p.script_share() >= 0.7 && p.letters >= 20 ? p.script() : "";
  for (int k = 0; k < kScripts; ++k)
    if (p.script_letters[static_cast<size_t>(k)] > 0) scripts_ |= 1u << k;
}

// The reference from the output itself, for what the prompt did not decide: the scripts of its first
// mix_reference_letters letters, and its language once its first 1,500 bytes hold 15 known words
// of running prose.
void Guard::follow_reference(const std::string& text) {
  if (output_letters_ < cfg_.mix_reference_letters && script_scan_ < text.size()) {
    size_t k = script_scan_;
    while (k < text.size() && output_letters_ < cfg_.mix_reference_letters) {
      const int script = script_of(utf8_next(text, k));
      if (script < 0) continue;
      scripts_ |= 1u << script;
      ++output_letters_;
    }
    script_scan_ = k;
  }
  if (language_.empty() && language_from_.empty() && text.size() >= 300) {
    // Running prose in Latin letters: a table, a log or code decides no language, nor do the
    // commands quoted in Chinese or Japanese documentation.
    const LanguageProfile p = language_profile(std::string_view(text).substr(0, 1500));
    if (p.known_words >= 15 && p.prose_share() >= 0.25 && p.script() == "latin" && p.script_share() >= 0.7)
      language_ = p.language(15, 1.0);
    if (!language_.empty() || text.size() >= 1500) language_from_ = "output";
  }
}

// One event per episode: a new event of the same episode group (loops, floods and near loops are
// one) is quiet while it starts before the last one of that group was detected, or while the last
// one's quiet period lasts (GuardState::cooling_down).
bool Guard::same_episode(const std::string& type, int64_t onset) const {
  const DetectorInfo* d = find_detector(type);
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (it->action == "answer") continue;  // its text was dropped when the thinking was closed
    const DetectorInfo* e = find_detector(it->type);
    if (it->type == type || (d && e && std::string_view(d->episode) == e->episode)) return onset < it->detected_at;
  }
  return false;
}

std::optional<GuardEvent> Guard::detect(GuardState& state) {
  for (auto& detector : detectors_) {
    const DetectorInfo& info = detector->info();
    if (state.cooling_down(info.name)) continue;
    std::optional<Finding> f = detector->check(state);
    if (!f) continue;
    fired_.emplace_back(info.name, state.i + f->quiet_for);
    if (std::string_view(info.family) == "degenerate") last_degenerate_ = state.i;
    const int64_t onset = std::max<int64_t>(0, f->onset);
    if (same_episode(info.name, onset)) return std::nullopt;  // already reported
    GuardEvent e;
    e.type = info.name;
    e.onset = onset;
    e.detected_at = state.i;
    e.confidence = std::clamp(f->confidence, 0.0, 1.0);
    e.evidence = std::move(f->evidence);
    return e;
  }
  return std::nullopt;
}

int64_t Guard::length_tokens() const {
  return length_override_;
}

// Where an ending in words begins, when the text has just completed one: a line that is only "The
// End" / "Fine" / "THE END." and the like (ended by a line break, or by its closing punctuation), or
// a line or sentence that opens with a closing formula ("In conclusion,", "In conclusione,",
// "Sincerely,"). -1 when the text does not end in one.
int64_t Guard::ending_in_words(const std::string& text) {
  static const char* const kWholeLine[] = {"the end", "fine",    "the end of the story", "end of story",
                                           "finis",   "la fine", "thanks for reading",   "grazie per aver letto"};
  static const char* const kOpening[] = {"in conclusion,",  "to conclude,",     "in summary,",
                                         "in conclusione,", "per concludere,",  "sincerely,",
                                         "best regards,",   "cordiali saluti,", "distinti saluti,"};
  if (text.size() <= ending_checked_) return -1;  // nothing new since the last look
  ending_checked_ = text.size();
  const bool line_done = text.back() == '\n';
  size_t end = line_done ? text.size() - 1 : text.size();
  size_t start = end == 0 ? std::string::npos : text.find_last_of('\n', end - 1);
  start = start == std::string::npos ? 0 : start + 1;
  if (!line_done)  // a closing formula may open a sentence, not only a line
    for (size_t k = end; k > start + 1; --k)
      if ((text[k - 2] == '.' || text[k - 2] == '!' || text[k - 2] == '?') && text[k - 1] == ' ') {
        start = k;
        break;
      }
  std::string body;
  for (size_t k = start; k < end; ++k) body += static_cast<char>(std::tolower(static_cast<unsigned char>(text[k])));
  const size_t lead = body.find_first_not_of(" \t*#_\"");
  if (lead == std::string::npos) return -1;
  body.erase(0, lead);
  const auto begin = static_cast<int64_t>(start + lead);
  if (!line_done)
    for (const char* o : kOpening)
      if (body == o) return begin;
  std::string stripped = body;
  while (!stripped.empty() && std::string_view(" \t\r.!*_\"").find(stripped.back()) != std::string_view::npos)
    stripped.pop_back();
  // Mid-line, only a phrase already closed by its punctuation ("The End.") counts.
  if (!line_done && (stripped.size() == body.size() || body.back() == ' ')) return -1;
  for (const char* w : kWholeLine)
    if (stripped == w) return begin;
  return -1;
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
  follow_reference(text);
  GuardState state(cfg_, periods_, text_ends_, signals_, signals_known_, text, token, language_, prompt_script_,
                   scripts_, fired_, length_tokens(), last_degenerate_);
  for (auto& detector : detectors_) detector->see(state);
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
    RepairAction r = cfg_.perpetual;
    r.keep = std::max<int64_t>(0, i - cfg_.eos_backstep);
    repairs_.push_back({i, r.keep, "early_eos"});
    verdict.repair = r;
    return verdict;
  }
  // With the end of generation stepped back from, a model ends in words instead ("The End", "In
  // conclusion,", a sign-off) and writes on after them (the perpetual-text blog's next failure):
  // before the minimum, such an ending is stepped back from as an EOS is, to where it began.
  if (!is_eos && i < cfg_.perpetual_min_tokens && static_cast<int>(repairs_.size()) < cfg_.max_repairs) {
    if (const int64_t at = ending_in_words(text); at >= 0) {
      RepairAction r = cfg_.perpetual;
      r.keep = std::clamp<int64_t>(
          static_cast<int64_t>(std::upper_bound(text_ends_.begin(), text_ends_.end(), static_cast<size_t>(at)) -
                               text_ends_.begin()),
          0, i);
      repairs_.push_back({i, r.keep, "ending_in_words"});
      verdict.repair = r;
      return verdict;
    }
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
  thinking_.see(i, text, text_ends_);
  const bool forcing = i < forcing_until_;  // the close is being written: nothing to close
  std::optional<GuardEvent> e = detect(state);
  const ThinkingConfig& tc = cfg_.thinking;
  if (!e) {
    // A budget of reasoning tokens: closed at the first sentence end within the grace, else at
    // its end (a token that ends the generation is the model's own end, and stands).
    if (thinking_.inside() && !forcing && tc.budget >= 0 && !is_eos && can_close()) {
      const int64_t used = thinking_.reasoning_tokens(i + 1);
      const std::string_view t(text);
      const size_t end = t.find_last_not_of(" \t");
      const bool sentence_end =
          end != std::string_view::npos && std::string_view(".!?\n").find(t[end]) != std::string_view::npos;
      if (used >= tc.budget && (sentence_end || used >= tc.budget + tc.grace))
        return close_thinking(i + 1, i, text, "budget");
    }
    return verdict;
  }
  const DetectorInfo& info = *find_detector(e->type);
  const bool loop_type = std::string_view(info.family) == "loop";
  const char* stop_reason = info.finish_reason;
  const bool repairable = info.repairable;
  // A policy without a scope acts on the detectors the registry marks `unscoped`: loops and the
  // degeneration measured below 1% false positives. Length is not degeneration: a long legitimate
  // answer (1,500 words of C is 4,000 tokens) passes runaway's 2,048 (docs/guard-eval/realtext.md);
  // language drift and invented words flag partly translated manual pages and identifiers
  // (docs/guard-eval/multilingual.md). Those act only when a scope names them.
  const bool in_scope = cfg_.act_on.empty()
                            ? info.unscoped
                            : std::find(cfg_.act_on.begin(), cfg_.act_on.end(), e->type) != cfg_.act_on.end();
  // Inside the thinking, under a policy that acts, any loop (and whatever the scope acts on) closes
  // the block at the loop's onset, and the model answers: that costs far less than stopping, so it
  // is done even for the detectors that only observe in the answer.
  if (thinking_.inside() && !forcing && tc.answer_on_loop && cfg_.policy != GuardPolicy::Observe &&
      (loop_type || in_scope) && can_close()) {
    e->action = "answer";
    if (cfg_.trace) trace_.back()["event"] = e->type;
    const int64_t onset = e->onset;
    events_.push_back(std::move(*e));
    return close_thinking(onset, i, text, "loop");
  }
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

StepVerdict Guard::close_thinking(int64_t keep, int64_t i, const std::string& text, const char* why) {
  StepVerdict v;
  ForcedText f;
  f.keep = std::clamp<int64_t>(keep, 0, i + 1);
  // The close starts a line of its own, as the models write it.
  const size_t kept_bytes = f.keep > 0 ? text_ends_[static_cast<size_t>(f.keep) - 1] : 0;
  const bool at_line_start = kept_bytes == 0 || text[std::min(kept_bytes, text.size()) - 1] == '\n';
  f.tokens = at_line_start ? cfg_.thinking.close_after_newline : cfg_.thinking.close;
  f.min_after = cfg_.thinking.min_answer;
  reasoning_end_ = why;
  forcing_until_ = f.keep + static_cast<int64_t>(f.tokens.size());
  ++reasoning_closes_;
  v.inject = std::move(f);
  return v;
}

int64_t Guard::hold_back() const {
  const ThinkingConfig& tc = cfg_.thinking;
  int64_t hold = 0;
  if (thinking_.inside() && tc.answer_on_loop && cfg_.policy != GuardPolicy::Observe && can_close()) hold = tc.hold;
  // Perpetual mode: an EOS may still come before its minimum, and its backstep must find the text unsent.
  if (cfg_.perpetual_min_tokens > 0 && static_cast<int64_t>(signals_.size()) < cfg_.perpetual_min_tokens)
    hold = std::max(hold, cfg_.eos_backstep + 1);
  return hold;
}

void Guard::on_rollback(int64_t keep) {
  periods_.truncate(static_cast<size_t>(keep));
  if (signals_.size() > static_cast<size_t>(keep)) signals_.resize(static_cast<size_t>(keep));
  if (text_ends_.size() > static_cast<size_t>(keep)) text_ends_.resize(static_cast<size_t>(keep));
  const size_t kept_bytes = text_ends_.empty() ? 0 : text_ends_.back();
  for (auto& d : detectors_) d->on_rollback(keep, kept_bytes);
  fired_.clear();
  thinking_.on_rollback(keep, text_ends_);
  ending_checked_ = std::min(ending_checked_, kept_bytes);
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
  r.thinking = thinking_.thinks();
  r.reasoning_tokens = thinking_.reasoning_tokens(r.tokens);
  r.reasoning_end = thinking_.closed_at() < 0 ? "" : reasoning_end_.empty() ? "model" : reasoning_end_;
  r.reasoning_closes = reasoning_closes_;
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
  if (thinking)
    j["reasoning"] = {
        {"tokens", reasoning_tokens},
        {"ended_by", reasoning_end.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(reasoning_end)},
        {"forced_closes", reasoning_closes}};
  return j;
}

namespace {

// SentencePiece vocabularies put a space before a text encoded on its own: dropped when the
// tokens would write one the text does not have.
std::vector<int32_t> strip_space_prefix(const Vocab& vocab, std::vector<int32_t> ids, const std::string& text) {
  auto bytes = [&](size_t from) {
    std::string out;
    for (size_t k = from; k < ids.size(); ++k) out += vocab.token_bytes(ids[k]);
    return out;
  };
  const std::string all = bytes(0);
  if (all == text) return ids;
  if (all == " " + text && !ids.empty()) {
    // The space is a token of its own, or the first piece carries it ("▁\n"): dropped either way.
    if (bytes(1) == text) return std::vector<int32_t>(ids.begin() + 1, ids.end());
    const std::string first = vocab.token_bytes(ids[0]).substr(1);
    std::vector<int32_t> rest(ids.begin() + 1, ids.end());
    auto head = vocab.encode(first, false, true);
    if (head) {
      std::string hb;
      for (int32_t id : *head) hb += vocab.token_bytes(id);
      if (hb == first) {
        head->insert(head->end(), rest.begin(), rest.end());
        return *head;
      }
    }
  }
  return ids;
}

}  // namespace

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
  GuardConfig c = config;
  if (c.thinking.watch) {
    // The close as this vocabulary writes it ("</think>" is one token in Qwen3's and DeepSeek's).
    auto close = vocab.encode(c.thinking.close_text, false, true);
    auto after_newline = vocab.encode("\n" + c.thinking.close_text, false, true);
    if (close && after_newline) {
      c.thinking.close = strip_space_prefix(vocab, *after_newline, "\n" + c.thinking.close_text);
      c.thinking.close_after_newline = strip_space_prefix(vocab, *close, c.thinking.close_text);
    }
  }
  return std::make_unique<Guard>(std::move(c), std::move(eos));
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
