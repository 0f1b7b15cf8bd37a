#include "guard/word_copies.h"

#include <algorithm>
#include <cctype>
#include <unordered_set>

namespace coda {

namespace {

bool word_byte(unsigned char c) { return c >= 0x80 || std::isalnum(c) || c == '_'; }

// A word's hash with each run of digits read as one '0': "item7" and "item12" are one word (a
// counter), while "PKCS12_add_friendlyname_asc" and "PKCS12_add_CSPName_asc" stay two.
uint32_t fnv(const std::string& s, size_t from, size_t to) {
  uint32_t h = 2166136261u;
  for (size_t i = from; i < to; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (std::isdigit(c) && i > from && std::isdigit(static_cast<unsigned char>(s[i - 1]))) continue;
    h = (h ^ (std::isdigit(c) ? static_cast<unsigned char>('0') : c)) * 16777619u;
  }
  return h;
}

// Units are as short as this in words (numbers and one-letter words left out) when their copies
// span min_words blank-separated fields: "print('Ignoring "%s" (I think it line 4, is msvccompiler.py
// bug)' % (e))" is 11 fields and 9 words, "-- Julien Cristau <jcristau@debian.org> Fri, 9 Feb 2007
// 12:14:36 +0100" 10 fields and 7 words.
constexpr int kMinCoreWords = 6;

// Long units take long_copies up to this length (GuardConfig::near_words_long says why).
constexpr int64_t kMaxLongWords = 120;

size_t blank_fields(std::string_view text) {
  size_t n = 0;
  for (size_t i = 0; i < text.size(); ++i)
    n += !std::isspace(static_cast<unsigned char>(text[i])) && (i == 0 || std::isspace(static_cast<unsigned char>(text[i - 1])));
  return n;
}

// Blanks that align columns: two or more inside a line, after its first field (a table, a dump,
// aligned comments), not the indentation.
bool column_blanks(std::string_view text) {
  bool in_line = false;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] == '\n') {
      in_line = false;
    } else if (text[i] != ' ' && text[i] != '\t') {
      in_line = true;
    } else if (in_line && (text[i] == '\t' || text[i + 1] == ' ')) {
      return true;
    }
  }
  return false;
}

}  // namespace

void WordCopies::add_word(const std::string& text, size_t from, size_t to) {
  // Numbers (counters, versions, dates) and one-character words carry no identity.
  if (to - from < 2) return;
  bool letter = false;
  for (size_t i = from; i < to; ++i) letter = letter || !std::isdigit(static_cast<unsigned char>(text[i]));
  if (!letter) return;
  words_.push_back(fnv(text, from, to));
  starts_.push_back(from);
  lines_.push_back(newlines_);
  bool lower = true;
  for (size_t i = from; i < to && lower; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    lower = c >= 0x80 || (c >= 'a' && c <= 'z');
  }
  prose_.push_back(lower);
  const size_t w = words_.size() - 1;
  novel_.push_back(seen_.try_emplace(words_[w], static_cast<int64_t>(w)).second);
  if (w < 2) return;
  const uint64_t key = (static_cast<uint64_t>(words_[w - 2]) * 0x100000001B3ULL ^ words_[w - 1]) * 0x100000001B3ULL ^
                       (static_cast<uint64_t>(words_[w]) << 17);
  auto [it, fresh] = last_.try_emplace(key, static_cast<int64_t>(w));
  if (fresh) return;
  const int64_t d = static_cast<int64_t>(w) - it->second;
  it->second = static_cast<int64_t>(w);
  if (d < std::min(min_words_, kMinCoreWords) || d > max_words_) return;
  recent_.erase(std::remove(recent_.begin(), recent_.end(), d), recent_.end());
  recent_.push_back(d);
  if (recent_.size() > 4) recent_.erase(recent_.begin());
}

void WordCopies::update(const std::string& text) {
  size_t i = scanned_;
  while (i < text.size()) {
    if (!word_byte(static_cast<unsigned char>(text[i]))) {
      newlines_ += text[i] == '\n';
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && word_byte(static_cast<unsigned char>(text[j]))) ++j;
    if (j == text.size()) break;  // the word may go on in the next piece of text
    add_word(text, i, j);
    i = j;
  }
  scanned_ = i;
}

void WordCopies::truncate(size_t bytes) {
  if (bytes >= scanned_) return;
  size_t keep = 0;
  while (keep < starts_.size() && starts_[keep] < bytes) ++keep;
  // A word cut by the rollback is dropped; the rest is read again from its start.
  words_.resize(keep);
  starts_.resize(keep);
  lines_.resize(keep);
  prose_.resize(keep);
  scanned_ = keep ? starts_.back() : 0;
  newlines_ = keep ? lines_.back() : 0;
  if (keep) {
    words_.pop_back();
    starts_.pop_back();
    lines_.pop_back();
    prose_.pop_back();
  }
  last_.clear();
  recent_.clear();
  seen_.clear();
  novel_.clear();
  // Rebuild the 3-gram index over what is kept (a rollback is rare).
  std::vector<uint32_t> w = std::move(words_);
  std::vector<size_t> s = std::move(starts_);
  words_.clear();
  starts_.clear();
  for (size_t k = 0; k < w.size(); ++k) {
    words_.push_back(w[k]);
    starts_.push_back(s[k]);
    const size_t n = words_.size() - 1;
    novel_.push_back(seen_.try_emplace(words_[n], static_cast<int64_t>(n)).second);
    if (n < 2) continue;
    const uint64_t key = (static_cast<uint64_t>(words_[n - 2]) * 0x100000001B3ULL ^ words_[n - 1]) *
                             0x100000001B3ULL ^
                         (static_cast<uint64_t>(words_[n]) << 17);
    last_[key] = static_cast<int64_t>(n);
  }
  recent_.clear();
}

// Longest common subsequence of words [a, a+d) and [b, b+d), within a band of the diagonal, over
// d; `distinct` gets the number of distinct words matched.
double WordCopies::similarity(size_t a, size_t b, size_t d, size_t* distinct, std::vector<uint8_t>* matched) const {
  const int64_t band = std::max<int64_t>(2, static_cast<int64_t>(d) / 8);
  const int64_t n = static_cast<int64_t>(d);
  // dp over rows of the band; full rows are small (d <= max_words).
  std::vector<int32_t> prev(d + 1, 0), cur(d + 1, 0);
  std::vector<uint8_t> take((d + 1) * (d + 1), 0);  // the moves, to count the distinct words matched
  auto at = [&](int64_t i, int64_t j) -> uint8_t& { return take[static_cast<size_t>(i) * (d + 1) + static_cast<size_t>(j)]; };
  for (int64_t i = 1; i <= n; ++i) {
    std::fill(cur.begin(), cur.end(), 0);
    const int64_t lo = std::max<int64_t>(1, i - band), hi = std::min<int64_t>(n, i + band);
    for (int64_t j = lo; j <= hi; ++j) {
      if (words_[a + static_cast<size_t>(i - 1)] == words_[b + static_cast<size_t>(j - 1)]) {
        cur[static_cast<size_t>(j)] = prev[static_cast<size_t>(j - 1)] + 1;
        at(i, j) = 1;
      } else if (prev[static_cast<size_t>(j)] >= cur[static_cast<size_t>(j - 1)]) {
        cur[static_cast<size_t>(j)] = prev[static_cast<size_t>(j)];
        at(i, j) = 2;
      } else {
        cur[static_cast<size_t>(j)] = cur[static_cast<size_t>(j - 1)];
        at(i, j) = 3;
      }
    }
    std::swap(prev, cur);
  }
  const int32_t lcs = prev[d];
  if (matched) matched->assign(d, 0);
  if (distinct || matched) {
    std::unordered_set<uint32_t> seen;
    int64_t i = n, j = n;
    while (i > 0 && j > 0) {
      const uint8_t t = at(i, j);
      if (t == 1) {
        seen.insert(words_[a + static_cast<size_t>(i - 1)]);
        if (matched) (*matched)[static_cast<size_t>(j - 1)] = 1;
        --i;
        --j;
      } else if (t == 2) {
        --i;
      } else if (t == 3) {
        --j;
      } else {
        break;  // outside the band
      }
    }
    if (distinct) *distinct = seen.size();
  }
  return static_cast<double>(lcs) / static_cast<double>(d);
}

double WordCopies::union_similarity(size_t c, size_t d, size_t* distinct) const {
  std::vector<uint8_t> by_one, by_two;
  similarity(c - d, c, d, nullptr, &by_one);
  similarity(c - 2 * d, c, d, nullptr, &by_two);
  std::unordered_set<uint32_t> seen;
  size_t matched = 0;
  for (size_t k = 0; k < d; ++k)
    if (by_one[k] || by_two[k]) {
      ++matched;
      seen.insert(words_[c + k]);
    }
  if (distinct) *distinct = seen.size();
  return static_cast<double>(matched) / static_cast<double>(d);
}

// Units longer than this are not matched by the union rule: three stanzas of a licence quoted
// with their version and name changed match that way.
constexpr size_t kMaxUnionWords = 48;
constexpr size_t kMinUnionLineWords = 10;

bool WordCopies::union_applies(size_t n, size_t d, size_t k, bool short_lines) const {
  if (min_union_ <= 0 || k < 3 || d > kMaxUnionWords || short_lines || (k + 1) * d > n) return false;
  size_t prose = 0;  // lower-case words in the last copy
  for (size_t x = n - d; x < n; ++x) prose += prose_[x];
  if (2 * prose < d) return false;
  // Lines of fewer than kMinUnionLineWords words over the k + 1 copies (a log, a table): no.
  size_t line_starts = 0;
  for (size_t x = n - (k + 1) * d + 1; x < n; ++x) line_starts += lines_[x] != lines_[x - 1];
  return (k + 1) * d >= kMinUnionLineWords * (line_starts + 1);
}

bool WordCopies::one_changing_slot(size_t n, size_t d, size_t copies) const {
  constexpr size_t kSlot = 3;  // a slot is up to 3 words wide: "Working Day", "'Irene', 'Lille'"
  std::vector<uint8_t> changed(d, 0), matched;  // offsets any copy changed from the copy before it
  for (size_t j = 1; j < copies; ++j) {
    const size_t x = n - (copies - j) * d;
    similarity(x - d, x, d, nullptr, &matched);
    if (std::all_of(matched.begin(), matched.end(), [](uint8_t m) { return m != 0; })) return false;
    for (size_t o = 0; o < d; ++o) changed[o] |= !matched[o];
  }
  // The offsets lie on a circle (a window may start inside the slot: "Lille'); INSERT ... 'Irene',"):
  // they fit in a slot when the widest gap between two changed offsets leaves less than kSlot.
  size_t first = d, last = 0, gap = 0;
  for (size_t o = 0; o < d; ++o) {
    if (!changed[o]) continue;
    if (first == d) first = o;
    else gap = std::max(gap, o - last);
    last = o;
  }
  gap = std::max(gap, first + d - last);
  return d - gap < kSlot;
}

WordLoop WordCopies::check(std::string_view text) const {
  WordLoop out;
  const size_t n = words_.size();
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) {
    const size_t d = static_cast<size_t>(*it);
    // A short core (code, a log line: mostly punctuation and numbers) still spans min_words blank-
    // separated fields, as a reader counts words; but not in columns, and over one more copy.
    const bool short_core = static_cast<int>(d) < min_words_;
    if (short_core && (blank_fields(text.substr(std::min(text.size(), starts_[n - d]))) <
                           static_cast<size_t>(min_words_) ||
                       column_blanks(text.substr(std::min(text.size(), starts_[n - std::min(n, 3 * d)])))))
      continue;
    const bool long_unit = long_words_ > 0 && *it >= long_words_ && *it <= kMaxLongWords;
    size_t k = static_cast<size_t>(long_unit ? long_copies_ : copies_);
    if (short_core) k += 1;
    if (k * d > n) continue;
    // Short lines (a form, a list of definitions, declarations, a changelog's entries): how
    // structured text repeats by design, with a name changed in each copy. More copies, then.
    const int64_t breaks = lines_[n - 1] - lines_[n - d];
    const bool short_lines = line_words_ > 0 && breaks * line_words_ > static_cast<int64_t>(d);
    if (short_lines) k = std::max(k, static_cast<size_t>(line_copies_));
    if (k * d > n) continue;
    const size_t c = n - d, b = n - 2 * d;
    size_t a = n - k * d;
    size_t distinct = 0;
    double s2 = similarity(b, c, d, &distinct);
    // Heavily edited copies: each matched by the union of the two before it, instead of pairwise,
    // over one more copy (GuardConfig::near_words_union says which units qualify, and why).
    bool by_union = false;
    if (s2 < min_sim_) {
      if (!union_applies(n, d, k, short_lines)) continue;
      k += 1;
      a = n - k * d;
      s2 = union_similarity(c, d, &distinct);
      if (s2 < min_union_) continue;
      by_union = true;
    }
    if (static_cast<double>(distinct) < min_distinct_ * static_cast<double>(d)) continue;
    // Legitimate lists bring something new in every item (a name, a description); a loop does not.
    size_t novel = 0;
    for (size_t k = c; k < n; ++k) novel += novel_[k];
    if (static_cast<double>(novel) > max_novel_ * static_cast<double>(d)) continue;
    // A list's items change in one slot (a name, a value); a loop's edits fall anywhere.
    if (one_changing_slot(n, d, k)) continue;
    double s1 = 1.0;
    if (by_union) {
      for (size_t x = c; x >= a + 3 * d && s1 >= min_union_;) {  // each earlier copy but the first two
        x -= d;
        s1 = std::min(s1, union_similarity(x, d, nullptr));
      }
      if (s1 < min_union_) continue;
    } else {
      for (size_t x = n - 3 * d + d; x > a && s1 >= min_sim_;) {  // each earlier pair of copies
        x -= d;
        s1 = std::min(s1, similarity(x, x + d, d, nullptr));
      }
      if (s1 < min_sim_) continue;
    }
    out.novel = static_cast<double>(novel) / static_cast<double>(d);
    out.unit_words = static_cast<int64_t>(d);
    out.onset_byte = starts_[a];
    out.second_byte = starts_[n - (k - 1) * d];
    out.third_byte = starts_[n - (k - 2) * d];
    out.similarity = std::min(s1, s2);
    out.distinct = static_cast<double>(distinct) / static_cast<double>(d);
    return out;
  }
  return out;
}

}  // namespace coda
