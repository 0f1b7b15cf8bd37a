// The thread pool: every index is visited exactly once, across sizes and repeated runs, and a
// worker that is stalled (as the OS deschedules one on a busy machine) neither blocks a section it
// has not begun nor changes a result. No assertion here depends on timing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace coda {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 16, 1000}) {
      for (int64_t grain : {1, 16}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
              ASSERT_LE(0, b);
              ASSERT_LE(e, n);
              for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
            },
            grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << n << " " << i;
      }
    }
  }
}

TEST(ThreadPool, RunGivesEveryThreadItsIndexManyTimes) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 20000; ++rep)
    pool.run([&](int i, int n) {
      EXPECT_EQ(n, 2);
      sum.fetch_add(i + 1);
    });
  EXPECT_EQ(sum.load(), 20000 * 3);
}

// Sums of 1/(i+1) over ranges, each range's partial kept by its start and added in order: the
// same bits whichever thread ran which range.
double ordered_sum(ThreadPool& pool, int64_t n) {
  std::vector<double> part(static_cast<size_t>(n), 0.0);
  pool.parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        double s = 0;
        for (int64_t i = b; i < e; ++i) s += 1.0 / static_cast<double>(i + 1);
        part[static_cast<size_t>(b)] = s;
      },
      8);
  return std::accumulate(part.begin(), part.end(), 0.0);
}

TEST(ThreadPool, AWorkerThatNeverComesDoesNotHoldASectionBack) {
  // The worker wakes for the first section and is stalled before it claims a slot, until every
  // section is done. If a section waited for every thread, this test would never end.
  std::atomic<bool> release{false};
  // Opens the gate however the test ends (a failed ASSERT returns early), before the pool joins.
  struct Gate {
    std::atomic<bool>& r;
    ~Gate() {
      r.store(true);
      r.notify_all();
    }
  };
  std::atomic<int> slots_by_worker{0};
  ThreadPool pool(2);
  Gate gate{release};
  pool.set_worker_hook([&](int, bool claimed) {
    if (claimed) {
      slots_by_worker.fetch_add(1);
      return;
    }
    while (!release.load()) release.wait(false);
  });
  ThreadPool calm(2);  // the same ranges (they depend on the pool's size), no stall
  const double want = ordered_sum(calm, 5000);
  for (int rep = 0; rep < 2000; ++rep) {
    ASSERT_EQ(ordered_sum(pool, 5000), want) << rep;
    std::atomic<int> sum{0};
    pool.run([&](int slot, int n) {
      EXPECT_EQ(n, 2);
      sum.fetch_add(slot + 1);
    });
    ASSERT_EQ(sum.load(), 3);
  }
  EXPECT_EQ(slots_by_worker.load(), 0);  // the caller ran every slot
  release.store(true);
  release.notify_all();
  // Back in service (the hook lets it through now): the same results.
  for (int rep = 0; rep < 200; ++rep) ASSERT_EQ(ordered_sum(pool, 5000), want);
}

TEST(ThreadPool, AWorkerStalledInsideASlotDelaysButDoesNotChangeResults) {
  // Every so often the worker is held for a while right after claiming a slot, as if descheduled
  // in the middle of its share; the section waits for that slot and the results are the same.
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::atomic<int> claims{0};
    pool.set_worker_hook([&](int, bool claimed) {
      if (claimed && claims.fetch_add(1) % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
    ThreadPool calm(threads);
    for (int64_t n : {1, 9, 64, 1000, 4099}) {
      const double want = ordered_sum(calm, n);
      for (int rep = 0; rep < 50; ++rep) ASSERT_EQ(ordered_sum(pool, n), want) << threads << " " << n;
    }
  }
}

TEST(ThreadPool, MoreSlotsThanThreadsEachRunOnce) {
  ThreadPool pool(2);
  for (int slots : {0, 1, 2, 5, 64}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(slots));
    pool.run_slots(slots, [&](int s, int n) {
      EXPECT_EQ(n, slots);
      hits[static_cast<size_t>(s)].fetch_add(1);
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

}  // namespace
}  // namespace coda
