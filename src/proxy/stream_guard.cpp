#include "proxy/stream_guard.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace coda::proxy {

namespace {

enum class Kind { Space, Word, Digit, Other };

Kind kind_of(unsigned char c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return Kind::Space;
  if (std::isdigit(c)) return Kind::Digit;
  if (std::isalpha(c) || c >= 0x80) return Kind::Word;  // UTF-8 letters of any script
  return Kind::Other;
}

// Length of the first piece of `s` and whether it is certainly complete (text follows it).
std::pair<size_t, bool> first_piece(const std::string& s) {
  size_t i = 0;
  const auto at = [&](size_t k) { return kind_of(static_cast<unsigned char>(s[k])); };
  if (s[0] == ' ' && s.size() > 1 && at(1) != Kind::Space) i = 1;  // a word keeps its leading space
  const Kind k = at(i);
  if (k == Kind::Other) {
    // A run of one punctuation mark goes in pieces of up to 4, as BPE vocabularies merge "----",
    // "====" and "!!!!": a rule of 100 dashes is 25 pieces (typography, not a flood), and a flood of
    // "!" is still one piece over and over.
    size_t j = i + 1;
    while (j < s.size() && j - i < 4 && s[j] == s[i]) ++j;
    return {j, j < s.size()};
  }
  size_t j = i + 1;
  // Digits go in groups of at most three, as Llama 3 and GPT-4's tokenizers cut numbers (Llama 2,
  // Mistral and Qwen cut single digits): a run of one digit is then a flood, as it is in tokens.
  while (j < s.size() && at(j) == k && !(k == Kind::Digit && j - i == 3)) {
    // A run of spaces ends before the space that leads the next word.
    if (k == Kind::Space && s[j] == ' ' && j + 1 < s.size() && at(j + 1) != Kind::Space) break;
    ++j;
  }
  return {j, j < s.size()};
}

}  // namespace

void TextPieces::feed(const std::string& text, std::vector<std::string>& out) {
  pending_ += text;
  while (!pending_.empty()) {
    const auto [len, complete] = first_piece(pending_);
    if (!complete) break;
    out.push_back(pending_.substr(0, len));
    pending_.erase(0, len);
  }
}

void TextPieces::finish(std::vector<std::string>& out) {
  while (!pending_.empty()) {
    const size_t len = first_piece(pending_).first;
    out.push_back(pending_.substr(0, len));
    pending_.erase(0, len);
  }
}

bool is_eos_text(const std::string& t) {
  static const char* const kEos[] = {"</s>",          "<|eot_id|>", "<|end_of_text|>", "<|im_end|>",
                                     "<|endoftext|>", "<|end|>",    "<eos>",           "<|eom_id|>"};
  return std::any_of(std::begin(kEos), std::end(kEos), [&](const char* e) { return t == e; });
}

StreamGuard::StreamGuard(const GuardConfig& config, const std::string& prompt_text, int client_top_logprobs)
    : guard_(config, {}), client_top_(client_top_logprobs) {
  guard_.on_start({}, prompt_text);
}

int32_t StreamGuard::id_of(const std::string& unit) {
  auto [it, added] = ids_.emplace(unit, static_cast<int32_t>(ids_.size()));
  return it->second;
}

StepVerdict StreamGuard::step(const std::string& unit, const StepSignals* signals, const client::TokenLogprob* lp) {
  text_ += unit;
  ends_.push_back(text_.size());
  lengths_.push_back((lengths_.empty() ? 0.0 : lengths_.back()) + (lp || signals ? 1.0 : kTokensPerPiece));
  if (text_only_) guard_.set_length_tokens(tokens());
  if (client_top_ >= 0) {
    client::TokenLogprob kept;
    if (lp) {
      kept.token = lp->token;
      kept.logprob = lp->logprob;
      kept.top.assign(lp->top.begin(), lp->top.begin() + std::min(lp->top.size(), static_cast<size_t>(client_top_)));
    }
    logprobs_.push_back(std::move(kept));
    has_logprob_.push_back(lp != nullptr);
  }
  return guard_.observe(id_of(unit), signals, text_);
}

StepVerdict StreamGuard::feed(const std::string& text, const std::vector<client::TokenLogprob>& logprobs) {
  // Tokens when the delta's logprobs spell out exactly its text (byte-fallback tokens and
  // servers that send logprobs elsewhere do not): then each token is a unit with its signals.
  if (text.empty() && logprobs.empty()) return {};  // a role-only or usage-only chunk
  std::string spelled;
  for (const auto& t : logprobs) spelled += t.token;
  if (!logprobs.empty() && spelled == text && pieces_.pending().empty()) {
    for (const auto& t : logprobs) {
      std::vector<double> top;
      std::optional<double> eos;
      for (const auto& a : t.top) {
        top.push_back(a.logprob);
        if (is_eos_text(a.token)) eos = eos ? std::max(*eos, a.logprob) : a.logprob;
      }
      if (top.empty()) top.push_back(t.logprob);
      const StepSignals s = top_k_signals(t.logprob, top, eos);
      StepVerdict v = step(t.token, &s, &t);
      if (v.stop || v.repair || v.inject) return v;
    }
    return {};
  }
  if (!text_only_) guard_.units_are_pieces();
  text_only_ = true;
  std::vector<std::string> done;
  pieces_.feed(text, done);
  for (const auto& piece : done) {
    StepVerdict v = step(piece, nullptr, nullptr);
    if (v.stop || v.repair || v.inject) {
      pieces_.clear();  // the text after this step is not accepted
      return v;
    }
  }
  return {};
}

StepVerdict StreamGuard::finish() {
  std::vector<std::string> done;
  pieces_.finish(done);
  for (const auto& piece : done) {
    StepVerdict v = step(piece, nullptr, nullptr);
    if (v.stop || v.repair || v.inject) return v;
  }
  return {};
}

size_t StreamGuard::rollback(size_t keep, size_t floor) {
  const size_t k = std::min(std::max(keep, floor), ends_.size());
  pieces_.clear();
  text_.resize(text_end(k));
  ends_.resize(k);
  lengths_.resize(k);
  if (client_top_ >= 0) {
    logprobs_.resize(k);
    has_logprob_.resize(k);
  }
  guard_.on_rollback(static_cast<int64_t>(k));
  return k;
}

int64_t StreamGuard::tokens() const {
  return lengths_.empty() ? 0 : std::llround(lengths_.back());
}

void StreamGuard::upstream_count(int64_t completion_tokens) {
  if (completion_tokens < 0 || lengths_.empty() || segment_units_ > lengths_.size()) return;
  const double before = segment_units_ == 0 ? 0.0 : lengths_[segment_units_ - 1];
  lengths_.back() = before + static_cast<double>(completion_tokens);
  if (text_only_) guard_.set_length_tokens(tokens());
}

std::string StreamGuard::slice(size_t from, size_t to) const {
  to = std::min(to, text_size());
  if (from >= to) return {};
  std::string out;
  if (from < text_.size()) out = text_.substr(from, std::min(to, text_.size()) - from);
  if (to > text_.size()) {
    const size_t p0 = from > text_.size() ? from - text_.size() : 0;
    out += pieces_.pending().substr(p0, to - text_.size() - p0);
  }
  return out;
}

std::vector<client::TokenLogprob> StreamGuard::logprobs(size_t from, size_t to) const {
  std::vector<client::TokenLogprob> out;
  for (size_t i = from; i < std::min(to, logprobs_.size()); ++i)
    if (has_logprob_[i]) out.push_back(logprobs_[i]);
  return out;
}

}  // namespace coda::proxy
