// Flooding: one token over and over. Config: flood_min_run (twice that for a number without
// letters: a hex dump's zero bytes); structural_min_span for a flood of a token without a letter
// or digit (a rule of dashes is typography). Within evidence_window tokens
// of a degenerate event, evidence_flood_run tokens or words in a row are enough ("Hectometers
// Hectometers Hectometers Hectometers Hectometers" after a garbage block).
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <tuple>

#include "guard/detector.h"
#include "guard/guard.h"

namespace coda::detectors {

class Flooding : public Detector {
 public:
  explicit Flooding(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    const int64_t flood = s.flood_run();
    // A number without letters repeated between blanks is data more often than a flood: a hex
    // dump's row of 16 zero bytes (" 00 00 00"), a table's column of zeros. It needs twice the run;
    // digits run together ("000000...", a broken engine's output) do not.
    const std::string_view unit = s.unit_text(s.i);
    auto has = [&](auto pred) { return std::any_of(unit.begin(), unit.end(), pred); };
    const bool number = has([](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; }) &&
                        has([](char ch) { return std::isspace(static_cast<unsigned char>(ch)) != 0; }) &&
                        !has([](char ch) {
                          return std::isalpha(static_cast<unsigned char>(ch)) || static_cast<unsigned char>(ch) >= 0x80;
                        });
    const int64_t min_run = number ? 2 * c.flood_min_run : c.flood_min_run;
    if (flood >= min_run && !(flood < c.structural_min_span && s.structural_tail(1)))
      return Finding{s.n - flood,
                     static_cast<double>(flood) / (2.0 * c.flood_min_run),
                     {{"token", s.token}, {"run", flood}},
                     flood};
    // Evidence adds up: right after degenerate text, a short flood is one too.
    const bool degenerate = s.last_degenerate >= 0 && s.i - s.last_degenerate <= c.evidence_window;
    if (!degenerate || c.evidence_flood_run <= 0) return std::nullopt;
    if (flood >= c.evidence_flood_run && !s.structural_tail(1))
      return Finding{s.n - flood, 0.5, {{"token", s.token}, {"run", flood}, {"after", "degenerate"}}, flood};
    const auto [word, run, begin] = word_run(s.text);
    if (run < c.evidence_flood_run) return std::nullopt;
    return Finding{s.unit_at_byte(begin), 0.5, {{"word", word}, {"run", run}, {"after", "degenerate"}}, 16};
  }

  // The word the text ends with (letters or digits, at least 3 bytes) and how many times in a row
  // it was written, separated by blanks; and where the run begins. Reads at most 16 words back.
  static std::tuple<std::string, int64_t, size_t> word_run(std::string_view t) {
    size_t end = t.size();
    while (end > 0 && std::isspace(static_cast<unsigned char>(t[end - 1]))) --end;
    size_t start = t.find_last_of(" \t\n", end == 0 ? 0 : end - 1);
    start = start == std::string_view::npos ? 0 : start + 1;
    const std::string_view word = t.substr(start, end - start);
    if (word.size() < 3) return {"", 0, 0};
    int64_t run = 1;
    size_t begin = start;
    while (run < 16 && begin > 0) {
      size_t e = begin;
      while (e > 0 && std::isspace(static_cast<unsigned char>(t[e - 1]))) --e;
      if (e < word.size() || t.substr(e - word.size(), word.size()) != word) break;
      const size_t b = e - word.size();
      if (b > 0 && !std::isspace(static_cast<unsigned char>(t[b - 1]))) break;
      begin = b;
      ++run;
    }
    return {std::string(word), run, begin};
  }

 private:
  const DetectorInfo& info_;
};

}  // namespace coda::detectors
