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

}  // namespace coda
