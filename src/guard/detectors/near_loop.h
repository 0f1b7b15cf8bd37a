// Near loops: a period whose positions repeat with a share of at least near_min_match over
// near_min_repeats periods (a loop that changes a number or a word each time). Checked every
// near_every tokens while no exact loop is confirmed. Config: near_min_match, near_min_repeats,
// near_min_span, near_every, near_line_min_match and near_line_min_repeats (a near loop over line
// breaks: how lists, tables, logs and code repeat legitimately), structural_max_share.
//
// Then, as words (WordCopies): three copies of a 8-160-word unit that match with edits (a
// counter, a number, a swapped word). Copies that are exact in tokens are left to the exact
// detector, with its rule for long periods, so that `stop:loop` still stops them. Config:
// near_words_min, near_words_max (0: off), near_words_similarity, near_words_distinct.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "guard/detector.h"
#include "guard/guard.h"
#include "guard/word_copies.h"

namespace coda::detectors {

// The step on which the approximate detectors (near and phrase loops) look: every near_every
// tokens, while no exact loop (typography included) is confirmed and no periodic episode is quiet.
inline bool approximate_step(GuardState& s) {
  const GuardConfig& c = s.config;
  return c.near_every > 0 && s.n % c.near_every == 0 && s.exact_loop().period == 0 && !s.exact_loop_is_typography() &&
         !s.cooling_down("loop");
}

class NearLoop : public Detector {
 public:
  NearLoop(const DetectorInfo& info, const GuardConfig& c)
      : info_(info),
        words_(c.near_words_min, c.near_words_max, c.near_words_similarity, c.near_words_distinct,
               c.near_words_max_novel, c.near_words_copies, c.near_words_long, c.near_words_long_copies,
               c.near_words_line_words, c.near_words_line_copies, c.near_words_union) {}
  const DetectorInfo& info() const override { return info_; }
  void see(const GuardState& s) override {
    if (s.config.near_words_max > 0) words_.update(s.text);
  }
  void on_rollback(int64_t, size_t kept_bytes) override { words_.truncate(kept_bytes); }
  std::optional<Finding> check(GuardState& s) override {
    if (!approximate_step(s)) return std::nullopt;
    if (auto f = positional(s)) return f;
    return as_words(s);
  }

 private:
  std::optional<Finding> positional(GuardState& s) {
    const GuardConfig& c = s.config;
    const auto& t = s.periods.tokens();
    Loop near = near_loop(t, 2, c.max_period, c.near_min_match, c.near_min_repeats, c.near_min_span);
    if (near.period > 0 && s.line_tail(near.span)) {  // structured text: the stricter test
      near = near_loop(t, 2, c.max_period, std::max(c.near_min_match, c.near_line_min_match),
                       std::max(c.near_min_repeats, c.near_line_min_repeats), c.near_min_span);
    }
    if (near.period == 0) return std::nullopt;
    // A list on one line (a log's "pkg:amd64 (1.2-3, automatic), pkg2:amd64 (...)") is still a list.
    if (a_list(s, near)) return std::nullopt;
    // An exact repetition still growing (exact but for its first period) is the exact detector's,
    // with its rule for long periods; this detector is for loops that change as they go.
    if (s.periods.run(near.period) + 2 * near.period >= near.span) return std::nullopt;
    // A near loop over typography (a banner of asterisks broken by a title, a ruled table) is
    // judged by the whole span: the few letters where the pattern breaks do not make it prose.
    if (near.span < c.structural_min_span && s.structural_tail(near.span, c.structural_max_share)) return std::nullopt;
    return Finding{near.onset,
                   near.match * std::min(1.0, near.repeats / (c.near_min_repeats + 2)),
                   {{"period", near.period}, {"repeats", near.repeats}, {"span", near.span}, {"match", near.match}},
                   near.span};
  }

  // A list or a table: most lines change a word the text had not used before (LC_CTYPE, then
  // LC_COLLATE, LC_TIME, ... in a locale file). A loop changes a counter, or swaps among the words
  // it already wrote. Numbers and one-letter pieces do not count as new words.
  //
  // Or a list of identifiers: lines that change only numbers, which move by irregular steps
  // (CVE-2026-141693, CVE-2026-141694, CVE-2026-141697, ... in a changelog). A loop with a counter
  // moves it by the same step every copy ("Step 7", "Step 8", "Step 9"), or not at all.
  static bool a_list(const GuardState& s, const Loop& near) {
    const auto& t = s.periods.tokens();
    int copies = 0, novel = 0;
    std::vector<int64_t> deltas;  // how each changed number moved from the copy before
    std::vector<int64_t> last_numbers;
    for (int64_t from = near.onset + near.period; from + near.period <= s.n; from += near.period) {
      ++copies;
      const std::string_view before = std::string_view(s.text).substr(0, s.unit_begin(from));
      for (int64_t k = from; k < from + near.period; ++k) {
        if (t[static_cast<size_t>(k)] == t[static_cast<size_t>(k - near.period)]) continue;
        std::string_view w = s.unit_text(k);
        while (!w.empty() && std::isspace(static_cast<unsigned char>(w.front()))) w.remove_prefix(1);
        while (!w.empty() && std::isspace(static_cast<unsigned char>(w.back()))) w.remove_suffix(1);
        const auto letters = std::count_if(w.begin(), w.end(), [](char ch) {
          return static_cast<unsigned char>(ch) >= 0x80 || std::isalpha(static_cast<unsigned char>(ch));
        });
        if (letters >= 2 && before.find(w) == std::string_view::npos) {
          ++novel;
          break;
        }
      }
      const std::vector<int64_t> numbers = numbers_in(
          std::string_view(s.text).substr(s.unit_begin(from), s.unit_begin(from + near.period) - s.unit_begin(from)));
      if (numbers.size() == last_numbers.size())
        for (size_t i = 0; i < numbers.size(); ++i)
          if (numbers[i] != last_numbers[i]) deltas.push_back(numbers[i] - last_numbers[i]);
      last_numbers = numbers;
    }
    if (copies > 0 && 2 * novel >= copies) return true;
    if (deltas.size() < static_cast<size_t>(copies / 2) || deltas.empty()) return false;
    std::sort(deltas.begin(), deltas.end());
    size_t most = 0;
    for (size_t i = 0, j = 0; i < deltas.size(); i = j) {
      while (j < deltas.size() && deltas[j] == deltas[i]) ++j;
      most = std::max(most, j - i);
    }
    return 4 * most < 3 * deltas.size();  // no one step for three copies in four
  }

  // The integers written in a text (runs of up to 18 digits).
  static std::vector<int64_t> numbers_in(std::string_view text) {
    std::vector<int64_t> out;
    for (size_t i = 0; i < text.size();) {
      if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
        ++i;
        continue;
      }
      int64_t v = 0;
      size_t n = 0;
      for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++n)
        if (n < 18) v = v * 10 + (text[i] - '0');
      out.push_back(v);
    }
    return out;
  }

  std::optional<Finding> as_words(GuardState& s) {
    if (s.config.near_words_max <= 0) return std::nullopt;
    const WordLoop w = words_.check(s.text);
    if (w.unit_words == 0) return std::nullopt;
    const int64_t a = s.unit_at_byte(w.onset_byte), b = s.unit_at_byte(w.second_byte), c = s.unit_at_byte(w.third_byte);
    const auto& t = s.periods.tokens();
    const int64_t p = c - b;
    if (p <= 0 || a >= b) return std::nullopt;
    // Exact in tokens so far: the exact detector's.
    if (b - a == p && c + p <= s.n && std::equal(t.begin() + a, t.begin() + c, t.begin() + b)) return std::nullopt;
    return Finding{a,
                   w.similarity,
                   {{"rule", "words"},
                    {"period", p},
                    {"unit_words", w.unit_words},
                    {"similarity", w.similarity},
                    {"distinct", w.distinct},
                    {"novel", w.novel}},
                   s.n - a};
  }

  const DetectorInfo& info_;
  WordCopies words_;
};

}  // namespace coda::detectors
