#include "guard/dictionary.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "guard/language.h"

namespace coda {

namespace {

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) out.push_back(utf8_next(s, i));
  return out;
}

bool ends_with(std::string_view s, std::string_view end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

bool starts_with(std::string_view s, std::string_view begin) {
  return s.size() >= begin.size() && s.compare(0, begin.size(), begin) == 0;
}

std::vector<std::string> fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string f; in >> f;) out.push_back(f);
  return out;
}

// The first letter in upper case (ASCII and Latin-1), for stems a dictionary keeps capitalised.
std::string capitalised(std::string_view w) {
  std::string out(w);
  if (out.empty()) return out;
  const auto c = static_cast<unsigned char>(out[0]);
  if (c >= 'a' && c <= 'z') {
    out[0] = static_cast<char>(c - 32);
  } else if (c == 0xC3 && out.size() > 1) {
    const auto d = static_cast<unsigned char>(out[1]);
    if (d >= 0xA0 && d <= 0xBE && d != 0xB7) out[1] = static_cast<char>(d - 0x20);
  }
  return out;
}

}  // namespace

std::vector<uint32_t> Dictionary::parse_flags(std::string_view s) const {
  std::vector<uint32_t> out;
  if (!aliases_.empty() && !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    // An alias number; a hostile file's 40-digit one is simply out of range (no exception).
    size_t k = 0;
    for (char c : s) {
      k = k * 10 + static_cast<size_t>(c - '0');
      if (k > aliases_.size()) return out;
    }
    if (k >= 1) return aliases_[k - 1];
    return out;
  }
  switch (mode_) {
    case FlagMode::Char:
      for (char c : s) out.push_back(static_cast<unsigned char>(c));
      break;
    case FlagMode::Long:
      for (size_t i = 0; i + 1 < s.size(); i += 2)
        out.push_back((static_cast<uint32_t>(static_cast<unsigned char>(s[i])) << 8) |
                      static_cast<unsigned char>(s[i + 1]));
      break;
    case FlagMode::Num: {
      uint32_t v = 0;
      bool any = false;
      for (char c : s) {
        if (c >= '0' && c <= '9') {
          v = v * 10 + static_cast<uint32_t>(c - '0');
          any = true;
        } else if (any) {
          out.push_back(v);
          v = 0;
          any = false;
        }
      }
      if (any) out.push_back(v);
      break;
    }
    case FlagMode::Utf8:
      for (size_t i = 0; i < s.size();) out.push_back(utf8_next(s, i));
      break;
  }
  return out;
}

Expected<std::shared_ptr<const Dictionary>> Dictionary::load(const std::string& aff_path, const std::string& dic_path) {
  std::ifstream aff(aff_path), dic(dic_path);
  if (!aff) return Error("cannot read " + aff_path);
  if (!dic) return Error("cannot read " + dic_path);
  auto d = std::make_shared<Dictionary>();
  std::string line;
  std::map<std::pair<bool, uint32_t>, bool> cross;  // (prefix?, flag) -> cross product
  while (std::getline(aff, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto f = fields(line);
    if (f.empty() || f[0][0] == '#') continue;
    const std::string& key = f[0];
    if (key == "FLAG" && f.size() > 1) {
      d->mode_ = f[1] == "long"    ? FlagMode::Long
                 : f[1] == "num"   ? FlagMode::Num
                 : f[1] == "UTF-8" ? FlagMode::Utf8
                                   : FlagMode::Char;
    } else if (key == "AF" && f.size() > 1) {
      if (!std::all_of(f[1].begin(), f[1].end(), [](char c) { return c >= '0' && c <= '9'; }))
        d->aliases_.push_back(d->parse_flags(f[1]));
    } else if (key == "COMPOUNDFLAG" || key == "COMPOUNDBEGIN") {
      d->compounds_ = true;  // free compounding, as German's (COMPOUNDRULE alone is for numbers: 1st, 22nd)
    } else if ((key == "NEEDAFFIX" || key == "PSEUDOROOT") && f.size() > 1) {
      d->need_affix_ = d->parse_flags(f[1]).empty() ? 0 : d->parse_flags(f[1])[0];
    } else if (key == "ONLYINCOMPOUND" && f.size() > 1) {
      d->only_in_compound_ = d->parse_flags(f[1]).empty() ? 0 : d->parse_flags(f[1])[0];
    } else if (key == "FORBIDDENWORD" && f.size() > 1) {
      d->forbidden_ = d->parse_flags(f[1]).empty() ? 0 : d->parse_flags(f[1])[0];
    } else if ((key == "PFX" || key == "SFX") && f.size() >= 4) {
      const bool prefix = key == "PFX";
      const std::vector<uint32_t> flag = d->parse_flags(f[1]);
      if (flag.empty()) continue;
      if (f.size() == 4 && (f[2] == "Y" || f[2] == "N")) {  // the header: flag, cross product, count
        cross[{prefix, flag[0]}] = f[2] == "Y";
        continue;
      }
      Affix a;
      a.flag = flag[0];
      a.cross = cross[{prefix, flag[0]}];
      a.strip = f[2] == "0" ? "" : f[2];
      std::string add = f[3];
      if (const size_t slash = add.find('/'); slash != std::string::npos) {
        a.cont = d->parse_flags(std::string_view(add).substr(slash + 1));
        add.resize(slash);
      }
      a.add = add == "0" ? "" : add;
      const std::u32string cond = to_u32(f.size() > 4 ? f[4] : ".");
      for (size_t i = 0; i < cond.size(); ++i) {
        Affix::Cond c;
        if (cond[i] == U'.') {
          c.any = true;
        } else if (cond[i] == U'[') {
          size_t j = i + 1;
          if (j < cond.size() && cond[j] == U'^') c.negate = true, ++j;
          for (; j < cond.size() && cond[j] != U']'; ++j) c.chars.push_back(cond[j]);
          i = j;
        } else {
          c.chars.push_back(cond[i]);
        }
        a.cond.push_back(std::move(c));
      }
      (prefix ? d->prefixes_ : d->suffixes_).push_back(std::move(a));
    }
  }
  bool first = true;
  while (std::getline(dic, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (first) {  // the entry count
      first = false;
      if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0]))) continue;
    }
    if (line.empty() || line[0] == '/' || line[0] == '\t' || line[0] == '#') continue;
    // word[/flags][ morphology]; a slash escaped as "\/" belongs to the word.
    size_t end = line.find_first_of(" \t");
    std::string entry = line.substr(0, end);
    size_t slash = std::string::npos;
    for (size_t i = 0; i < entry.size(); ++i)
      if (entry[i] == '/' && (i == 0 || entry[i - 1] != '\\')) {
        slash = i;
        break;
      }
    std::string word = entry.substr(0, slash);
    std::vector<uint32_t> flags = slash == std::string::npos
                                      ? std::vector<uint32_t>{}
                                      : d->parse_flags(std::string_view(entry).substr(slash + 1));
    auto& slot = d->words_[word];
    slot.insert(slot.end(), flags.begin(), flags.end());
    if (flags.empty()) slot.push_back(0);  // known without affixes
  }
  for (uint32_t k = 0; k < d->suffixes_.size(); ++k) {
    const Affix& a = d->suffixes_[k];
    d->sfx_by_last_[a.add.empty() ? 256 : static_cast<unsigned char>(a.add.back())].push_back(k);
    for (uint32_t f : a.cont) d->sfx_by_cont_[f].push_back(k);
  }
  return std::shared_ptr<const Dictionary>(std::move(d));
}

std::shared_ptr<const Dictionary> Dictionary::for_language(const std::string& dir, const std::string& lang,
                                                           std::string* why) {
  static std::mutex mu;
  static std::map<std::string, std::pair<std::shared_ptr<const Dictionary>, std::string>> cache;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = dir + "\n" + lang;
  if (auto it = cache.find(key); it != cache.end()) {
    if (why) *why = it->second.second;
    return it->second.first;
  }
  static const std::map<std::string, std::vector<std::string>> names = {
      {"en", {"en_US", "en_GB"}}, {"it", {"it_IT"}},          {"fr", {"fr_FR", "fr"}},
      {"de", {"de_DE", "de_AT"}}, {"es", {"es_ES", "es_MX"}}, {"pt", {"pt_PT", "pt_BR"}}};
  std::shared_ptr<const Dictionary> found;
  std::string error = "no dictionary for '" + lang + "' in " + dir;
  if (auto n = names.find(lang); n != names.end()) {
    for (const std::string& name : n->second) {
      auto d = load(dir + "/" + name + ".aff", dir + "/" + name + ".dic");
      if (d) {
        found = *d;
        error.clear();
        break;
      }
    }
  }
  if (!found && names.count(lang)) {
    static const std::map<std::string, std::string> packages = {{"en", "hunspell-en-us"}, {"it", "hunspell-it"},
                                                                {"fr", "hunspell-fr"},    {"de", "hunspell-de-de"},
                                                                {"es", "hunspell-es"},    {"pt", "hunspell-pt-pt"}};
    error += " (install " + packages.at(lang) + ")";
  }
  cache[key] = {found, error};
  if (why) *why = error;
  return found;
}

bool Dictionary::cond_holds(const Affix& a, std::string_view stem, bool at_end) {
  if (a.cond.empty() || (a.cond.size() == 1 && a.cond[0].any)) return true;
  const std::u32string s = to_u32(stem);
  if (s.size() < a.cond.size()) return false;
  const size_t base = at_end ? s.size() - a.cond.size() : 0;
  for (size_t i = 0; i < a.cond.size(); ++i) {
    const Affix::Cond& c = a.cond[i];
    if (c.any) continue;
    const bool in = c.chars.find(s[base + i]) != std::u32string::npos;
    if (in == c.negate) return false;
  }
  return true;
}

bool Dictionary::stem_has(std::string_view stem, uint32_t flag) const {
  const auto it = words_.find(std::string(stem));
  return it != words_.end() && std::find(it->second.begin(), it->second.end(), flag) != it->second.end();
}

bool Dictionary::stem_has_any(std::string_view stem) const {
  const auto it = words_.find(std::string(stem));
  if (it == words_.end()) return false;
  for (uint32_t f : it->second)
    if (f != 0 && (f == need_affix_ || f == only_in_compound_ || f == forbidden_)) return false;
  return true;
}

// A suffix (and, through its flags, a second one) from a stem; `prefix`: a prefix already taken off,
// which the suffix must cross with; `need_cont`: the outer suffix's flag an inner one must carry.
bool Dictionary::suffixed(std::string_view word, uint32_t need_cont, const Affix* prefix) const {
  if (need_cont) {
    const auto it = sfx_by_cont_.find(need_cont);
    return it != sfx_by_cont_.end() && suffixed_by(word, it->second, need_cont, prefix);
  }
  if (word.empty()) return false;
  return suffixed_by(word, sfx_by_last_[static_cast<unsigned char>(word.back())], 0, prefix) ||
         suffixed_by(word, sfx_by_last_[256], 0, prefix);
}

bool Dictionary::suffixed_by(std::string_view word, const std::vector<uint32_t>& rules, uint32_t need_cont,
                             const Affix* prefix) const {
  for (uint32_t k : rules) {
    const Affix& a = suffixes_[k];
    if (prefix && !(a.cross && prefix->cross)) continue;
    if (!ends_with(word, a.add) || word.size() == a.add.size()) continue;
    std::string stem(word.substr(0, word.size() - a.add.size()));
    stem += a.strip;
    if (!cond_holds(a, stem, true)) continue;
    if (prefix) {
      const std::string full = prefix->strip + stem;
      if (stem_has(full, a.flag) && stem_has(full, prefix->flag)) return true;
      continue;
    }
    if (stem_has(stem, a.flag) || stem_has(capitalised(stem), a.flag)) return true;
    if (!need_cont && suffixed(stem, a.flag, nullptr)) return true;  // a second suffix inside
  }
  return false;
}

bool Dictionary::known_one(std::string_view word) const {
  if (stem_has_any(word)) return true;
  if (suffixed(word, 0, nullptr)) return true;
  for (const Affix& p : prefixes_) {
    if (!starts_with(word, p.add) || word.size() == p.add.size()) continue;
    const std::string stem = p.strip + std::string(word.substr(p.add.size()));
    if (!cond_holds(p, stem, false)) continue;
    if (stem_has(stem, p.flag)) return true;
    if (p.cross && suffixed(word.substr(p.add.size()), 0, &p)) return true;
  }
  return false;
}

bool Dictionary::known(std::string_view word) const {
  if (word.empty()) return false;
  if (known_one(word) || stem_has_any(capitalised(word))) return true;
  if (!compounds_ || word.size() < 8) return false;
  // A compound of two known words (German "zeitabhängig"), with a linking s.
  for (size_t cut = 4; cut + 4 <= word.size(); ++cut) {
    if ((static_cast<unsigned char>(word[cut]) & 0xC0) == 0x80) continue;
    const std::string_view head = word.substr(0, cut), tail = word.substr(cut);
    if (!(known_one(tail) || stem_has_any(capitalised(tail)))) continue;
    if (stem_has_any(head) || stem_has_any(capitalised(head))) return true;
    if (head.size() > 4 && head.back() == 's' &&
        (stem_has_any(head.substr(0, head.size() - 1)) || stem_has_any(capitalised(head.substr(0, head.size() - 1)))))
      return true;
  }
  return false;
}

}  // namespace coda
