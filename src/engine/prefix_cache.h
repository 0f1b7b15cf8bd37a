// Reuse of earlier requests' KV caches by requests that start with the same tokens: a fixed system
// prompt, a chat's earlier turns, a few-shot header.
//
// Entries are immutable snapshots of the first n positions of a finished (or fully prefilled)
// sequence's cache, n a whole number of 16-token blocks. A new sequence copies the rows of its
// longest cached prefix (which may end inside a block) into its own cache and prefills only the rest, so an entry is
// never shared mutably; entries are held by shared_ptr (reference counted) while a copy is in progress, and evicted
// least recently used first, when the cache holds more tokens than its budget or when the scheduler needs the memory
// for running sequences. A hit gives exactly the logits of a cold run: every cached row was computed from the same
// tokens at the same positions.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/kv_cache.h"

namespace coda {

class PrefixCache {
 public:
  static constexpr int64_t kBlock = 16;
  // A prompt that extends a cached prefix by fewer tokens than this is not snapshotted again: the
  // snapshot would copy every row of the prefix (1,000 rows of a 1B model are 66 MB, 30-180 ms on
  // this VM, while every running stream waits) to spare a later request at most this many tokens
  // of prefill. The usual case is a shared system prompt followed by a different short question.
  static constexpr int64_t kMinExtension = 64;

  // Holds at most `budget_tokens` positions in all (0 disables the cache). Copies run on `pool`
  // when given (KvCache::copy_prefix); the cache is then used only from the thread that owns the
  // pool's calls (the scheduler's), between forward passes.
  PrefixCache(const ModelConfig& config, int64_t budget_tokens, ThreadPool* pool = nullptr);

  // The longest cached prefix of `tokens`, leaving at least one token to run (its logits are
  // needed); copies its rows into the empty cache `dst` and returns how many positions it copied
  // (0 on a miss).
  int64_t restore(const std::vector<int32_t>& tokens, KvCache& dst);
  // Keeps the first positions of `kv` (as many whole blocks as it holds) as the cache of `tokens`
  // (which has at least kv.size() entries: the tokens at positions 0, 1, ...), unless a cached
  // prefix of them is shorter by less than kMinExtension (then that entry is only marked used).
  void insert(const std::vector<int32_t>& tokens, const KvCache& kv);
  // Drops least recently used entries until at most `tokens` positions are held.
  void shrink_to(int64_t tokens);

  int64_t tokens_held() const { return held_; }
  int64_t budget() const { return budget_; }
  size_t entries() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<int32_t> tokens;  // one per cached position
    KvCache kv;
  };
  const ModelConfig config_;
  ThreadPool* pool_;
  int64_t budget_;
  int64_t held_ = 0;
  uint64_t clock_ = 0;
  std::vector<std::shared_ptr<const Entry>> entries_;
  std::vector<uint64_t> used_;  // last use of entries_[i] (entries themselves stay immutable)
};

}  // namespace coda
