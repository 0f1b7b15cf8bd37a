// Script mixing: letters of a script that neither the prompt nor the output's first letters used,
// scattered through the recent text (a collapsing model writing Chinese characters into Italian).
// Latin letters are never foreign: commands, names and code are written in them in every language.
// A name or a quotation in another script is one run standing apart, a comment a long one; mixing
// is several short runs, some written into the words of the text. Checked every 8 tokens over the last mix_window_chars
// bytes.
#pragma once

#include <algorithm>

#include "guard/detector.h"
#include "guard/detectors/window.h"
#include "guard/guard.h"
#include "guard/language.h"

namespace coda::detectors {

class ScriptMixing : public Detector {
 public:
  explicit ScriptMixing(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    if (c.mix_min_share <= 0 || s.n % 8 != 0) return std::nullopt;
    const std::string window = last_bytes(s.text, c.mix_window_chars);
    int64_t letters = 0, foreign = 0;
    int runs = 0, embedded = 0, all_runs = 0;
    // Short runs that touch a letter of another script within the current word, and the word's
    // letters: a run counts as written into a word when the word is mostly of the other scripts
    // ("fragmen中ted"); a word of the new script with a letter borrowed from Latin ("Жəаб" in an
    // Abkhaz table) is the new script's own word.
    int word_touching = 0, word_foreign = 0, word_native = 0;
    auto close_word = [&] {
      if (word_native > word_foreign) embedded += word_touching;
      word_touching = word_foreign = word_native = 0;
    };
    int prev = -2;           // script of the previous character (-1: not a letter)
    bool run_open = false;   // inside a run of foreign letters
    bool run_touch = false;  // the open run touched a letter of another script
    int run_length = 0;
    unsigned seen = 0;
    auto close_run = [&](bool touching_after) {
      if (!run_open) return;
      ++all_runs;
      if (run_length <= c.mix_max_run) {
        ++runs;
        word_touching += run_touch || touching_after;
      }
      run_open = false;
    };
    for (size_t k = 0; k < window.size();) {
      const int script = script_of(utf8_next(window, k));
      const bool is_foreign = script > 0 && !(s.scripts & (1u << script));
      if (script >= 0) ++letters;
      if (script >= 0) ++(is_foreign ? word_foreign : word_native);
      if (is_foreign) {
        ++foreign;
        seen |= 1u << script;
        if (!run_open) {
          run_open = true;
          run_touch = prev >= 0 && prev != script;
          run_length = 0;
        }
        ++run_length;
      } else {
        close_run(script >= 0);
      }
      if (script < 0) close_word();
      prev = script;
    }
    close_run(false);
    close_word();
    // Short runs are most of the runs: comments and quotations are long ones, with a short one here
    // and there between two Latin words.
    if (letters < 60 || foreign < c.mix_min_share * static_cast<double>(letters) || runs < c.mix_min_runs ||
        embedded < c.mix_min_embedded || 3 * runs < 2 * all_runs)
      return std::nullopt;
    std::string scripts;
    for (int k = 0; k < kScripts; ++k)
      if (seen & (1u << k)) scripts += std::string(scripts.empty() ? "" : ",") + script_name(k);
    const double share = static_cast<double>(foreign) / static_cast<double>(letters);
    return Finding{s.unit_at_byte(s.text.size() - window.size()),
                   std::min(1.0, share * 10),
                   {{"scripts", scripts}, {"share", share}, {"runs", runs}, {"embedded", embedded}},
                   64};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
