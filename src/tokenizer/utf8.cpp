#include "tokenizer/utf8.h"

#include <cstdint>

namespace coda {

namespace {

const char kReplacement[] = "\xEF\xBF\xBD";

// Number of continuation bytes after lead byte `b`, and the allowed range of the first of them;
// -1 for a byte that cannot start a sequence.
int sequence_shape(uint8_t b, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b < 0x80) return 0;
  if (b >= 0xC2 && b <= 0xDF) return 1;
  if (b >= 0xE0 && b <= 0xEF) {
    if (b == 0xE0) *lo = 0xA0;  // no overlongs
    if (b == 0xED) *hi = 0x9F;  // no surrogates
    return 2;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    if (b == 0xF0) *lo = 0x90;  // no overlongs
    if (b == 0xF4) *hi = 0x8F;  // nothing above U+10FFFF
    return 3;
  }
  return -1;
}

}  // namespace

size_t utf8_sanitize(std::string_view in, bool final, std::string* out) {
  size_t i = 0;
  while (i < in.size()) {
    const auto b = static_cast<uint8_t>(in[i]);
    uint8_t lo, hi;
    const int extra = sequence_shape(b, &lo, &hi);
    if (extra < 0) {
      out->append(kReplacement);
      ++i;
      continue;
    }
    size_t k = 1;
    bool bad = false;
    for (; k <= static_cast<size_t>(extra); ++k) {
      if (i + k >= in.size()) break;  // ran out: incomplete
      const auto c = static_cast<uint8_t>(in[i + k]);
      const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (c < l || c > h) {
        bad = true;
        break;
      }
    }
    if (bad) {  // the lead and the valid continuations so far are one invalid subpart
      out->append(kReplacement);
      i += k;
      continue;
    }
    if (k <= static_cast<size_t>(extra)) {  // incomplete at the end of the input
      if (!final) return i;
      out->append(kReplacement);
      return in.size();
    }
    out->append(in.substr(i, k));
    i += k;
  }
  return i;
}

bool utf8_valid(std::string_view s) {
  std::string tmp;
  return utf8_sanitize(s, true, &tmp) == s.size() && tmp.size() == s.size();
}

}  // namespace coda
