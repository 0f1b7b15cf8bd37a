#include "sampling/structured_output.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <numeric>

#include "tokenizer/vocab.h"

namespace coda {

namespace {

// Whole UTF-8 characters with no quote, backslash or control byte: inside a string without a
// length limit, such a token can never be wrong.
bool plain_string_content(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b == '"' || b == '\\' || b < 0x20) return false;
    const size_t n = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

GrammarTokens::Sorted sorted(std::vector<int32_t> ids, const std::vector<std::string>& bytes) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const auto& x = bytes[static_cast<size_t>(a)];
    const auto& y = bytes[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  GrammarTokens::Sorted s;
  s.lcp.resize(ids.size(), 0);
  for (size_t i = 1; i < ids.size(); ++i) {
    const auto& x = bytes[static_cast<size_t>(ids[i - 1])];
    const auto& y = bytes[static_cast<size_t>(ids[i])];
    size_t n = 0;
    const size_t m = std::min({x.size(), y.size(), size_t{UINT16_MAX}});
    while (n < m && x[n] == y[n]) ++n;
    s.lcp[i] = static_cast<uint16_t>(n);
  }
  s.ids = std::move(ids);
  return s;
}

}  // namespace

std::shared_ptr<const GrammarTokens> GrammarTokens::build(const Vocab& vocab) {
  auto t = std::make_shared<GrammarTokens>();
  const int32_t n = vocab.size();
  t->bytes.resize(static_cast<size_t>(n));
  std::vector<int32_t> all, special;
  for (int32_t id = 0; id < n; ++id) {
    std::string b = vocab.token_bytes(id);
    if (b.empty()) continue;
    all.push_back(id);
    if (plain_string_content(b)) t->plain.push_back(id);
    else special.push_back(id);
    t->bytes[static_cast<size_t>(id)] = std::move(b);
  }
  t->all = sorted(std::move(all), t->bytes);
  t->special = sorted(std::move(special), t->bytes);
  return t;
}

StructuredOutput::StructuredOutput(std::shared_ptr<const OutputGrammar> grammar,
                                   std::shared_ptr<const GrammarTokens> tokens, std::vector<int32_t> end_ids,
                                   std::shared_ptr<GrammarProgress> progress)
    : grammar_(std::move(grammar)),
      tokens_(std::move(tokens)),
      end_ids_(std::move(end_ids)),
      progress_(progress ? std::move(progress) : std::make_shared<GrammarProgress>()) {
  if (progress_->states.empty()) progress_->states.emplace_back(*grammar_);
}

const GrammarMatcher& StructuredOutput::state_after(const std::vector<int32_t>& generated) const {
  std::vector<int32_t>& seen = progress_->seen;
  std::vector<GrammarMatcher>& states = progress_->states;
  size_t k = 0;
  while (k < seen.size() && k < generated.size() && seen[k] == generated[k]) ++k;
  seen.resize(k);
  states.resize(k + 1);
  for (size_t i = k; i < generated.size(); ++i) {
    const int32_t id = generated[i];
    GrammarMatcher next = states.back();
    // A token outside the vocabulary or without bytes (forced by someone else) leaves the state
    // dead: from there only the end is allowed.
    const bool known = id >= 0 && static_cast<size_t>(id) < tokens_->bytes.size();
    const std::string& bytes = known ? tokens_->bytes[static_cast<size_t>(id)] : std::string();
    if (!known || bytes.empty() || !next.feed(bytes)) next = GrammarMatcher();
    states.push_back(std::move(next));
    seen.push_back(id);
  }
  return states.back();
}

void StructuredOutput::walk(const GrammarMatcher& s, const GrammarTokens::Sorted& list, std::vector<uint8_t>& ok) const {
  if (levels_.empty()) levels_.resize(1);
  levels_[0] = s;
  size_t alive = 0;           // levels_[0 .. alive] hold the states after the previous token's prefixes
  size_t dead_at = SIZE_MAX;  // the byte of the previous token that the format rejected
  for (size_t i = 0; i < list.ids.size(); ++i) {
    const std::string& b = tokens_->bytes[static_cast<size_t>(list.ids[i])];
    const size_t shared = list.lcp[i];
    if (dead_at != SIZE_MAX && shared > dead_at) continue;  // starts with a rejected prefix
    dead_at = SIZE_MAX;
    for (size_t j = std::min(shared, alive); j < b.size(); ++j) {
      if (levels_.size() < j + 2) levels_.resize(j + 2);
      levels_[j].feed_into(static_cast<uint8_t>(b[j]), levels_[j + 1]);
      if (levels_[j + 1].dead()) {
        dead_at = j;
        alive = j;
        break;
      }
    }
    if (dead_at == SIZE_MAX) {
      alive = b.size();
      ok[static_cast<size_t>(list.ids[i])] = 1;
    }
  }
}

void StructuredOutput::mark_allowed(const GrammarMatcher& s, std::vector<uint8_t>& ok) const {
  ok.assign(tokens_->bytes.size(), 0);
  bool any = false;
  if (!s.dead() && !s.finished()) {
    if (s.in_free_string()) {
      for (int32_t id : tokens_->plain) ok[static_cast<size_t>(id)] = 1;
      walk(s, tokens_->special, ok);
    } else {
      walk(s, tokens_->all, ok);
    }
    any = std::find(ok.begin(), ok.end(), 1) != ok.end();
  }
  // The end is allowed once the value is whole; where nothing else fits (a finished value, a
  // dead state, a vocabulary that cannot spell what must come next) it is the way out.
  if (s.accepting() || !any)
    for (int32_t id : end_ids_)
      if (id >= 0 && static_cast<size_t>(id) < ok.size()) ok[static_cast<size_t>(id)] = 1;
}

void StructuredOutput::apply(Candidates& c, const TokenHistory& h, SamplerRng&) const {
  mark_allowed(state_after(h.generated), ok_);
  for (size_t i = 0; i < c.size(); ++i) {
    const auto id = static_cast<size_t>(c.ids[i]);
    if (id >= ok_.size() || !ok_[id]) c.logits[i] = -std::numeric_limits<float>::infinity();
  }
}

std::vector<int32_t> StructuredOutput::allowed(const std::vector<int32_t>& generated) const {
  mark_allowed(state_after(generated), ok_);
  std::vector<int32_t> out;
  for (size_t id = 0; id < ok_.size(); ++id)
    if (ok_[id]) out.push_back(static_cast<int32_t>(id));
  return out;
}

}  // namespace coda
