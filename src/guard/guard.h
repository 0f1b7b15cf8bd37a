// The degeneration guard: an observer on every generation step that turns per-step signals into
// events (loop, near_loop, phrase_loop, flooding, entropy_collapse, gibberish, language_drift, runaway,
// eos_starvation) and applies a policy: observe (report only), stop (finish_reason "repetition"
// for loops, "degenerate" otherwise), or repair (roll back before the episode and resample hotter,
// a bounded number of times, then stop). Defaults and their measurements: docs/guard.md.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "guard/detector.h"
#include "guard/language.h"
#include "guard/repetition.h"
#include "guard/signals.h"
#include "guard/thinking.h"

namespace coda {

enum class GuardPolicy { Observe, Stop, Repair };
Expected<GuardPolicy> parse_guard_policy(const std::string& s);
const char* guard_policy_name(GuardPolicy p);

// The event types the detectors report, in the order they are checked (the registry's names,
// guard/detector.h).
const std::vector<std::string>& guard_event_types();

struct GuardConfig {
  GuardPolicy policy = GuardPolicy::Observe;
  // The event types the policy acts on; the others are only observed. Empty: all of them. The
  // server's default is stop on {loop, flooding}: the detectors whose false-positive rate is
  // measured below 1% (docs/guard-eval).
  std::vector<std::string> act_on;
  // Exact loops (a period of 2..max_period tokens repeated back to back).
  int max_period = 200;
  double loop_min_repeats = 3.0;
  int64_t loop_min_span = 32;
  // A period of a sentence or more needs one copy more: three copies of a line end legitimately
  // (a refrain sung three times, three identical rows) far more often than four (docs/guard-eval).
  int loop_long_period = 16;
  double loop_long_min_repeats = 4.0;
  // Blocks: periods beyond max_period, at any length, are loops once two copies are followed by
  // this many tokens of a third (or a whole third copy, when the period is shorter). 0: off.
  int64_t block_third_copy = 64;
  // Loops and floods whose repeated text has no letter or digit (table rules, separators, blank
  // form rows, runs of punctuation) need this many tokens: typography repeats by design.
  int64_t structural_min_span = 96;
  // A near loop counts as typography when letters and digits are at most this share of its
  // span's visible characters (a near loop's span includes where the pattern breaks).
  double structural_max_share = 0.25;
  // Flooding: one token repeated (period 1).
  int64_t flood_min_run = 16;
  // Near loops: a period whose positions repeat with share >= near_min_match (a changing number).
  double near_min_match = 0.75;
  double near_min_repeats = 4.0;
  int64_t near_min_span = 48;
  int near_every = 4;  // checked every this many tokens
  // A near loop whose period spans a line break (a list, a table, a log, code) needs more: that is
  // how legitimate structured text repeats with a changing number or word (docs/guard-eval).
  double near_line_min_match = 0.9;
  double near_line_min_repeats = 12.0;
  // Near loops as words (guard/word_copies.h): near_words_copies copies of a unit of
  // near_words_min .. near_words_max words (numbers and one-letter words left out) whose pairwise
  // longest common subsequence is at least near_words_similarity of the unit, with at least
  // near_words_distinct of the unit's distinct words matched. near_words_max 0: off. Three copies
  // at 0.7 / 0.5 catch more but flag 15% of real C headers, changelogs and licence stanzas;
  // these values hold false positives to 3.0% (docs/guard-eval/realtext.md). A unit of 6 to
  // near_words_min - 1 words counts when its copy spans near_words_min blank-separated fields, not
  // in columns, over one more copy (a short line of code or a log line: WordCopies::check).
  int near_words_min = 10;
  int near_words_max = 160;
  double near_words_similarity = 0.75;
  double near_words_distinct = 0.6;
  // ... and at most this share of the last copy's words new to the text (a list brings a new name
  // or description in every item; a loop brings nothing).
  double near_words_max_novel = 0.1;
  int near_words_copies = 4;  // copies that must match, each with the one before
  // Units of near_words_long to 120 words (0: none) need near_words_long_copies copies: four copies
  // of 100 words do not fit the 400 words in which a loop must end. With the list rules (a list
  // changes one slot, brings new names) 3 copies of 40+ words caught 22 more long near loops of 150
  // for 2 more real texts stopped of 900 (docs/guard-eval/realtext.md). Past 120 words, GNU licence
  // notices quoted for each file (128-131 words, "Lesser" and a version changed) match at 0.76-0.81.
  int near_words_long = 40;
  int near_words_long_copies = 3;
  // Units of short lines (fewer than near_words_line_words words a line: forms, declarations,
  // definitions, changelog entries) need near_words_line_copies copies (0: no such rule).
  int near_words_line_words = 8;
  int near_words_line_copies = 8;
  // Heavily edited copies (a word in five swapped, independently in each copy) match their
  // predecessor on about 0.64 of the unit, as a legitimate list may. But each copy matches the
  // union of the two copies before it on about 0.8: copies whose words are matched by either of
  // the two before, on at least this share, count as matching (0: off). One more copy is needed
  // then, and only units of up to 48 words, on lines of 10 words or more, and at least half
  // lower-case words qualify: tables of codes (a locale's collation lines) draw every line from a
  // few upper-case names, and a log's lines from a few statuses. Real-text corpus, two seeds:
  // heavily edited near loops 65 -> 82 of 100 within the budget, false positives unchanged
  // (docs/guard-eval/realtext.md).
  double near_words_union = 0.75;
  // Phrase loops: recombined phrases ("and thou shalt make thee a burnt offering, and thou shalt
  // make it unto the LORD, ...") have no period at all: each copy inserts or drops a word, so no
  // position lines up with its predecessor. They show as few distinct 3-grams: fewer than this
  // share over the last phrase_window tokens. Legitimate repetition (refrains, forms, signature
  // blocks, SQL, getters) keeps 0.27 or more over 160 tokens, the model's own sampled text 0.6 or
  // more, and the phrase loops of the bundled model fall to 0.18 (docs/guard-eval).
  int phrase_window = 160;
  double phrase_max_distinct = 0.2;  // 0: off
  // ... and recurring sentences: this many sentences in a row, each written at least twice before
  // (a reasoning model cycling through paraphrases of "let me check again"). 0: off.
  int phrase_sentence_run = 8;
  // Entropy collapse: mean entropy over the window below the bound while the window is repetitive.
  int collapse_window = 64;
  double collapse_entropy = 0.15;
  double collapse_distinct = 0.5;  // distinct 3-grams share
  // Gibberish: sustained high surprisal and entropy.
  int gibberish_window = 32;
  double gibberish_surprisal = 6.0;
  double gibberish_entropy = 5.0;
  // The language the text should be in ("en", "it", "fr", "de", "es", "pt"; `coda scan --lang`).
  // Empty: the prompt's when it holds enough words of one language, else the first part of the
  // output's (guard/language.h).
  std::string language;
  // Language drift: the recent text's language or script differs from the reference, on
  // drift_checks checks in a row (16 tokens apart): a sustained switch, not an English command or
  // paragraph quoted in French prose.
  // The window is running prose (drift_min_prose known words per word) with drift_min_words known
  // words, of which the new language leads by drift_min_margin nats a word. Man pages left partly
  // in English pass at 0.5 nats; real switches lead by 1.5-3.
  size_t drift_window_chars = 800;
  int64_t drift_min_words = 12;
  double drift_min_margin = 1.2;
  double drift_min_prose = 0.25;
  int drift_checks = 3;
  // Script mixing: letters of a script neither the prompt nor the first mix_reference_letters
  // letters of the output used, at least mix_min_share of the last mix_window_chars bytes' letters,
  // in mix_min_runs separate runs, of which mix_min_embedded touch a letter of another script (a
  // name in parentheses stands apart; a collapsing model writes them into words). Only runs of at
  // most mix_max_run letters count: a comment or a quotation in another script is a long run, a
  // name a separate one. 0 share: off.
  size_t mix_window_chars = 600;
  int mix_max_run = 3;
  double mix_min_share = 0.02;
  int mix_min_runs = 3;
  int mix_min_embedded = 2;
  int64_t mix_reference_letters = 200;
  // Low-diversity garbage ("00 + 0: 0: 0:00:0: // 0:00:"): over the last garbage_window_chars
  // bytes, letters at most garbage_max_letters of the visible characters, at most
  // garbage_max_alphabet distinct visible characters, at most garbage_max_lines line breaks (tables,
  // dumps and logs are lines), and no regular form: the pieces between blanks, with digits and
  // letters reduced to one class each ("0:00:" -> "9:9:"), take at least garbage_min_shapes
  // distinct forms per piece (a line of numbers, of addresses or of times takes a few). 0 window: off.
  size_t garbage_window_chars = 200;
  double garbage_max_letters = 0.2;
  int garbage_max_alphabet = 20;
  int garbage_max_lines = 1;
  double garbage_min_shapes = 0.25;
  // Invented words: over the last invented_window_words words of the reference language (letters
  // only, not capitalised, not touching code punctuation), more than invented_max_unknown of them
  // distinct words unknown to its dictionary and to English's (hunspell's, from dictionary_dir),
  // in running prose (invented_min_prose known function words per word). 0 window: off.
  int invented_window_words = 40;
  double invented_max_unknown = 0.3;
  double invented_min_prose = 0.15;
  std::string dictionary_dir = "/usr/share/hunspell";
  // Evidence adds up: once a degenerate event (garbage, script mixing, invented words, gibberish,
  // drift) was found in the last evidence_window tokens, a word or token repeated
  // evidence_flood_run times in a row is a flood.
  int64_t evidence_window = 256;
  int64_t evidence_flood_run = 5;
  // Runaway length and EOS starvation (0 turns them off).
  int64_t runaway_tokens = 2048;
  int64_t eos_starvation_after = 512;
  int64_t eos_starvation_window = 256;
  double eos_starvation_prob = 1e-4;
  // Repair.
  int max_repairs = 8;
  RepairAction repair{0, 2.0f, 0.02f, 0.7f, 1.3f};
  int stream_delay_tokens = 256;  // what the generator holds back under the repair policy
  // "Perpetual" generation (the ICLR 2025 blog on perpetual text): an EOS before this many tokens
  // is stepped back from, `eos_backstep` tokens, and sampling resumes hotter (0: off). Under any
  // policy: until then the last eos_backstep + 1 tokens are held from the stream, so a backstep
  // never takes back text already sent.
  int64_t perpetual_min_tokens = 0;
  int64_t eos_backstep = 8;
  // The resampling after a backstep, as the blog's seed code: the temperature starts at 2x and
  // decays by 0.1 per token back to the request's. max(T, 0.7) is the base, so that a greedy
  // request (T 0) resamples at all; no penalty. (Before 2026-12-07 it was the repair's: decay 0.02
  // and repetition penalty 1.3.)
  RepairAction perpetual{0, 2.0f, 0.1f, 0.7f, 1.0f};
  bool trace = false;  // keep a per-token trace
  // vLLM's `repetition_detection` request object: stop with finish_reason "repetition" as soon as
  // an n-gram of min_pattern..max_pattern tokens has repeated min_count times back to back, under
  // any policy (the request asked for it). max_pattern 0: off.
  int rd_min_pattern = 0, rd_max_pattern = 0, rd_min_count = 0;
  // A reasoning model's <think> block: a loop there closes it and the model answers; a budget of
  // reasoning tokens closes it too (guard/thinking.h).
  ThinkingConfig thinking;
};

// A policy with its scope, as flags and requests spell it: "POLICY" (every detector) or
// "POLICY:TYPE,TYPE" (those detectors; the others observe), e.g. "stop:loop,flooding".
Status set_guard_policy(const std::string& spec, GuardConfig& config);
std::string guard_policy_spec(const GuardConfig& config);

struct GuardEvent {
  std::string type;
  int64_t onset = 0;        // generated-token index where the episode began
  int64_t detected_at = 0;  // index of the token that revealed it
  double confidence = 0;
  nlohmann::ordered_json evidence;
  std::string action;  // observe, stop, repair
};

struct GuardRepair {
  int64_t at = 0;    // token index when it was decided
  int64_t keep = 0;  // tokens kept
  std::string reason;
};

struct GuardReport {
  std::string policy;
  std::vector<GuardEvent> events;
  std::vector<GuardRepair> repairs;
  int64_t tokens = 0;
  double mean_entropy = 0, mean_varentropy = 0, mean_surprisal = 0, mean_eos_prob = 0, max_eos_prob = 0;
  double distinct2 = 1;
  bool has_signals = true;  // false when some step came without a distribution (the proxy, text only)
  // The <think> block, when the request watches one: its tokens, and how it ended: "model" (the
  // model closed it), "loop" (a loop there was dropped and the block closed), "budget", or ""
  // (still open: the generation ended inside it, or it never opened).
  bool thinking = false;
  int64_t reasoning_tokens = 0;
  std::string reasoning_end;
  int reasoning_closes = 0;  // forced closes (a loop or the budget)
  nlohmann::ordered_json to_json() const;
};

class Guard : public StepObserver {
 public:
  Guard(GuardConfig config, std::vector<int32_t> eos_ids);

  void on_start(const std::vector<int32_t>& prompt, const std::string& prompt_text) override;
  StepVerdict on_step(const StepView& step) override;
  void on_rollback(int64_t keep) override;
  int64_t hold_back() const override;
  // With thinking.external: the next steps are thinking (true) or answer (false).
  void set_thinking(bool inside) { thinking_.set_inside(inside, static_cast<int64_t>(signals_.size())); }
  // The same step for a caller that has no logits (the proxy, which sees an upstream's stream):
  // `token` is any stable id of the token's text, `signals` what could be estimated from the
  // upstream's top logprobs, or null when it sent none. Without signals the detectors that need
  // them (entropy collapse, gibberish, EOS starvation) stay quiet for the rest of the generation.
  StepVerdict observe(int32_t token, const StepSignals* signals, const std::string& text);

  GuardReport report() const;
  // From now on an event that the policy would repair is stopped (the proxy, once a generation
  // shows reasoning or tool calls, which cannot be continued from their middle).
  void stop_instead_of_repair() {
    if (cfg_.policy == GuardPolicy::Repair) cfg_.policy = GuardPolicy::Stop;
  }
  // From now on the units are word pieces, not tokens (the proxy without logprobs): the phrase-loop
  // detector is off, because over 160 word pieces a legitimate signature block falls as low as a
  // phrase loop does (docs/guard-eval).
  void units_are_pieces() { cfg_.phrase_max_distinct = 0; }
  // The generation's length in tokens as the caller knows it (the proxy: the upstream's count or an
  // estimate), for the next steps; < 0: the units are the tokens.
  void set_length_tokens(int64_t tokens) { length_override_ = tokens; }
  // One JSON object per step (when config.trace), rollbacks included as {"rollback_to": k}.
  const std::vector<nlohmann::ordered_json>& trace() const { return trace_; }

 private:
  std::optional<GuardEvent> detect(GuardState& state);
  // The generation's length in tokens: the caller's count when it gave one (an upstream's usage),
  // an estimate from word pieces when the units are pieces, else the units.
  int64_t length_tokens() const;
  bool same_episode(const std::string& type, int64_t onset) const;

  GuardConfig cfg_;
  std::vector<int32_t> eos_ids_;
  // The reference the text is held to: its language (config, prompt or the output's start, as
  // language_from_ says) and the scripts the prompt and the output's first letters used.
  std::string language_, language_from_, prompt_script_;
  unsigned scripts_ = 0;          // bit per script (guard/language.h)
  int64_t output_letters_ = 0;    // letters of the output read for scripts_
  size_t script_scan_ = 0;        // bytes of the output read for scripts_
  int64_t last_degenerate_ = -1;  // token index of the last degenerate event
  void follow_reference(const std::string& text);
  PeriodTracker periods_;
  std::vector<size_t> text_ends_;  // bytes of text after each token
  std::vector<StepSignals> signals_;
  bool signals_known_ = true;  // every step so far came with signals
  std::vector<GuardEvent> events_;
  std::vector<GuardRepair> repairs_;
  std::vector<std::pair<std::string, int64_t>> fired_;  // (type, index until which it stays quiet)
  std::vector<nlohmann::ordered_json> trace_;
  std::vector<std::unique_ptr<Detector>> detectors_;
  int64_t length_override_ = -1;
  ThinkingTracker thinking_;
  std::string reasoning_end_;  // how the block was closed, when the guard closed it
  int reasoning_closes_ = 0;
  int64_t forcing_until_ = 0;  // tokens before this index are a close being written
  // Perpetual mode: where an ending in words ("The End.", "In conclusion,") that the text has just
  // completed begins (a byte), else -1.
  int64_t ending_in_words(const std::string& text);
  size_t ending_checked_ = 0;
  // A forced close of the thinking: drops the tokens from `keep` on and writes the close.
  StepVerdict close_thinking(int64_t keep, int64_t i, const std::string& text, const char* why);
  bool can_close() const { return cfg_.thinking.watch && (cfg_.thinking.external || !cfg_.thinking.close.empty()); }
};

// Generation under the guard: sets the stream delay the policy needs, runs, and returns the
// result with the guard's report.
struct GuardedResult {
  GenerationResult result;
  GuardReport report;
  std::vector<nlohmann::ordered_json> trace;
};
class Generator;
// The guard for one request on `gen`'s vocabulary (EOS, EOT and, for chat, end-of-turn tokens);
// raises the request's stream delay to what the policy needs.
std::unique_ptr<Guard> make_guard(const Generator& gen, GenerationRequest& request, const GuardConfig& config);
Expected<GuardedResult> generate_guarded(Generator& gen, GenerationRequest request, const GuardConfig& config,
                                         const StreamCallback& on_chunk = {});

}  // namespace coda
