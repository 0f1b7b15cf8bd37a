// A cheap script and language profile of a text, to notice a generation drifting away from its
// language (French prompt, English continuation; Latin script, then Cyrillic) or mixing in letters
// of another script.
//
// Scripts are counted per letter from the code point ranges. Languages (English, Italian, French,
// German, Spanish, Portuguese) are told apart by their most frequent words, counted in the Debian
// Reference in each language (language_words.inc, built by bench/build_language_words.py): each
// known word adds its log frequency in each language (a floor where a language's list lacks it),
// and a language is decided when enough words are known and it leads the next one by a margin per
// word. Words no list knows (names, commands, numbers) do not vote.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace coda {

// The languages the guard knows, in a fixed order ("en", "it", "fr", "de", "es", "pt").
const std::vector<std::string>& guard_languages();
// The index of a language code in guard_languages() (-1: not one of them).
int guard_language_index(std::string_view code);

// Scripts, in a fixed order: latin, greek, cyrillic, arabic, hebrew, indic (Devanagari .. Sinhala),
// thai, cjk (Han, kana, Hangul), other.
constexpr int kScripts = 9;
const char* script_name(int script);
// The script of a letter's code point (-1: not a letter).
int script_of(uint32_t cp);

struct LanguageProfile {
  static constexpr int kLanguages = 6;
  int64_t letters = 0;
  std::array<int64_t, kScripts> script_letters{};
  int64_t words = 0;                       // words of two letters or more
  int64_t known_words = 0;                 // words at least one language's list holds
  int64_t known_long = 0;                  // ... of two letters or more
  std::array<double, kLanguages> score{};  // summed log frequencies

  // The language the known words point to: "" when fewer than `min_words` are known or the leader
  // is ahead of the next language by less than `min_margin` (nats per known word).
  std::string language(int64_t min_words = 6, double min_margin = 0.5) const;
  // The leader's margin over the next language, per known word (0 without known words).
  double margin() const;
  // Known words per word: running prose is 0.3-0.6, a table, a log or a list of names far less.
  double prose_share() const { return words ? static_cast<double>(known_long) / static_cast<double>(words) : 0; }
  // The script of most letters ("latin", "cyrillic", ...), "" without letters.
  std::string script() const;
  double script_share() const;  // the dominant script's share of letters
};

LanguageProfile language_profile(std::string_view text);

// One UTF-8 code point from s at i (a stray byte is returned as itself); advances i.
uint32_t utf8_next(std::string_view s, size_t& i);

}  // namespace coda
