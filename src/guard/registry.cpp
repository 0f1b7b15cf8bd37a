// The detector registry: names, families, episode groups and finish reasons in one table, and the
// factory that makes one of each. Adding a detector is a header in detectors/ and a row here.
#include <algorithm>
#include <cctype>

#include "guard/detector.h"
#include "guard/detectors/entropy_collapse.h"
#include "guard/detectors/eos_starvation.h"
#include "guard/detectors/exact_loop.h"
#include "guard/detectors/flooding.h"
#include "guard/detectors/garbage.h"
#include "guard/detectors/gibberish.h"
#include "guard/detectors/invented_words.h"
#include "guard/detectors/language_drift.h"
#include "guard/detectors/near_loop.h"
#include "guard/detectors/phrase_loop.h"
#include "guard/detectors/runaway.h"
#include "guard/detectors/script_mixing.h"
#include "guard/guard.h"

namespace coda {

namespace {

constexpr unsigned kText = kNeedsText, kTokens = kNeedsTokens, kSignals = kNeedsSignals;

// Loops, floods and near loops are one episode however many of them see it ("periodic"). A phrase
// loop is an episode of its own, so that the periodic detectors still report (and are measured on)
// the loops it sees first; a stop for any of the four says "repetition".
const std::vector<DetectorInfo> kDetectors = {
    {"flooding", "loop", "periodic", "repetition", true, true, kTokens | kText, "one token repeated"},
    {"loop", "loop", "periodic", "repetition", true, true, kTokens | kText, "a span of tokens repeated exactly"},
    {"near_loop", "loop", "periodic", "repetition", true, true, kTokens | kText,
     "a span repeated with a number or a word changed"},
    {"phrase_loop", "loop", "phrase_loop", "repetition", true, true, kTokens | kText,
     "recombined phrases: few distinct 3-grams"},
    {"entropy_collapse", "degenerate", "entropy_collapse", "degenerate", true, true, kTokens | kSignals,
     "near-certain steps over repetitive text"},
    {"gibberish", "degenerate", "gibberish", "degenerate", true, true, kSignals, "sustained high surprisal and entropy"},
    {"language_drift", "degenerate", "language_drift", "degenerate", true, false, kText,
     "the text left its language (the prompt's or its own start's) or script"},
    {"script_mixing", "degenerate", "script_mixing", "degenerate", true, true, kText,
     "letters of a script the text did not use, scattered into it"},
    {"garbage", "degenerate", "garbage", "degenerate", true, true, kText,
     "non-periodic text from a handful of symbols"},
    {"invented_words", "degenerate", "invented_words", "degenerate", true, false, kText,
     "words its language's dictionary does not know"},
    {"runaway", "length", "runaway", "degenerate", false, false, kTokens, "the generation passed a length"},
    {"eos_starvation", "length", "eos_starvation", "degenerate", false, false, kSignals,
     "the end of generation became unreachable"},
};

template <class D>
std::unique_ptr<Detector> make(const char* name) {
  return std::make_unique<D>(*find_detector(name));
}

}  // namespace

const std::vector<DetectorInfo>& detector_infos() { return kDetectors; }

const DetectorInfo* find_detector(std::string_view name) {
  for (const auto& d : kDetectors)
    if (name == d.name) return &d;
  return nullptr;
}

std::vector<std::string> detector_family(std::string_view family) {
  std::vector<std::string> out;
  for (const auto& d : kDetectors)
    if (family == d.family) out.emplace_back(d.name);
  return out;
}

bool in_detector_family(std::string_view name, std::string_view family) {
  const DetectorInfo* d = find_detector(name);
  return d && family == d->family;
}

nlohmann::ordered_json detector_registry_json() {
  auto out = nlohmann::ordered_json::array();
  for (const auto& d : kDetectors) {
    auto needs = nlohmann::ordered_json::array();
    if (d.needs & kNeedsText) needs.push_back("text");
    if (d.needs & kNeedsTokens) needs.push_back("tokens");
    if (d.needs & kNeedsSignals) needs.push_back("signals");
    out.push_back({{"name", d.name},
                   {"family", d.family},
                   {"episode", d.episode},
                   {"finish_reason", d.finish_reason},
                   {"repairable", d.repairable},
                   {"unscoped", d.unscoped},
                   {"needs", needs},
                   {"what", d.what}});
  }
  return out;
}

std::vector<std::unique_ptr<Detector>> make_detectors(const GuardConfig& config) {
  std::vector<std::unique_ptr<Detector>> out;
  out.push_back(make<detectors::Flooding>("flooding"));
  out.push_back(std::make_unique<detectors::ExactLoop>(*find_detector("loop"), config));
  out.push_back(std::make_unique<detectors::NearLoop>(*find_detector("near_loop"), config));
  out.push_back(make<detectors::PhraseLoop>("phrase_loop"));
  out.push_back(make<detectors::EntropyCollapse>("entropy_collapse"));
  out.push_back(make<detectors::Gibberish>("gibberish"));
  out.push_back(make<detectors::LanguageDrift>("language_drift"));
  out.push_back(make<detectors::ScriptMixing>("script_mixing"));
  out.push_back(make<detectors::Garbage>("garbage"));
  out.push_back(make<detectors::InventedWords>("invented_words"));
  out.push_back(make<detectors::Runaway>("runaway"));
  out.push_back(make<detectors::EosStarvation>("eos_starvation"));
  return out;
}

// --- GuardState ---

GuardState::GuardState(const GuardConfig& config_, const PeriodTracker& periods_, const std::vector<size_t>& text_ends,
                       const std::vector<StepSignals>& signals_, bool signals_known_, const std::string& text_,
                       int32_t token_, const std::string& language_, const std::string& prompt_script_,
                       unsigned scripts_, const std::vector<std::pair<std::string, int64_t>>& fired,
                       int64_t length_tokens_, int64_t last_degenerate_)
    : config(config_),
      periods(periods_),
      signals(signals_),
      signals_known(signals_known_),
      text(text_),
      token(token_),
      language(language_),
      prompt_script(prompt_script_),
      scripts(scripts_),
      last_degenerate(last_degenerate_),
      n(static_cast<int64_t>(periods_.tokens().size())),
      i(n - 1),
      length_tokens(length_tokens_ >= 0 ? length_tokens_ : n),
      text_ends_(text_ends),
      fired_(fired) {}

std::string_view GuardState::tail_text(int64_t tokens) const {
  const size_t count = text_ends_.size();
  if (tokens <= 0 || static_cast<size_t>(tokens) > count) return {};
  const size_t from = static_cast<size_t>(tokens) == count ? 0 : text_ends_[count - 1 - static_cast<size_t>(tokens)];
  return std::string_view(text).substr(std::min(from, text.size()));
}

namespace {

// Whether letters (and digits, with `digits`) are at most `max_share` of the visible characters of
// `t`, or with `max_share` 0, absent. Any non-ASCII byte counts as a letter (other scripts).
bool sparse_text(std::string_view t, bool digits, double max_share) {
  if (t.empty()) return false;
  size_t counted = 0, visible = 0;
  for (char ch : t) {
    const auto c = static_cast<unsigned char>(ch);
    counted += c >= 0x80 || std::isalpha(c) || (digits && std::isdigit(c));
    visible += !std::isspace(c);
  }
  return max_share > 0 ? static_cast<double>(counted) <= max_share * static_cast<double>(visible) : counted == 0;
}

}  // namespace

bool GuardState::structural_tail(int64_t tokens, double max_share) const {
  return sparse_text(tail_text(tokens), true, max_share);
}

bool GuardState::letterless_tail(int64_t tokens, double max_share) const {
  return sparse_text(tail_text(tokens), false, max_share);
}

size_t GuardState::unit_begin(int64_t k) const {
  if (k <= 0 || text_ends_.empty()) return 0;
  return std::min(text_ends_[std::min(static_cast<size_t>(k), text_ends_.size()) - 1], text.size());
}

std::string_view GuardState::unit_text(int64_t k) const {
  if (k < 0 || static_cast<size_t>(k) >= text_ends_.size()) return {};
  const size_t from = unit_begin(k), to = std::min(text_ends_[static_cast<size_t>(k)], text.size());
  return std::string_view(text).substr(from, to > from ? to - from : 0);
}

int64_t GuardState::unit_at_byte(size_t byte) const {
  return static_cast<int64_t>(std::upper_bound(text_ends_.begin(), text_ends_.end(), byte) - text_ends_.begin());
}

bool GuardState::line_tail(int64_t tokens) const { return tail_text(tokens).find('\n') != std::string_view::npos; }

bool GuardState::cooling_down(std::string_view type) const {
  const DetectorInfo* d = find_detector(type);
  const std::string_view group = d ? d->episode : type;
  for (const auto& [t, until] : fired_) {
    const DetectorInfo* f = find_detector(t);
    if ((t == type || (f && group == f->episode)) && i < until) return true;
  }
  return false;
}

const Loop& GuardState::exact_loop() {
  if (!exact_done_) {
    exact_done_ = true;
    const GuardConfig& c = config;
    exact_ = periods.exact(c.loop_min_repeats, c.loop_min_span, 2, c.loop_long_period, c.loop_long_min_repeats);
    typography_ = exact_.period > 0 && exact_.span < c.structural_min_span && letterless_tail(exact_.period);
    if (typography_) exact_ = Loop{};
  }
  return exact_;
}

bool GuardState::exact_loop_is_typography() {
  exact_loop();
  return typography_;
}

}  // namespace coda
