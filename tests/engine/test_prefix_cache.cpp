// The prefix cache: entries of whole blocks, at least one token left to run, longest match wins, LRU
// eviction within the budget, and a hit gives bit for bit the logits of a cold run.
#include <gtest/gtest.h>

#include <numeric>
#include <tuple>

#include "engine/prefix_cache.h"
#include "model/model.h"

namespace coda {
namespace {

struct PrefixCacheFixture {
  std::unique_ptr<Model> model;
  ThreadPool pool{2};
  ForwardBuffers buf;

  PrefixCacheFixture() : model(std::move(*Model::load(CODA_MODEL_PATH))) {}

  // A cache holding `tokens`, prefilled cold.
  KvCache prefill(const std::vector<int32_t>& tokens, std::vector<float>* logits = nullptr) {
    KvCache kv = std::move(*KvCache::create(model->config(), 256));
    std::vector<float> out(static_cast<size_t>(model->config().n_vocab));
    EXPECT_TRUE(
        model->forward(tokens.data(), static_cast<int64_t>(tokens.size()), kv, pool, buf, out.data(), false).ok());
    if (logits) *logits = out;
    return kv;
  }

  // Positions `cache` restores for `tokens` into a fresh, empty cache.
  int64_t restored(PrefixCache& cache, const std::vector<int32_t>& tokens) {
    KvCache kv = std::move(*KvCache::create(model->config(), 256));
    return cache.restore(tokens, kv);
  }
};

std::vector<int32_t> range(int32_t from, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(PrefixCache, HitGivesTheLogitsOfAColdRun) {
  PrefixCacheFixture f;
  PrefixCache cache(f.model->config(), 1000);
  const auto first = range(10, 70);
  cache.insert(first, f.prefill(first));
  EXPECT_EQ(cache.tokens_held(), 64);  // whole blocks of 16 only

  auto second = range(10, 50);  // shares 50 tokens with `first`, then differs
  for (int32_t t : {900, 901, 902, 903, 904}) second.push_back(t);
  KvCache kv = std::move(*KvCache::create(f.model->config(), 256));
  EXPECT_EQ(cache.restore(second, kv), 50);  // the common prefix, ending inside the 4th block
  EXPECT_EQ(kv.size(), 50);
  std::vector<float> warm(static_cast<size_t>(f.model->config().n_vocab)), cold;
  ASSERT_TRUE(f.model->forward(second.data() + 50, 5, kv, f.pool, f.buf, warm.data(), false).ok());
  f.prefill(second, &cold);
  EXPECT_EQ(warm, cold);
}

TEST(PrefixCache, LeavesOneTokenAndEvictsLeastRecentlyUsed) {
  PrefixCacheFixture f;
  PrefixCache cache(f.model->config(), 64);
  const auto a = range(100, 32), b = range(200, 32), c = range(300, 32);
  cache.insert(a, f.prefill(a));
  cache.insert(b, f.prefill(b));
  EXPECT_EQ(cache.tokens_held(), 64);
  // The same 32 tokens as a prompt: the last one runs again for its logits.
  KvCache kv = std::move(*KvCache::create(f.model->config(), 64));
  EXPECT_EQ(cache.restore(a, kv), 31);
  cache.insert(c, f.prefill(c));  // over budget: b (least recently used) goes
  EXPECT_EQ(cache.entries(), 2u);
  KvCache kv2 = std::move(*KvCache::create(f.model->config(), 64));
  auto b_longer = b;
  b_longer.push_back(7);
  EXPECT_EQ(cache.restore(b_longer, kv2), 0);
  KvCache kv3 = std::move(*KvCache::create(f.model->config(), 64));
  auto a_longer = a;
  a_longer.push_back(7);
  EXPECT_EQ(cache.restore(a_longer, kv3), 32);
  // Shrinking empties the cache.
  cache.shrink_to(0);
  EXPECT_EQ(cache.tokens_held(), 0);
  EXPECT_EQ(cache.entries(), 0u);
  PrefixCache off(f.model->config(), 0);
  off.insert(a, f.prefill(a));
  EXPECT_EQ(off.entries(), 0u);
}

TEST(PrefixCache, SnapshotsAgainOnlyWhenAPromptExtendsAnEntryByManyTokens) {
  PrefixCacheFixture f;
  PrefixCache cache(f.model->config(), 256);
  const auto a = range(100, 32);
  cache.insert(a, f.prefill(a));
  // 48 more tokens (a system prompt, then a short question): the 32-token entry stays the only one.
  // 64 more tokens or beyond: the longer snapshot replaces the shorter one.
  for (const auto& [extended, held, hit] : {std::tuple{80, 32, 32}, std::tuple{96, 96, 95}}) {
    const auto tokens = range(100, extended);
    cache.insert(tokens, f.prefill(tokens));
    EXPECT_EQ(cache.entries(), 1u) << extended;
    EXPECT_EQ(cache.tokens_held(), held) << extended;
    EXPECT_EQ(f.restored(cache, tokens), hit) << extended;
  }
}

}  // namespace
}  // namespace coda
