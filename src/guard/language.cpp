#include "guard/language.h"

#include <algorithm>
#include <unordered_set>

namespace coda {

namespace {

const std::unordered_set<std::string>& english_words() {
  static const std::unordered_set<std::string> w = {
      "the",  "and", "of",  "to",    "in",   "is",   "that",  "it",    "was",  "for",  "he",   "his",
      "with", "be",  "not", "shall", "unto", "they", "you",   "are",   "but",  "have", "this", "my",
      "them", "him", "all", "which", "will", "from", "there", "their", "were", "what", "when", "your"};
  return w;
}

const std::unordered_set<std::string>& italian_words() {
  static const std::unordered_set<std::string> w = {
      "il",  "la",    "di",  "che",   "e",      "\xc3\xa8", "per",        "non", "un", "una", "del",   "della",
      "le",  "gli",   "si",  "con",   "sono",   "ma",       "pi\xc3\xb9", "mi",  "ti", "ci",  "al",    "alla",
      "nel", "nella", "dei", "delle", "questo", "quando",   "anche",      "se",  "io", "ha",  "hanno", "sei"};
  return w;
}

uint32_t decode(const std::string& s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + len > s.size()) len = 1;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return cp >= 0xC0 && cp != 0xD7 && cp != 0xF7 && !(cp >= 0x2000 && cp <= 0x2BFF) && !(cp >= 0x3000 && cp <= 0x303F) &&
         !(cp >= 0xFE00 && cp <= 0xFFFF);
}

}  // namespace

LanguageProfile language_profile(const std::string& text) {
  LanguageProfile p;
  std::string word;
  auto end_word = [&] {
    if (word.empty()) return;
    if (english_words().count(word)) ++p.en_words;
    if (italian_words().count(word)) ++p.it_words;
    word.clear();
  };
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const uint32_t cp = decode(text, i);
    if (!is_letter(cp)) {
      end_word();
      continue;
    }
    ++p.letters;
    if (cp < 0x250 || (cp >= 0x1E00 && cp < 0x1F00)) {
      ++p.latin;
    } else if (cp >= 0x370 && cp < 0x400) {
      ++p.greek;
    } else if (cp >= 0x400 && cp < 0x530) {
      ++p.cyrillic;
    } else if (cp >= 0x600 && cp < 0x700) {
      ++p.arabic;
    } else if ((cp >= 0x3040 && cp < 0xA000) || (cp >= 0xAC00 && cp < 0xD7B0)) {
      ++p.cjk;
    } else {
      ++p.other;
    }
    if (cp < 0x80) {
      word += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    } else if (cp == 0xC8) {  // È -> è
      word += "\xc3\xa8";
    } else {
      word += text.substr(start, i - start);
    }
  }
  end_word();
  return p;
}

std::string LanguageProfile::language(int64_t min_words, double min_lead) const {
  const int64_t total = en_words + it_words;
  if (total < min_words) return "";
  const double lead = static_cast<double>(std::max(en_words, it_words) - std::min(en_words, it_words)) / total;
  if (lead < min_lead) return "";
  return en_words > it_words ? "en" : "it";
}

std::string LanguageProfile::script() const {
  if (letters == 0) return "";
  const std::pair<int64_t, const char*> all[] = {{latin, "latin"}, {greek, "greek"},   {cyrillic, "cyrillic"},
                                                 {cjk, "cjk"},     {arabic, "arabic"}, {other, "other"}};
  return std::max_element(std::begin(all), std::end(all))->second;
}

double LanguageProfile::script_share() const {
  if (letters == 0) return 0;
  return static_cast<double>(std::max({latin, greek, cyrillic, cjk, arabic, other})) / static_cast<double>(letters);
}

}  // namespace coda
