// UTF-8 validation with replacement, for detokenization: token pieces are bytes, and a token
// boundary may fall inside a character (byte-fallback pieces, byte-level BPE).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace coda {

// Appends the text of `in` to `out`, replacing each maximal invalid subpart with U+FFFD (as the
// WHATWG TextDecoder and Python's errors="replace" do: overlongs, surrogates, code points above
// U+10FFFF, stray continuation bytes and truncated sequences are invalid). When `final` is false
// a valid but incomplete sequence at the end is left alone. Returns the bytes consumed.
size_t utf8_sanitize(std::string_view in, bool final, std::string* out);

// True when `s` is entirely valid UTF-8.
bool utf8_valid(std::string_view s);

// The length of the sequence that lead byte `c` starts (1 to 4); 1 for an invalid lead byte, so a
// scan over arbitrary bytes always advances.
inline size_t utf8_lead_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace coda
