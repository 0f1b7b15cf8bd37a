// Low-diversity garbage: non-periodic text drawn from a handful of symbols ("00 + 0: 0: 0:00:0: //
// 0:00: 0: 0 0:0: //: 0:00:00:"), which no loop detector sees because nothing repeats exactly.
// Over the last garbage_window_chars bytes: few letters, a tiny alphabet, no line structure (tables,
// hex dumps, timestamps and logs are lines), and no regular form (a line of numbers, addresses or
// times repeats one or two forms of piece; garbage keeps changing). Checked every 4 tokens.
#pragma once

#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "guard/detector.h"
#include "guard/detectors/window.h"
#include "guard/guard.h"
#include "guard/language.h"

namespace coda::detectors {

struct GarbageMeasure {
  int64_t visible = 0, letters = 0, lines = 0, pieces = 0;
  int alphabet = 0;
  double shapes = 0;  // distinct forms of piece per piece
};

inline GarbageMeasure measure_garbage(std::string_view w) {
  GarbageMeasure m;
  std::unordered_set<uint32_t> chars;
  std::unordered_set<std::string> forms;
  std::string form;
  int last_class = 0;  // 1: digits, 2: letters, in the current form
  auto end_piece = [&] {
    if (form.empty()) return;
    forms.insert(form);
    ++m.pieces;
    form.clear();
    last_class = 0;
  };
  for (size_t k = 0; k < w.size();) {
    const size_t at = k;
    const uint32_t cp = utf8_next(w, k);
    if (cp == '\n') ++m.lines;
    if (cp < 0x80 && std::isspace(static_cast<int>(cp))) {
      end_piece();
      continue;
    }
    ++m.visible;
    chars.insert(cp);
    const bool letter = script_of(cp) >= 0, digit = cp >= '0' && cp <= '9';
    m.letters += letter;
    const int cls = digit ? 1 : letter ? 2 : 0;
    if (cls != 0 && cls == last_class) continue;  // a run of digits or letters is one class mark
    // A run of one symbol is one mark too: a table's rules ("|", "-----", "=========") are one form
    // whatever their widths.
    if (cls == 0 && last_class == 0 && k - at <= form.size() && form.compare(form.size() - (k - at), k - at, w.substr(at, k - at)) == 0)
      continue;
    last_class = cls;
    form += cls == 1 ? std::string("9") : cls == 2 ? std::string("a") : std::string(w.substr(at, k - at));
  }
  end_piece();
  m.alphabet = static_cast<int>(chars.size());
  m.shapes = m.pieces ? static_cast<double>(forms.size()) / static_cast<double>(m.pieces) : 0;
  return m;
}

class Garbage : public Detector {
 public:
  explicit Garbage(const DetectorInfo& info) : info_(info) {}
  const DetectorInfo& info() const override { return info_; }
  std::optional<Finding> check(GuardState& s) override {
    const GuardConfig& c = s.config;
    if (c.garbage_window_chars == 0 || s.n % 4 != 0 || s.text.size() < c.garbage_window_chars) return std::nullopt;
    const std::string window = last_bytes(s.text, c.garbage_window_chars);
    const GarbageMeasure m = measure_garbage(window);
    if (m.visible < static_cast<int64_t>(c.garbage_window_chars / 3) || m.pieces < 12 ||
        m.lines > c.garbage_max_lines ||
        static_cast<double>(m.letters) > c.garbage_max_letters * static_cast<double>(m.visible) ||
        m.alphabet > c.garbage_max_alphabet || m.shapes < c.garbage_min_shapes || table_rows(s.text, window.size()))
      return std::nullopt;
    return Finding{s.unit_at_byte(s.text.size() - window.size()),
                   std::min(1.0, m.shapes * 2),
                   {{"letters", static_cast<double>(m.letters) / static_cast<double>(m.visible)},
                    {"alphabet", m.alphabet},
                    {"shapes", m.shapes},
                    {"lines", m.lines}},
                   static_cast<int64_t>(c.garbage_window_chars)};
  }

 private:
  // Whether every line the last `tail` bytes touch is a Markdown table's row ("| --- | --- |", a
  // row padded with blanks): a few symbols and wide blanks, which garbage is not.
  static bool table_rows(std::string_view text, size_t tail) {
    size_t end = text.size();
    const size_t from = text.size() - tail;
    while (true) {
      const size_t nl = end == 0 ? std::string_view::npos : text.rfind('\n', end - 1);
      const size_t begin = nl == std::string_view::npos ? 0 : nl + 1;
      const std::string_view line = text.substr(begin, end - begin);
      const size_t first = line.find_first_not_of(" \t");
      if (end > begin) {  // an empty line (the window ends on a break) says nothing
        if (first == std::string_view::npos || line[first] != '|' || std::count(line.begin(), line.end(), '|') < 2)
          return false;
      }
      if (begin <= from || nl == std::string_view::npos) return true;
      end = nl;
    }
  }

  const DetectorInfo& info_;
};

}  // namespace coda::detectors
