// Invented words from text alone: fragmented text of plausible pseudo-words, which only the logits'
// surprisal showed before. Every 16 tokens, the last invented_window_words words of running prose in
// the reference language are looked up in its Hunspell dictionary (guard/dictionary.h), inflected
// forms included (words of 4 letters or more); more than invented_max_unknown of them unknown
// (distinct words; to its dictionary, English's and that of the language the window leans to) is an
// episode. Only lower-case
// words of letters count: names, sentence starts, identifiers (snake_case, dotted.names, words next
// to digits or code punctuation) and words with an apostrophe are left out, as technical prose is
// full of them. Quiet without a reference language or a dictionary for it.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <unordered_map>

#include "guard/detector.h"
#include "guard/detectors/window.h"
#include "guard/dictionary.h"
#include "guard/guard.h"
#include "guard/language.h"

namespace coda::detectors {

// The line holding byte `at` is a table's or code's: a tab, or a run of two blanks after its first
// visible character (columns), or a shell prompt ("# ", "$ ") at its start.
inline bool tabular_line(std::string_view text, size_t at) {
  const size_t nl = at == 0 ? std::string_view::npos : text.rfind('\n', at - 1);
  const size_t begin = nl == std::string_view::npos ? 0 : nl + 1;
  size_t end = text.find('\n', at);
  if (end == std::string_view::npos) end = text.size();
  const std::string_view line = text.substr(begin, end - begin);
  const size_t first = line.find_first_not_of(' ');
  if (first == std::string_view::npos) return false;
  if (line.find('\t') != std::string_view::npos || line.find("  ", first) != std::string_view::npos) return true;
  return line.size() > first + 1 && (line[first] == '#' || line[first] == '$') && line[first + 1] == ' ';
}

// The words of `text` that count as running prose (see above), with their byte offsets.
inline std::vector<std::pair<std::string, size_t>> prose_words(std::string_view text) {
  std::vector<std::pair<std::string, size_t>> out;
  auto code_char = [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) ||
           std::string_view("_/\\=<>@#$%&*`{}[]|~^+'").find(c) != std::string_view::npos;
  };
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    size_t k = i;
    const uint32_t cp = utf8_next(text, k);
    if (script_of(cp) != 0) {
      i = k;
      continue;
    }
    size_t end = k;
    bool upper = cp < 0x80 ? std::isupper(static_cast<int>(cp)) != 0 : (cp >= 0xC0 && cp <= 0xDE);
    bool latin = true;
    while (end < text.size()) {
      size_t next = end;
      const uint32_t c = utf8_next(text, next);
      const int script = script_of(c);
      if (script < 0) break;
      latin = latin && script == 0;
      end = next;
    }
    i = end;
    if (tabular_line(text, start)) continue;
    const char before = start > 0 ? text[start - 1] : ' ';
    const char after = end < text.size() ? text[end] : ' ';
    // Code across a blank: "name = value", "name (args)" are identifiers, not words.
    size_t a = end;
    while (a < text.size() && text[a] == ' ') ++a;
    size_t b = start;
    while (b > 0 && text[b - 1] == ' ') --b;
    if ((a < text.size() && (text[a] == '=' || text[a] == '(')) || (b > 0 && text[b - 1] == '=')) continue;
    const bool dotted = (after == '.' || after == '-') && end + 1 < text.size() &&
                        std::isalnum(static_cast<unsigned char>(text[end + 1]));
    const bool joined =
        (before == '.' || before == '-') && start >= 2 && std::isalnum(static_cast<unsigned char>(text[start - 2]));
    if (upper || !latin || end - start < 4 || code_char(before) || code_char(after) || dotted || joined) continue;
    std::string w(text.substr(start, end - start));
    bool has_upper = false;
    for (char c : w) has_upper = has_upper || std::isupper(static_cast<unsigned char>(c));
    if (!has_upper) out.emplace_back(std::move(w), start);
  }
  return out;
}

class InventedWords : public Detector {
 public:
  explicit InventedWords(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    if (c.invented_window_words <= 0 || s.n % 16 != 0 || s.language.empty()) return std::nullopt;
    const size_t window_bytes = static_cast<size_t>(c.invented_window_words) * 14;
    const std::string window = last_bytes(s.text, window_bytes);
    const LanguageProfile profile = language_profile(window);
    if (profile.prose_share() < c.invented_min_prose) return std::nullopt;  // a list, a table
    // Words are judged in the reference language, in English (which technical prose everywhere
    // borrows from), and in the two languages the window's function words point to most (a page
    // that moves from English to French is drift's to judge, not invented words').
    std::string window_langs;
    if (profile.known_words >= 4) {
      std::array<size_t, LanguageProfile::kLanguages> order{};
      for (size_t k = 0; k < order.size(); ++k) order[k] = k;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return profile.score[a] > profile.score[b]; });
      window_langs = guard_languages()[order[0]] + "," + guard_languages()[order[1]];
    }
    if (s.language != lang_ || window_langs != window_langs_) {
      lang_ = s.language;
      window_langs_ = window_langs;
      known_.clear();
      dicts_.clear();
      std::vector<std::string> langs = {lang_, "en"};
      if (!window_langs.empty()) {
        langs.push_back(window_langs.substr(0, 2));
        langs.push_back(window_langs.substr(3, 2));
      }
      english_ = Dictionary::for_language(c.dictionary_dir, "en");
      for (const std::string& l : langs)
        if (auto d = Dictionary::for_language(c.dictionary_dir, l))
          if (std::find(dicts_.begin(), dicts_.end(), d) == dicts_.end()) dicts_.push_back(std::move(d));
    }
    if (!Dictionary::for_language(c.dictionary_dir, lang_)) return std::nullopt;
    auto words = prose_words(window);
    if (static_cast<int>(words.size()) < c.invented_window_words / 2) return std::nullopt;
    if (static_cast<int>(words.size()) > c.invented_window_words)
      words.erase(words.begin(), words.end() - c.invented_window_words);
    // Distinct unknown words: an identifier the text keeps using counts once, and so does a family
    // of names that share their first four letters (perlsyn, perldata, perlop).
    int unknown = 0;
    std::vector<std::string> examples;
    std::unordered_map<std::string_view, bool> counted;  // by the first four bytes
    for (const auto& [w, at] : words) {
      auto it = known_.find(w);
      if (it == known_.end()) {
        if (known_.size() > 50000) known_.clear();
        it = known_.emplace(w, known_word(w)).first;
      }
      if (!it->second && counted.emplace(std::string_view(it->first).substr(0, 4), true).second) {
        ++unknown;
        if (examples.size() < 8) examples.push_back(w);
      }
    }
    const double share = static_cast<double>(unknown) / static_cast<double>(words.size());
    if (share <= c.invented_max_unknown) return std::nullopt;
    return Finding{s.unit_at_byte(s.text.size() - window.size() + words.front().second),
                   std::min(1.0, share),
                   {{"language", lang_},
                    {"unknown_share", share},
                    {"words", static_cast<int64_t>(words.size())},
                    {"examples", examples}},
                   64};
  }

 private:
  const DetectorInfo& info_;
  // A word any of the dictionaries knows, or an identifier built on an English one: an option letter
  // or two, or a command's prefix, before an English word of 4 letters or more (wwidth, psselect).
  bool known_word(std::string_view w) const {
    auto in_any = [&](std::string_view x) {
      for (const auto& d : dicts_)
        if (d->known(x)) return true;
      return false;
    };
    if (in_any(w)) return true;
    // Identifiers are built on English words (width, paper, select, domain): a real word of another
    // language inside a pseudo-word ("fr|andavano", "p|angolo") is not one.
    if (!english_) return false;
    for (size_t cut = 1; cut <= 2 && cut + 4 <= w.size(); ++cut)
      if (english_->known(w.substr(cut))) return true;
    return false;
  }

  std::string lang_;
  std::string window_langs_;                              // "fr,it": the window's two leading languages
  std::vector<std::shared_ptr<const Dictionary>> dicts_;  // the dictionaries a word is looked up in
  std::shared_ptr<const Dictionary> english_;             // what identifiers are built on
  std::unordered_map<std::string, bool> known_;           // lookups so far
};

}  // namespace coda::detectors
