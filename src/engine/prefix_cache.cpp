#include "engine/prefix_cache.h"

#include <algorithm>

namespace coda {

PrefixCache::PrefixCache(const ModelConfig& config, int64_t budget_tokens, ThreadPool* pool)
    : config_(config), pool_(pool), budget_(std::max<int64_t>(0, budget_tokens)) {}

namespace {
// Length of the common prefix of a and the first n of b.
int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t n) {
  const int64_t m = std::min<int64_t>(static_cast<int64_t>(a.size()), n);
  int64_t i = 0;
  while (i < m && a[static_cast<size_t>(i)] == b[static_cast<size_t>(i)]) ++i;
  return i;
}
}  // namespace

int64_t PrefixCache::restore(const std::vector<int32_t>& tokens, KvCache& dst) {
  if (budget_ == 0 || tokens.empty()) return 0;
  // At least the last token runs again: its logits start generation.
  const int64_t usable = static_cast<int64_t>(tokens.size()) - 1;
  int64_t best = 0;
  size_t best_i = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = *entries_[i];
    const int64_t n = common_prefix(tokens, e.tokens, static_cast<int64_t>(e.tokens.size()));
    // Entries hold whole blocks; a hit may end anywhere inside one (the rows are copied).
    const int64_t len = std::min(n, usable);
    if (len > best) {
      best = len;
      best_i = i;
    }
  }
  if (best == 0) return 0;
  const std::shared_ptr<const Entry> e = entries_[best_i];  // held while copying
  if (!dst.copy_prefix(e->kv, std::min(best, dst.capacity()), pool_).ok()) return 0;
  used_[best_i] = ++clock_;
  return dst.size();
}

void PrefixCache::insert(const std::vector<int32_t>& tokens, const KvCache& kv) {
  const int64_t n = std::min<int64_t>(kv.size(), static_cast<int64_t>(tokens.size())) / kBlock * kBlock;
  if (budget_ == 0 || n == 0 || n > budget_) return;
  // Already held by an entry that covers these n tokens, or all but a few of them: only mark it used.
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = *entries_[i];
    const auto held = static_cast<int64_t>(e.tokens.size());
    const int64_t covered = std::min(held, n);
    if (held > n - kMinExtension && common_prefix(tokens, e.tokens, covered) == covered) {
      used_[i] = ++clock_;
      return;
    }
  }
  auto snap = KvCache::create(config_, n);
  if (!snap) return;  // no memory for it: simply not cached
  if (!snap->copy_prefix(kv, n, pool_).ok()) return;
  auto entry = std::make_shared<Entry>(
      Entry{std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n)), std::move(*snap)});
  // Entries the new one extends (a shorter prefix of the same tokens) are now redundant.
  for (size_t i = 0; i < entries_.size();) {
    const Entry& e = *entries_[i];
    if (common_prefix(entry->tokens, e.tokens, static_cast<int64_t>(e.tokens.size())) ==
        static_cast<int64_t>(e.tokens.size())) {
      held_ -= static_cast<int64_t>(e.tokens.size());
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
      used_.erase(used_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  shrink_to(budget_ - n);
  entries_.push_back(std::move(entry));
  used_.push_back(++clock_);
  held_ += n;
}

void PrefixCache::shrink_to(int64_t tokens) {
  while (held_ > std::max<int64_t>(0, tokens) && !entries_.empty()) {
    const size_t lru = static_cast<size_t>(std::min_element(used_.begin(), used_.end()) - used_.begin());
    held_ -= static_cast<int64_t>(entries_[lru]->tokens.size());
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(lru));
    used_.erase(used_.begin() + static_cast<std::ptrdiff_t>(lru));
  }
}

}  // namespace coda
