// Small helpers the detectors share: means of a signal over the last steps, the last bytes of text.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "guard/signals.h"

namespace coda::detectors {

inline double mean_of(const std::vector<StepSignals>& s, size_t window, float StepSignals::*field) {
  const size_t n = std::min(window, s.size());
  if (n == 0) return 0;
  double sum = 0;
  for (size_t i = s.size() - n; i < s.size(); ++i) sum += s[i].*field;
  return sum / static_cast<double>(n);
}

// The last `n` bytes of `text`, starting at a UTF-8 character boundary.
inline std::string last_bytes(const std::string& text, size_t n) {
  if (text.size() <= n) return text;
  size_t from = text.size() - n;
  while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  return text.substr(from);
}

}  // namespace coda::detectors
