#include "tokenizer/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <array>
#include <queue>

#include "tokenizer/utf8.h"

namespace coda {

namespace {

// Pre-tokenizer patterns, as the models' tokenizer.json files define them.
struct PreTokenizer {
  const char* name;
  const char* pattern;
  bool ignore_merges;  // a word already in the vocabulary is one token (Llama 3's tokenizer.json)
  bool nfc;            // the tokenizer normalizes text to Unicode NFC first (Qwen's tokenizer.json)
};

const PreTokenizer kPreTokenizers[] = {
    {"llama-bpe",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+",
     true, false},
    {"qwen2",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+",
     false, true},
    {"gpt2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", false, false},
};

const PreTokenizer* find_pre(const std::string& name) {
  const std::string n = (name == "llama3" || name == "llama-v3") ? "llama-bpe" : (name == "default" ? "gpt2" : name);
  for (const auto& p : kPreTokenizers)
    if (n == p.name) return &p;
  return nullptr;
}

void append_utf8(std::string* s, uint32_t cp) {
  if (cp < 0x80) {
    *s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *s += static_cast<char>(0xC0 | (cp >> 6));
    *s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *s += static_cast<char>(0xE0 | (cp >> 12));
    *s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 onwards in byte order, so every byte becomes one visible character.
struct ByteTable {
  std::array<std::string, 256> to_char;
  std::array<int, 512> from_cp{};  // code point -> byte, -1 when none
  ByteTable() {
    from_cp.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = keep ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + extra++);
      append_utf8(&to_char[static_cast<size_t>(b)], cp);
      from_cp[cp] = b;
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

// Unicode NFC through ICU. Text that is not valid UTF-8 is returned unchanged (there is nothing
// to compose in bytes that are not characters, and replacing them would lose them).
std::string to_nfc(std::string_view s) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  if (U_FAILURE(err) || s.size() > static_cast<size_t>(INT32_MAX / 2)) return std::string(s);
  int32_t len16 = 0;
  u_strFromUTF8(nullptr, 0, &len16, s.data(), static_cast<int32_t>(s.size()), &err);
  if (err != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(err)) return std::string(s);
  err = U_ZERO_ERROR;
  std::u16string in(static_cast<size_t>(len16), u'\0');
  u_strFromUTF8(reinterpret_cast<UChar*>(in.data()), len16, nullptr, s.data(), static_cast<int32_t>(s.size()), &err);
  if (U_FAILURE(err)) return std::string(s);
  if (unorm2_isNormalized(nfc, reinterpret_cast<const UChar*>(in.data()), len16, &err) && U_SUCCESS(err))
    return std::string(s);
  err = U_ZERO_ERROR;
  const int32_t cap = len16 * 3 + 16;
  std::u16string out(static_cast<size_t>(cap), u'\0');
  const int32_t n16 = unorm2_normalize(nfc, reinterpret_cast<const UChar*>(in.data()), len16,
                                       reinterpret_cast<UChar*>(out.data()), cap, &err);
  if (U_FAILURE(err)) return std::string(s);
  int32_t len8 = 0;
  u_strToUTF8(nullptr, 0, &len8, reinterpret_cast<const UChar*>(out.data()), n16, &err);
  err = U_ZERO_ERROR;
  std::string result(static_cast<size_t>(len8), '\0');
  u_strToUTF8(result.data(), len8, nullptr, reinterpret_cast<const UChar*>(out.data()), n16, &err);
  return U_FAILURE(err) ? std::string(s) : result;
}

}  // namespace

const char* ByteLevelBpe::known_pre_tokenizers() {
  return "llama-bpe (llama3), qwen2, gpt2 (default)";
}

Expected<std::shared_ptr<const ByteLevelBpe>> ByteLevelBpe::create(const std::vector<std::string>& pieces,
                                                                   const std::vector<std::string_view>& merges,
                                                                   const std::string& pre) {
  (void)pieces;
  const PreTokenizer* p = find_pre(pre.empty() ? "gpt2" : pre);
  if (p == nullptr)
    return Error("pre-tokenizer '" + pre +
                 "' (tokenizer.ggml.pre) is not supported; supported: " + known_pre_tokenizers());
  auto bpe = std::shared_ptr<ByteLevelBpe>(new ByteLevelBpe());
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p->pattern), PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
  if (re == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return Error(std::string("internal: pre-tokenizer regex does not compile: ") + reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
  bpe->regex_ = re;
  bpe->ignore_merges_ = p->ignore_merges;
  bpe->nfc_ = p->nfc;
  bpe->merge_rank_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) bpe->merge_rank_.emplace(std::string(merges[i]), static_cast<int32_t>(i));
  return std::shared_ptr<const ByteLevelBpe>(std::move(bpe));
}

ByteLevelBpe::~ByteLevelBpe() {
  if (regex_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(regex_));
}

std::string ByteLevelBpe::piece_bytes(const std::string& piece) {
  const ByteTable& t = byte_table();
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    const size_t len = std::min(utf8_lead_length(static_cast<unsigned char>(piece[i])), piece.size() - i);
    uint32_t cp = 0;
    if (len == 1) {
      cp = static_cast<unsigned char>(piece[i]);
    } else {
      cp = static_cast<unsigned char>(piece[i]) & (0xFF >> (len + 1));
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(piece[i + k]) & 0x3F);
    }
    if (cp < t.from_cp.size() && t.from_cp[cp] >= 0)
      out += static_cast<char>(t.from_cp[cp]);
    else
      out.append(piece, i, len);  // not a byte-level character: keep as is
    i += len;
  }
  return out;
}

void ByteLevelBpe::encode(std::string_view raw, const std::unordered_map<std::string, int32_t>& index,
                          std::vector<int32_t>* out) const {
  const std::string normalized = nfc_ ? to_nfc(raw) : std::string();
  const std::string_view text = nfc_ ? std::string_view(normalized) : raw;
  auto* re = static_cast<pcre2_code*>(regex_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(re, subject, text.size(), pos, 0, md, nullptr);
    // A JIT resource limit is not "no match": retry with the interpreter, which has its own heap.
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) rc = pcre2_match(re, subject, text.size(), pos, PCRE2_NO_JIT, md, nullptr);
    if (rc < 0) {  // no further match (e.g. only invalid UTF-8 left): the rest is one piece
      encode_word(text.substr(pos), index, out);
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0], end = ov[1];
    if (start > pos) encode_word(text.substr(pos, start - pos), index, out);  // bytes no rule matched
    if (end == start) {                                                       // empty match: step over one character
      const size_t step = std::min(utf8_lead_length(static_cast<unsigned char>(text[start])), text.size() - start);
      encode_word(text.substr(start, step), index, out);
      pos = start + step;
    } else {
      encode_word(text.substr(start, end - start), index, out);
      pos = end;
    }
  }
  pcre2_match_data_free(md);
}

// BPE over one pre-token: start from one symbol per byte and repeatedly merge the adjacent pair
// with the lowest merge rank (leftmost first), with a heap so long pieces stay O(n log n).
void ByteLevelBpe::encode_word(std::string_view word, const std::unordered_map<std::string, int32_t>& index,
                               std::vector<int32_t>* out) const {
  if (word.empty()) return;
  const ByteTable& t = byte_table();
  std::string mapped;
  std::vector<size_t> starts;
  for (unsigned char c : word) {
    starts.push_back(mapped.size());
    mapped += t.to_char[c];
  }
  if (ignore_merges_) {
    auto it = index.find(mapped);
    if (it != index.end()) {
      out->push_back(it->second);
      return;
    }
  }
  struct Sym {
    size_t start, len;
    int prev, next;
  };
  std::vector<Sym> syms(starts.size());
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t end = i + 1 < starts.size() ? starts[i + 1] : mapped.size();
    syms[i] = {starts[i], end - starts[i], static_cast<int>(i) - 1,
               i + 1 < starts.size() ? static_cast<int>(i) + 1 : -1};
  }
  struct Cand {
    int32_t rank;
    int left, right;
    size_t len;  // combined length when queued, to detect stale entries
    bool operator<(const Cand& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
  };
  std::priority_queue<Cand> heap;
  std::string key;
  auto push = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const Sym& a = syms[static_cast<size_t>(l)];
    const Sym& b = syms[static_cast<size_t>(r)];
    key.assign(mapped, a.start, a.len);
    key += ' ';
    key.append(mapped, b.start, b.len);
    auto it = merge_rank_.find(key);
    if (it != merge_rank_.end()) heap.push({it->second, l, r, a.len + b.len});
  };
  for (size_t i = 0; i + 1 < syms.size(); ++i) push(static_cast<int>(i), static_cast<int>(i) + 1);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& a = syms[static_cast<size_t>(c.left)];
    if (a.len == 0 || a.next != c.right) continue;
    Sym& b = syms[static_cast<size_t>(c.right)];
    if (b.len == 0 || a.len + b.len != c.len) continue;  // stale
    a.len += b.len;
    b.len = 0;
    a.next = b.next;
    if (b.next >= 0) syms[static_cast<size_t>(b.next)].prev = c.left;
    push(a.prev, c.left);
    push(c.left, a.next);
  }
  for (int i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const Sym& s = syms[static_cast<size_t>(i)];
    auto it = index.find(mapped.substr(s.start, s.len));
    if (it != index.end()) {
      out->push_back(it->second);
      continue;
    }
    // A symbol outside the vocabulary (an incomplete vocabulary): fall back to its bytes.
    for (size_t k = s.start; k < s.start + s.len;) {
      const size_t len = utf8_lead_length(static_cast<unsigned char>(mapped[k]));
      auto bt = index.find(mapped.substr(k, len));
      if (bt != index.end()) out->push_back(bt->second);
      k += len;
    }
  }
}

}  // namespace coda
