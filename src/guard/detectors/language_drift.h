// Language drift: every 16 tokens, the last drift_window_chars of text against the prompt's
// language (function words, drift_min_words of them) or script (70% of its letters).
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
    if (c.drift_window_chars == 0 || s.n % 16 != 0 || (s.prompt_language.empty() && s.prompt_script.empty()))
      return std::nullopt;
    const LanguageProfile recent = language_profile(last_bytes(s.text, c.drift_window_chars));
    const std::string lang = recent.language(c.drift_min_words, 0.6);
    const std::string script = recent.letters >= 40 && recent.script_share() >= 0.7 ? recent.script() : "";
    const bool lang_drift = !s.prompt_language.empty() && !lang.empty() && lang != s.prompt_language;
    const bool script_drift = !s.prompt_script.empty() && !script.empty() && script != s.prompt_script;
    if (!lang_drift && !script_drift) return std::nullopt;
    const int64_t words = recent.en_words + recent.it_words;
    const double confidence =
        lang_drift ? static_cast<double>(std::max(recent.en_words, recent.it_words)) / std::max<int64_t>(1, words)
                   : recent.script_share();
    return Finding{s.n - 64,
                   confidence,
                   {{"prompt_language", s.prompt_language},
                    {"language", lang},
                    {"prompt_script", s.prompt_script},
                    {"script", script},
                    {"en_words", recent.en_words},
                    {"it_words", recent.it_words}},
                   128};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
