// The guard's detectors: one small object per kind of degeneration, behind one interface, as the
// sampling processors are. Each lives in its own header in guard/detectors/; the registry
// (registry.cpp) is the one place that names them, gives their family, their finish reason and
// what evidence they need. Everything else (policy scopes, the server's metrics, the lab's
// diagnosis and threshold, the Prometheus rules' check) asks the registry.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "guard/repetition.h"
#include "guard/signals.h"

namespace coda {

struct GuardConfig;

// What a detector reads. Text: the generated text (every caller has it). Tokens: stable ids per
// token or word piece (every caller has them). Signals: the next-token distribution, from logits
// in process or the upstream's top-k logprobs in the proxy; a detector that needs them is quiet
// once a step came without them.
enum DetectorNeeds : unsigned { kNeedsText = 1, kNeedsTokens = 2, kNeedsSignals = 4 };

struct DetectorInfo {
  const char* name;           // the event type: "loop", "near_loop", ...
  const char* family;         // "loop" (repetition), "degenerate" (incoherence), "length"
  const char* episode;        // detectors of one episode group report a stretch of text once
  const char* finish_reason;  // what a stop for it says: "repetition" or "degenerate"
  bool repairable;            // a rollback and resample can fix it (not length)
  // A policy without a scope ("stop", "repair") acts on it: the loop and degenerate detectors whose
  // false positives were measured below 1% on every legitimate kind (docs/guard-eval). The others
  // (language drift, invented words, and length) act only when a scope names them.
  bool unscoped;
  unsigned needs;             // DetectorNeeds bits
  const char* what;           // one line for --help and `coda scan --detectors`
};

// The registry, in the order the detectors are checked on each step.
const std::vector<DetectorInfo>& detector_infos();
const DetectorInfo* find_detector(std::string_view name);
// The names of one family ("loop", "degenerate", "length"), in registry order.
std::vector<std::string> detector_family(std::string_view family);
bool in_detector_family(std::string_view name, std::string_view family);
// The registry as JSON: [{"name", "family", "episode", "finish_reason", "repairable", "needs"}].
nlohmann::ordered_json detector_registry_json();

// What one detector found on this step: the guard turns it into an event (or folds it into the
// episode already reported).
struct Finding {
  int64_t onset = 0;  // generated-token index where the episode began
  double confidence = 0;
  nlohmann::ordered_json evidence;
  int64_t quiet_for = 0;  // tokens during which its episode group stays quiet afterwards
};

// The generation so far, as the detectors see it on one step, with the per-step facts several of
// them share (the flood run, the exact loop) computed once on first use.
class GuardState {
 public:
  GuardState(const GuardConfig& config, const PeriodTracker& periods, const std::vector<size_t>& text_ends,
             const std::vector<StepSignals>& signals, bool signals_known, const std::string& text, int32_t token,
             const std::string& language, const std::string& prompt_script, unsigned scripts,
             const std::vector<std::pair<std::string, int64_t>>& fired, int64_t length_tokens,
             int64_t last_degenerate);

  const GuardConfig& config;
  const PeriodTracker& periods;
  const std::vector<StepSignals>& signals;
  const bool signals_known;  // every step so far came with signals
  const std::string& text;
  const int32_t token;
  const std::string& language;       // the reference language: "en", "fr", ... or "" (not decided)
  const std::string& prompt_script;  // "latin", "cyrillic", ... or ""
  const unsigned scripts;            // bit per script the prompt or the output's start used
  const int64_t last_degenerate;     // token index of the last degenerate event (-1: none)
  const int64_t n;                     // tokens so far
  const int64_t i;                     // index of the newest token
  // The generation's length in tokens: `n`, or the upstream's count, or an estimate from word
  // pieces (the proxy without logprobs): what `runaway` measures.
  const int64_t length_tokens;

  // The text of the last `tokens` tokens (empty when there are fewer).
  std::string_view tail_text(int64_t tokens) const;
  // The text of the last `tokens` tokens holds no letter or digit (with `max_share` > 0: letters
  // and digits are at most that share of its visible characters).
  bool structural_tail(int64_t tokens, double max_share = 0) const;
  // The text of the last `tokens` tokens holds no letter (digits and symbols only: "00 00", "0, 0,"),
  // or with `max_share` > 0, letters are at most that share of its visible characters (a hex dump).
  bool letterless_tail(int64_t tokens, double max_share = 0) const;
  // The text of the last `tokens` tokens holds a line break.
  bool line_tail(int64_t tokens) const;
  // The text of unit `k` (0 <= k < n), and where it begins in the text.
  std::string_view unit_text(int64_t k) const;
  size_t unit_begin(int64_t k) const;
  // The unit (token or piece) whose text holds byte `byte` of the text.
  int64_t unit_at_byte(size_t byte) const;
  // An episode of `type`'s group was reported and is still quiet at this step.
  bool cooling_down(std::string_view type) const;

  // One token repeated: the length of the run ending at this token.
  int64_t flood_run() const { return periods.run(1) + 1; }
  // The exact loop of period >= 2 the exact-loop rule confirms at this step (period 0 if none),
  // typography and data (a repeat without letters, shorter than the structural floor: a rule of
  // dashes, a row of zero bytes in a hex dump, `{ -1, 0, 0, 0, ... }` in C) excluded.
  const Loop& exact_loop();
  bool exact_loop_is_typography();

 private:
  const std::vector<size_t>& text_ends_;
  const std::vector<std::pair<std::string, int64_t>>& fired_;
  bool exact_done_ = false, typography_ = false;
  Loop exact_;
};

class Detector {
 public:
  virtual ~Detector() = default;
  virtual const DetectorInfo& info() const = 0;
  // Every step, before any check: detectors with state of their own follow the generation here.
  virtual void see(const GuardState& /*s*/) {}
  // Looks at the newest step; called only while its episode group is not cooling down and no
  // detector before it reported on this step.
  virtual std::optional<Finding> check(GuardState& s) = 0;
  // Generation went back to the first `keep` tokens, `kept_bytes` of text.
  virtual void on_rollback(int64_t /*keep*/, size_t /*kept_bytes*/) {}
};

// One instance of every registered detector, in registry order.
std::vector<std::unique_ptr<Detector>> make_detectors(const GuardConfig& config);

}  // namespace coda
