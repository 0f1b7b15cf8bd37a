#include "guard/language.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace coda {

namespace {

struct WordRow {
  const char* lang;
  const char* word;
  double log_freq;
};

const WordRow kWords[] = {
#include "guard/language_words.inc"
};

// word -> log frequency per language; a language whose list lacks the word gets a floor one nat
// below the rarest word of its list (the word is rarer there than anything the list holds).
struct WordTable {
  std::unordered_map<std::string, std::array<double, LanguageProfile::kLanguages>> words;
  WordTable() {
    std::array<double, LanguageProfile::kLanguages> floor{};
    floor.fill(0);
    for (const auto& r : kWords) {
      const int l = guard_language_index(r.lang);
      if (l >= 0) floor[static_cast<size_t>(l)] = std::min(floor[static_cast<size_t>(l)], r.log_freq - 1.0);
    }
    for (const auto& r : kWords) {
      const int l = guard_language_index(r.lang);
      if (l < 0) continue;
      auto [it, fresh] = words.try_emplace(r.word, floor);
      it->second[static_cast<size_t>(l)] = r.log_freq;
    }
  }
};

const WordTable& word_table() {
  static const WordTable t;
  return t;
}

void lower_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  if ((cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) cp += 0x20;  // Latin-1 capitals: È -> è
  if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

const std::vector<std::string>& guard_languages() {
  static const std::vector<std::string> l = {"en", "it", "fr", "de", "es", "pt"};
  return l;
}

int guard_language_index(std::string_view code) {
  const auto& l = guard_languages();
  for (size_t i = 0; i < l.size(); ++i)
    if (l[i] == code) return static_cast<int>(i);
  return -1;
}

const char* script_name(int script) {
  static const char* const names[kScripts] = {"latin", "greek", "cyrillic", "arabic", "hebrew",
                                              "indic", "thai",  "cjk",      "other"};
  return script >= 0 && script < kScripts ? names[script] : "";
}

int script_of(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ? 0 : -1;
  if (cp < 0xC0 || cp == 0xD7 || cp == 0xF7) return -1;
  // Latin: Latin-1, Extended-A/B, IPA (ɛ, ɔ of West African orthographies), Extended Additional,
  // -C, -D and -E.
  if (cp < 0x2B0 || (cp >= 0x1E00 && cp < 0x1F00) || (cp >= 0x2C60 && cp < 0x2C80) || (cp >= 0xA720 && cp < 0xA800) ||
      (cp >= 0xAB30 && cp < 0xAB70))
    return 0;
  if (cp >= 0x2B0 && cp < 0x370) return -1;  // modifiers and combining marks
  if (cp >= 0x370 && cp < 0x400) return 1;
  if ((cp >= 0x1F00 && cp < 0x2000)) return 1;
  if (cp >= 0x400 && cp < 0x530) return 2;
  if (cp >= 0x590 && cp < 0x600) return 4;
  if ((cp >= 0x600 && cp < 0x700) || (cp >= 0x750 && cp < 0x780)) return 3;
  if (cp >= 0x900 && cp < 0xE00) return 5;
  if (cp >= 0xE00 && cp < 0xE80) return 6;
  if (cp >= 0x2000 && cp < 0x2C00) return -1;  // punctuation, symbols, arrows, box drawing
  if (cp >= 0x2E00 && cp < 0x2E80) return -1;  // supplemental punctuation
  if (cp >= 0x2E80 && cp < 0x3000) return 7;   // CJK radicals
  if (cp >= 0x3000 && cp < 0x3040) return -1;  // CJK punctuation
  if ((cp >= 0x3040 && cp < 0xA000) || (cp >= 0xAC00 && cp < 0xD7B0) || (cp >= 0xF900 && cp < 0xFB00) ||
      (cp >= 0x20000 && cp < 0x30000))
    return 7;
  if (cp >= 0xFE00 && cp < 0x10000) return cp >= 0xFF21 && cp < 0xFF5B ? 0 : -1;  // fullwidth Latin letters
  if (cp >= 0x1F000) return -1;                                                   // emoji and symbols
  return 8;
}

uint32_t utf8_next(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + len > s.size()) len = 1;
  for (size_t k = 1; k < len; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) len = 1;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

LanguageProfile language_profile(std::string_view text) {
  LanguageProfile p;
  const auto& table = word_table().words;
  std::string word;
  int64_t word_letters = 0;
  auto vote = [&](const std::string& w, int64_t letters) {
    // One-letter words vote ("a", "e", "y", "o" are function words) but do not make prose: a
    // table's codes and escapes are full of single letters.
    p.words += letters > 1;
    const auto it = table.find(w);
    if (it == table.end()) return;
    ++p.known_words;
    p.known_long += letters > 1;
    for (size_t l = 0; l < p.score.size(); ++l) p.score[l] += it->second[l];
  };
  auto end_word = [&] {
    if (word.empty()) return;
    vote(word, word_letters);
    word.clear();
    word_letters = 0;
  };
  for (size_t i = 0; i < text.size();) {
    const uint32_t cp = utf8_next(text, i);
    const int script = script_of(cp);
    if (script < 0) {
      // An elision ends in its apostrophe: l'objet is "l'" and "objet", as the lists count them.
      if ((cp == '\'' || cp == 0x2019) && !word.empty()) {
        word += '\'';
        end_word();
        continue;
      }
      end_word();
      continue;
    }
    ++p.letters;
    ++p.script_letters[static_cast<size_t>(script)];
    ++word_letters;
    lower_utf8(cp, word);
  }
  end_word();
  return p;
}

double LanguageProfile::margin() const {
  if (known_words == 0) return 0;
  std::array<double, kLanguages> s = score;
  std::sort(s.begin(), s.end(), std::greater<>());
  return (s[0] - s[1]) / static_cast<double>(known_words);
}

std::string LanguageProfile::language(int64_t min_words, double min_margin) const {
  if (known_words < min_words || margin() < min_margin) return "";
  const auto best = std::max_element(score.begin(), score.end()) - score.begin();
  return guard_languages()[static_cast<size_t>(best)];
}

std::string LanguageProfile::script() const {
  if (letters == 0) return "";
  return script_name(
      static_cast<int>(std::max_element(script_letters.begin(), script_letters.end()) - script_letters.begin()));
}

double LanguageProfile::script_share() const {
  if (letters == 0) return 0;
  return static_cast<double>(*std::max_element(script_letters.begin(), script_letters.end())) /
         static_cast<double>(letters);
}

}  // namespace coda
