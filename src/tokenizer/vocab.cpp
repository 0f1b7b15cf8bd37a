#include "tokenizer/vocab.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"

namespace coda {

namespace {

const std::string kSpaceMark = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

Expected<int64_t> optional_id(const GgufFile& f, const std::string& key, int64_t n) {
  if (f.find(key) == nullptr) return int64_t{-1};
  auto v = f.get_int(key);
  if (!v) return v.error();
  if (*v < 0 || *v >= n)
    return Error("GGUF key '" + key + "' is " + std::to_string(*v) + "; valid token ids are 0.." +
                 std::to_string(n - 1));
  return *v;
}

}  // namespace

Expected<Vocab> Vocab::from_gguf(const GgufFile& f) {
  Vocab v;
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return Error("vocabulary: " + model.message());
  v.model_ = *model;
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return Error("vocabulary: " + tokens.message());
  const int64_t n = static_cast<int64_t>(tokens->size());
  if (n == 0 || n > (1 << 24)) return Error("vocabulary: tokenizer.ggml.tokens has " + std::to_string(n) + " entries");
  v.pieces_.reserve(static_cast<size_t>(n));
  for (auto s : *tokens) v.pieces_.emplace_back(s);
  v.scores_.assign(static_cast<size_t>(n), 0.0f);
  if (f.find("tokenizer.ggml.scores") != nullptr) {
    auto scores = f.get_float_array("tokenizer.ggml.scores");
    if (!scores) return Error("vocabulary: " + scores.message());
    if (static_cast<int64_t>(scores->size()) != n)
      return Error("vocabulary: tokenizer.ggml.scores has " + std::to_string(scores->size()) + " entries, tokens has " +
                   std::to_string(n));
    v.scores_ = std::move(scores).value();
  }
  v.types_.assign(static_cast<size_t>(n), TokenType::Normal);
  if (f.find("tokenizer.ggml.token_type") != nullptr) {
    auto types = f.get_int_array("tokenizer.ggml.token_type");
    if (!types) return Error("vocabulary: " + types.message());
    if (static_cast<int64_t>(types->size()) != n)
      return Error("vocabulary: tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                   " entries, tokens has " + std::to_string(n));
    for (int64_t i = 0; i < n; ++i)
      v.types_[static_cast<size_t>(i)] = static_cast<TokenType>((*types)[static_cast<size_t>(i)]);
  }
  CODA_ASSIGN_OR_RETURN(const int64_t bos, optional_id(f, "tokenizer.ggml.bos_token_id", n));
  CODA_ASSIGN_OR_RETURN(const int64_t eos, optional_id(f, "tokenizer.ggml.eos_token_id", n));
  CODA_ASSIGN_OR_RETURN(const int64_t eot, optional_id(f, "tokenizer.ggml.eot_token_id", n));
  CODA_ASSIGN_OR_RETURN(const int64_t unk, optional_id(f, "tokenizer.ggml.unknown_token_id", n));
  v.bos_ = static_cast<int32_t>(bos);
  v.eos_ = static_cast<int32_t>(eos);
  v.eot_ = static_cast<int32_t>(eot);
  v.unk_ = static_cast<int32_t>(unk);
  const bool spm = v.model_ == "llama";
  v.add_bos_ = spm;
  if (f.find("tokenizer.ggml.add_bos_token") != nullptr) {
    auto b = f.get_bool("tokenizer.ggml.add_bos_token");
    if (!b) return Error("vocabulary: " + b.message());
    v.add_bos_ = *b;
  }
  v.add_space_prefix_ = spm;
  if (f.find("tokenizer.ggml.add_space_prefix") != nullptr) {
    auto b = f.get_bool("tokenizer.ggml.add_space_prefix");
    if (!b) return Error("vocabulary: " + b.message());
    v.add_space_prefix_ = *b;
  }
  v.index_.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v.index_.emplace(v.pieces_[static_cast<size_t>(i)], i);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = v.index_.find(name);
    v.byte_tokens_[b] = it == v.index_.end() ? -1 : it->second;
  }
  for (int32_t i = 0; i < n; ++i) {
    const TokenType t = v.types_[static_cast<size_t>(i)];
    if ((t == TokenType::Control || t == TokenType::UserDefined) && !v.pieces_[static_cast<size_t>(i)].empty())
      v.specials_.push_back(i);
  }
  std::stable_sort(v.specials_.begin(), v.specials_.end(), [&](int32_t a, int32_t b) {
    return v.pieces_[static_cast<size_t>(a)].size() > v.pieces_[static_cast<size_t>(b)].size();
  });
  if (v.model_ == "gpt2") {
    std::vector<std::string_view> merges;
    if (f.find("tokenizer.ggml.merges") != nullptr) {
      auto m = f.get_string_array("tokenizer.ggml.merges");
      if (!m) return Error("vocabulary: " + m.message());
      merges = std::move(m).value();
    }
    std::string pre = "default";
    if (f.find("tokenizer.ggml.pre") != nullptr) {
      auto p = f.get_string("tokenizer.ggml.pre");
      if (!p) return Error("vocabulary: " + p.message());
      pre = *p;
    }
    auto bpe = ByteLevelBpe::create(v.pieces_, merges, pre);
    if (!bpe) return Error("vocabulary: " + bpe.message());
    v.bpe_ = std::move(bpe).value();
  } else if (v.model_ != "llama") {
    return Error("vocabulary: tokenizer model '" + v.model_ +
                 "' is not supported; supported: llama (SentencePiece), gpt2 (byte-level BPE)");
  }
  return v;
}

Expected<std::vector<int32_t>> Vocab::encode(std::string_view text, bool add_bos, bool parse_special,
                                             const std::vector<std::pair<size_t, size_t>>& text_only) const {
  std::vector<int32_t> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  if (!parse_special || specials_.empty()) {
    encode_plain(text, &out);
    return out;
  }
  // Split at special-token text (longest match first); encode the stretches between as text.
  size_t plain_start = 0;
  size_t next_range = 0;  // text_only is sorted: the first range that has not ended before i
  for (size_t i = 0; i < text.size();) {
    while (next_range < text_only.size() && text_only[next_range].second <= i) ++next_range;
    if (next_range < text_only.size() && text_only[next_range].first <= i) {
      i = text_only[next_range].second;  // user text: special-token strings in it stay text
      continue;
    }
    int32_t hit = -1;
    for (int32_t id : specials_) {
      const std::string& p = pieces_[static_cast<size_t>(id)];
      if (text.compare(i, p.size(), p) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    encode_plain(text.substr(plain_start, i - plain_start), &out);
    out.push_back(hit);
    i += pieces_[static_cast<size_t>(hit)].size();
    plain_start = i;
  }
  encode_plain(text.substr(plain_start), &out);
  return out;
}

void Vocab::encode_plain(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  if (bpe_ != nullptr) {
    bpe_->encode(text, index_, out);
  } else {
    const std::vector<int32_t> body = encode_spm(text);
    out->insert(out->end(), body.begin(), body.end());
  }
}

// SentencePiece BPE: start from single characters and repeatedly merge the adjacent pair whose
// concatenation is the highest-scoring vocabulary piece (leftmost first on ties).
std::vector<int32_t> Vocab::encode_spm(std::string_view raw) const {
  std::vector<int32_t> ids;
  if (raw.empty()) return ids;
  std::string text;
  if (add_space_prefix_) text = kSpaceMark;
  for (char ch : raw) {
    if (ch == ' ')
      text += kSpaceMark;
    else
      text += ch;
  }
  struct Sym {
    size_t start, len;
    int prev, next;
  };
  std::vector<Sym> syms;
  for (size_t i = 0; i < text.size();) {
    const size_t len = std::min(utf8_lead_length(static_cast<unsigned char>(text[i])), text.size() - i);
    syms.push_back({i, len, static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1});
    i += len;
  }
  syms.back().next = -1;
  struct Bigram {
    float score;
    int left, right;
    size_t size;
    bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
  };
  std::priority_queue<Bigram> queue;
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    auto it = index_.find(text.substr(syms[static_cast<size_t>(l)].start,
                                      syms[static_cast<size_t>(l)].len + syms[static_cast<size_t>(r)].len));
    if (it == index_.end()) return;
    queue.push({scores_[static_cast<size_t>(it->second)], l, r,
                syms[static_cast<size_t>(l)].len + syms[static_cast<size_t>(r)].len});
  };
  for (size_t i = 1; i < syms.size(); ++i) try_pair(static_cast<int>(i - 1), static_cast<int>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Sym& l = syms[static_cast<size_t>(b.left)];
    Sym& r = syms[static_cast<size_t>(b.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size || l.next != b.right) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }
  for (int i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const Sym& s = syms[static_cast<size_t>(i)];
    const std::string piece = text.substr(s.start, s.len);
    auto it = index_.find(piece);
    if (it != index_.end()) {
      ids.push_back(it->second);
      continue;
    }
    for (unsigned char byte : piece) {  // byte fallback
      const int32_t id = byte_tokens_[byte];
      if (id >= 0)
        ids.push_back(id);
      else if (unk_ >= 0)
        ids.push_back(unk_);
    }
  }
  return ids;
}

std::string Vocab::token_bytes(int32_t id) const {
  if (id < 0 || id >= size()) return {};
  const TokenType t = type(id);
  const std::string& p = piece(id);
  if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused) return {};
  if (t == TokenType::Byte && p.size() == 6 && p.rfind("<0x", 0) == 0 && p[5] == '>') {
    auto hex = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                    : -1;
    };
    const int hi = hex(p[3]), lo = hex(p[4]);
    if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
  }
  if (t == TokenType::UserDefined) return p;
  if (bpe_ != nullptr) return ByteLevelBpe::piece_bytes(p);
  std::string out;
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
      out += ' ';
      i += kSpaceMark.size();
    } else {
      out += p[i++];
    }
  }
  return out;
}

std::string Vocab::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    std::string piece = token_bytes(id);
    if (first && !piece.empty()) {
      first = false;
      if (model_ == "llama" && piece[0] == ' ') piece.erase(0, 1);  // the dummy prefix
    }
    bytes += piece;
  }
  std::string out;
  utf8_sanitize(bytes, true, &out);
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  std::string bytes = vocab_.token_bytes(id);
  if (bytes.empty() && keep_control_ && id >= 0 && id < vocab_.size() && vocab_.type(id) == TokenType::Control)
    bytes = vocab_.piece(id);
  if (bytes.empty()) return {};
  if (first_) {
    first_ = false;
    if (vocab_.model() == "llama" && bytes[0] == ' ') bytes.erase(0, 1);  // the dummy prefix
  }
  pending_ += bytes;
  std::string out;
  pending_.erase(0, utf8_sanitize(pending_, /*final=*/false, &out));
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8_sanitize(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace coda
