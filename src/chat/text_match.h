// Small text helpers shared by the reply parsers (tool_calls, reasoning).
#pragma once

#include <algorithm>
#include <string_view>

namespace coda {

inline bool is_json_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// How many bytes at the end of `text` could be the start of `marker` (a stream holds them back
// until the next bytes tell).
inline size_t marker_prefix_at_end(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace coda
