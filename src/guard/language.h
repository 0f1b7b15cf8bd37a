// A cheap script and language profile of a text, to notice a generation drifting away from the
// prompt's language (Italian prompt, English continuation; Latin script, then Cyrillic).
//
// Scripts are counted per letter from the code point ranges. Languages are told apart by function
// words (en: the, and, of, to, ...; it: il, di, che, è, ...), excluding words both languages use
// ("a", "i", "me", "lo", "come"). Supports the languages of the bundled model (English, Italian);
// other Latin-script text has no language and only the script is compared.
#pragma once

#include <cstdint>
#include <string>

namespace coda {

struct LanguageProfile {
  int64_t letters = 0;
  int64_t latin = 0, greek = 0, cyrillic = 0, cjk = 0, arabic = 0, other = 0;
  int64_t en_words = 0, it_words = 0;

  // "en", "it" or "" when fewer than `min_words` function words decide it or neither leads by
  // `min_lead` (a share of the function words).
  std::string language(int64_t min_words = 6, double min_lead = 0.5) const;
  // The script of most letters ("latin", "cyrillic", ...), "" without letters.
  std::string script() const;
  double script_share() const;  // the dominant script's share of letters
};

LanguageProfile language_profile(const std::string& text);

}  // namespace coda
