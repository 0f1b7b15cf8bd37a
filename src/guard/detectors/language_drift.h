// Language drift: every 16 tokens, the last drift_window_chars of text against the reference
// language (the config's, the prompt's or the output's start: drift_min_words known words, leading
// by drift_min_margin nats a word) or the prompt's script (70% of the letters). A language drift
// must show on drift_checks checks in a row, so that a quoted command or paragraph does not make one.
#pragma once

#include <algorithm>

#include "guard/detector.h"
#include "guard/detectors/window.h"
#include "guard/guard.h"
#include "guard/language.h"

namespace coda::detectors {

class LanguageDrift : public Detector {
 public:
  explicit LanguageDrift(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    if (c.drift_window_chars == 0 || s.n % 16 != 0 || (s.language.empty() && s.prompt_script.empty()))
      return std::nullopt;
    const LanguageProfile recent = language_profile(last_bytes(s.text, c.drift_window_chars));
    const std::string lang =
        recent.prose_share() >= c.drift_min_prose ? recent.language(c.drift_min_words, c.drift_min_margin) : "";
    const std::string script = recent.letters >= 40 && recent.script_share() >= 0.7 ? recent.script() : "";
    const bool lang_drift = !s.language.empty() && !lang.empty() && lang != s.language;
    const bool script_drift = !s.prompt_script.empty() && !script.empty() && script != s.prompt_script;
    run_ = lang_drift && lang == previous_ ? run_ + 1 : lang_drift ? 1 : 0;
    previous_ = lang_drift ? lang : "";
    if (!script_drift && !(lang_drift && run_ >= c.drift_checks)) return std::nullopt;
    return Finding{s.n - 64,
                   lang_drift ? std::min(1.0, recent.margin()) : recent.script_share(),
                   {{"language", s.language},
                    {"drifted_to", lang},
                    {"prompt_script", s.prompt_script},
                    {"script", script},
                    {"known_words", recent.known_words},
                    {"margin", recent.margin()}},
                   128};
  }
  void on_rollback(int64_t, size_t) override {
    previous_.clear();
    run_ = 0;
  }

 private:
  const DetectorInfo& info_;
  std::string previous_;  // the other language the last check found ("" if none)
  int run_ = 0;           // checks in a row that found it
};

}  // namespace coda::detectors
