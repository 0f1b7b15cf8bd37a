// Word lookup in a Hunspell dictionary (the .aff and .dic files Debian's hunspell-* packages
// install), for the invented-words detector: is this word a form of the language? Implemented from
// the format as hunspell(5) describes it: a stem list with affix flags, and prefix and suffix rules
// (strip, add, condition), applied once each (cross product allowed), plus a second suffix where a
// suffix rule carries flags of its own. Compounds are accepted for dictionaries that declare free
// compounding (COMPOUNDFLAG or COMPOUNDBEGIN: German's), when the word splits into two known words
// of 4 bytes or more. Not implemented (the detector only needs
// "known or not"): morphology, suggestions, case and forbidden-word rules, conversions.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace coda {

class Dictionary {
 public:
  // Reads NAME.aff and NAME.dic.
  static Expected<std::shared_ptr<const Dictionary>> load(const std::string& aff_path, const std::string& dic_path);
  // The dictionary of a guard language ("en", "it", "fr", "de", "es", "pt") from `dir` (en_US, it_IT,
  // fr_FR or fr, de_DE, es_ES, pt_PT or pt_BR), loaded once per process; null (and `why`) when none.
  static std::shared_ptr<const Dictionary> for_language(const std::string& dir, const std::string& lang,
                                                        std::string* why = nullptr);

  // The word (lower case, as it would appear in running text) is a form the dictionary knows.
  bool known(std::string_view word) const;
  size_t stems() const { return words_.size(); }

 private:
  struct Affix {
    uint32_t flag = 0;
    bool cross = false;
    std::string strip, add;
    std::vector<uint32_t> cont;  // flags the affixed form carries (a second suffix)
    // The condition, one entry per character position: the characters allowed (or, negated, refused).
    struct Cond {
      bool any = false, negate = false;
      std::u32string chars;
    };
    std::vector<Cond> cond;
  };
  std::vector<uint32_t> parse_flags(std::string_view s) const;
  bool stem_has(std::string_view stem, uint32_t flag) const;
  bool stem_has_any(std::string_view stem) const;
  static bool cond_holds(const Affix& a, std::string_view stem, bool at_end);
  bool known_one(std::string_view word) const;
  bool suffixed(std::string_view word, uint32_t need_cont, const Affix* prefix) const;
  bool suffixed_by(std::string_view word, const std::vector<uint32_t>& rules, uint32_t need_cont,
                   const Affix* prefix) const;

  enum class FlagMode { Char, Long, Num, Utf8 } mode_ = FlagMode::Char;
  std::unordered_map<std::string, std::vector<uint32_t>> words_;
  std::vector<std::vector<uint32_t>> aliases_;  // AF
  std::vector<Affix> prefixes_, suffixes_;
  std::array<std::vector<uint32_t>, 257> sfx_by_last_;               // suffixes by their last byte (256: none added)
  std::unordered_map<uint32_t, std::vector<uint32_t>> sfx_by_cont_;  // suffixes carrying a flag
  uint32_t need_affix_ = 0, only_in_compound_ = 0, forbidden_ = 0;
  bool compounds_ = false;
};

}  // namespace coda
