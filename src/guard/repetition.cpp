#include "guard/repetition.h"

#include <algorithm>
#include <set>

namespace coda {

PeriodTracker::PeriodTracker(int max_period) : max_period_(max_period), run_(static_cast<size_t>(max_period) + 1, 0) {}

void PeriodTracker::push(int32_t token) {
  toks_.push_back(token);
  const size_t n = toks_.size();
  for (int p = 1; p <= max_period_; ++p) {
    const size_t pp = static_cast<size_t>(p);
    run_[pp] = (n > pp && toks_[n - 1 - pp] == token) ? run_[pp] + 1 : 0;
  }
}

void PeriodTracker::truncate(size_t n) {
  if (n >= toks_.size()) return;
  std::vector<int32_t> keep(toks_.begin(), toks_.begin() + static_cast<std::ptrdiff_t>(n));
  toks_.clear();
  std::fill(run_.begin(), run_.end(), 0);
  for (int32_t t : keep) push(t);
}

Loop PeriodTracker::exact(double min_repeats, int64_t min_span, int min_period, int long_period,
                          double long_min_repeats) const {
  Loop best;
  const int64_t n = static_cast<int64_t>(toks_.size());
  for (int p = std::max(1, min_period); p <= max_period_; ++p) {
    const int64_t run = run_[static_cast<size_t>(p)];
    if (run == 0) continue;
    const int64_t span = run + p;
    const double repeats = static_cast<double>(span) / p;
    const double need = long_period > 0 && p >= long_period ? std::max(min_repeats, long_min_repeats) : min_repeats;
    if (repeats < need || span < min_span) continue;
    if (span > best.span) {
      best.period = p;
      best.span = span;
      best.onset = n - span;
      best.repeats = repeats;
    }
  }
  return best;
}

Loop near_loop(const std::vector<int32_t>& t, int min_period, int max_period, double min_match, double min_repeats,
               int64_t min_span) {
  Loop out;
  const int64_t n = static_cast<int64_t>(t.size());
  for (int p = std::max(1, min_period); p <= max_period; ++p) {
    const int64_t w = std::max<int64_t>(min_span, static_cast<int64_t>(min_repeats * p + 0.5)) - p;
    if (w <= 0 || w + p > n) continue;
    auto share = [&](int64_t from, int64_t to) {  // positions [from, to) compared with p back
      int64_t hits = 0;
      for (int64_t i = from; i < to; ++i) hits += t[static_cast<size_t>(i)] == t[static_cast<size_t>(i - p)];
      return static_cast<double>(hits) / static_cast<double>(to - from);
    };
    const double m = share(n - w, n);
    if (m < min_match) continue;
    int64_t start = n - w;  // extend backwards one period at a time while it keeps repeating
    while (start - p >= p && share(start - p, start) >= min_match) start -= p;
    out.period = p;
    out.onset = start - p;
    out.span = n - out.onset;
    out.repeats = static_cast<double>(out.span) / p;
    out.match = share(start, n);
    return out;
  }
  return out;
}

double distinct_ngrams(const std::vector<int32_t>& t, int n, size_t window) {
  const size_t len = std::min(window, t.size());
  if (len < static_cast<size_t>(n) + 1) return 1.0;
  const size_t start = t.size() - len;
  const size_t total = len - static_cast<size_t>(n) + 1;
  // Checked every few tokens over 160: up to three ids of 21 bits pack into one integer, so the
  // count is a sort rather than a set of vectors (larger ids or n take the set).
  const bool packs = n <= 3 && std::all_of(t.begin() + static_cast<std::ptrdiff_t>(start), t.end(),
                                           [](int32_t id) { return id >= 0 && id < (1 << 21); });
  if (packs) {
    std::vector<uint64_t> keys(total);
    for (size_t i = 0; i < total; ++i) {
      uint64_t k = 0;
      for (int j = 0; j < n; ++j) k = (k << 21) | static_cast<uint64_t>(t[start + i + static_cast<size_t>(j)]);
      keys[i] = k;
    }
    std::sort(keys.begin(), keys.end());
    const auto distinct = static_cast<size_t>(std::unique(keys.begin(), keys.end()) - keys.begin());
    return static_cast<double>(distinct) / static_cast<double>(total);
  }
  std::set<std::vector<int32_t>> seen;
  for (size_t i = start; i + static_cast<size_t>(n) <= t.size(); ++i)
    seen.insert(std::vector<int32_t>(t.begin() + static_cast<std::ptrdiff_t>(i),
                                     t.begin() + static_cast<std::ptrdiff_t>(i) + n));
  return static_cast<double>(seen.size()) / static_cast<double>(total);
}

}  // namespace coda

namespace coda {

namespace {
constexpr uint64_t kHashBase = 1000003ULL;  // odd: the powers stay odd, so no k-gram hashes vanish
uint64_t mix(int32_t t) { return static_cast<uint64_t>(static_cast<uint32_t>(t)) * 0x9E3779B97F4A7C15ULL + 1; }
}  // namespace

SpanRepeats::SpanRepeats(int min_period, int kgram, size_t max_candidates)
    : min_period_(min_period), k_(std::max(2, kgram)), max_candidates_(max_candidates) {
  for (int i = 0; i < k_; ++i) pow_k_ *= kHashBase;
}

void SpanRepeats::push(int32_t token) {
  toks_.push_back(token);
  const int64_t i = static_cast<int64_t>(toks_.size()) - 1;
  // Follow the candidates: a mismatch ends a run.
  size_t kept = 0;
  for (const Candidate& c : cands_)
    if (i - c.period >= 0 && toks_[static_cast<size_t>(i - c.period)] == token)
      cands_[kept++] = Candidate{c.period, c.run + 1};
  cands_.resize(kept);
  // The rolling hash of the k-gram ending here.
  const uint64_t prev = hashes_.empty() ? 0 : hashes_.back();
  uint64_t h = prev * kHashBase + mix(token);
  if (i >= k_) h -= pow_k_ * mix(toks_[static_cast<size_t>(i - k_)]);
  hashes_.push_back(h);
  if (i + 1 < k_) return;
  auto [it, fresh] = last_.try_emplace(h, i);
  if (fresh) return;
  const int64_t p = i - it->second;
  it->second = i;
  if (p <= min_period_) return;
  for (const Candidate& c : cands_)
    if (c.period == p) return;
  // A new candidate: its run is what matches back from here (the hash is checked token by token;
  // the walk is at most a k-gram long when the candidate is found as soon as its k-gram repeats).
  int64_t run = 0;
  while (i - run - p >= 0 && toks_[static_cast<size_t>(i - run)] == toks_[static_cast<size_t>(i - run - p)] &&
         run < 4 * static_cast<int64_t>(k_))
    ++run;
  if (run < k_) return;  // a hash collision
  if (cands_.size() >= max_candidates_) {
    auto shortest = std::min_element(cands_.begin(), cands_.end(),
                                     [](const Candidate& a, const Candidate& b) { return a.run < b.run; });
    *shortest = Candidate{p, run};
  } else {
    cands_.push_back(Candidate{p, run});
  }
}

void SpanRepeats::truncate(size_t n) {
  if (n >= toks_.size()) return;
  std::vector<int32_t> keep(toks_.begin(), toks_.begin() + static_cast<std::ptrdiff_t>(n));
  toks_.clear();
  hashes_.clear();
  last_.clear();
  cands_.clear();
  for (int32_t t : keep) push(t);
}

Loop SpanRepeats::longest() const {
  Loop best;
  const int64_t n = static_cast<int64_t>(toks_.size());
  for (const Candidate& c : cands_) {
    const int64_t span = c.run + c.period;
    if (span > best.span) {
      best.period = static_cast<int>(c.period);
      best.span = span;
      best.onset = n - span;
      best.repeats = static_cast<double>(span) / static_cast<double>(c.period);
    }
  }
  return best;
}

}  // namespace coda
