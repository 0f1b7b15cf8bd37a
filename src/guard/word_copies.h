// Near loops at the scale of real text: copies of a 10-120-word unit that differ by a counter, a
// number, or a word in ten swapped. Position by position such copies do not line up (a swapped
// word is one token or three), so they are compared as words, with edits.
//
// The text is read as words: runs of letters, digits, '_' and non-ASCII bytes, of which numbers
// (counters, versions, dates) and words of one character are left out, and in the others a run of
// digits reads as one digit ("item7" is "item12"). Each new word closes a 3-gram; where that
// 3-gram occurred before gives a candidate unit length d (in words). A candidate is confirmed
// when the last `copies` windows of d words match pairwise with a longest
// common subsequence of at least `min_similarity` of d, and the matched words are varied (at least
// `min_distinct` of d distinct words: a run of `int x[N]; int y[N];` matches its skeleton only).
// Units of 6 to min_words - 1 words count too when a copy spans min_words blank-separated fields
// (a reader counts "10-120 words" that way: a code line's "(I", "%" and "4," are words to them),
// the text is not in columns (two blanks inside a line: tables, dumps), and one more copy matches.
// A step costs O(1) for the 3-gram index and, when a candidate recurs, a banded LCS of O(d x band).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace coda {

struct WordLoop {
  int64_t unit_words = 0;       // 0: none
  size_t onset_byte = 0;        // where the first of the copies starts
  size_t second_byte = 0;       // where the second copy starts
  size_t third_byte = 0;        // where the third copy starts
  double similarity = 0;        // the lower of the two pairwise similarities
  double distinct = 0;          // distinct matched words / unit
  double novel = 0;             // words of the last copy never seen before it / unit
};

class WordCopies {
 public:
  // Units whose lines hold fewer than `line_words` words on average need `line_copies` (0: no such
  // rule). Units of `long_words` words or more need `long_copies` copies instead of `copies`: three
  // copies of 24 words matching with edits are rare in real text, three of 8 are not (a run of
  // declarations, a changelog's entries).
  WordCopies(int min_words, int max_words, double min_similarity, double min_distinct, double max_novel,
             int copies = 3, int long_words = 0, int long_copies = 3, int line_words = 0, int line_copies = 8,
             double min_union = 0)
      : copies_(std::max(2, copies)),
        long_words_(long_words),
        long_copies_(std::max(2, long_copies)),
        line_words_(line_words),
        line_copies_(std::max(2, line_copies)),
        min_words_(min_words),
        max_words_(max_words),
        min_sim_(min_similarity),
        min_distinct_(min_distinct),
        max_novel_(max_novel),
        min_union_(min_union) {}
  // Reads the text up to its end (a word still open at the end waits for the next call).
  void update(const std::string& text);
  // Forgets the words that end past `bytes` (a rollback).
  void truncate(size_t bytes);
  // Copies at the end of the words read so far, or unit_words 0. `text` is what update() read: a
  // unit of fewer than min_words words (numbers and one-letter words left out) counts when its last
  // copy still spans min_words blank-separated fields ("line 4, is msvccompiler.py bug)").
  WordLoop check(std::string_view text) const;
  size_t words() const { return words_.size(); }

 private:
  void add_word(const std::string& text, size_t from, size_t to);
  // `matched`, when given, gets d flags: which words of window b the common subsequence uses.
  double similarity(size_t a, size_t b, size_t d, size_t* distinct, std::vector<uint8_t>* matched = nullptr) const;
  // The share of window c's words matched by window c - d or by window c - 2d, and the distinct
  // words among them (heavily edited copies: near_words_union).
  double union_similarity(size_t c, size_t d, size_t* distinct) const;
  // Whether the union rule may judge a unit of d words over k copies (k + 1 with the rule) that end
  // at word n: GuardConfig::near_words_union's conditions.
  bool union_applies(size_t n, size_t d, size_t k, bool short_lines) const;
  // Whether every one of the last `copies` windows of d words ending at word n changed some words
  // from the window before it, and all of them within one slot of a few words (a list's name and
  // value: SQL rows, definitions). A loop's edits fall anywhere, or nowhere but its counter.
  bool one_changing_slot(size_t n, size_t d, size_t copies) const;

  int copies_, long_words_, long_copies_, line_words_, line_copies_, min_words_, max_words_;
  double min_sim_, min_distinct_, max_novel_, min_union_;
  std::vector<uint8_t> novel_;                   // the word was new when it came
  std::vector<uint8_t> prose_;                   // the word is lower-case letters (not a code or a name)
  std::unordered_map<uint32_t, int64_t> seen_;   // word -> first index
  std::vector<uint32_t> words_;
  std::vector<size_t> starts_;  // byte where each word starts
  std::vector<int64_t> lines_;  // line breaks before each word
  int64_t newlines_ = 0;        // line breaks read so far
  std::unordered_map<uint64_t, int64_t> last_;  // 3-gram -> last word index that ended it
  std::vector<int64_t> recent_;                 // recent candidate unit lengths, newest last
  size_t scanned_ = 0;                          // bytes read (up to the start of an open word)
};

}  // namespace coda
