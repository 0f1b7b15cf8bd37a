// Choosing a replica: consistent hashing with bounded loads, against hand-computed cases.
#include <gtest/gtest.h>

#include <vector>

#include "proxy/proxy_server.h"

namespace coda::proxy {
namespace {

TEST(Balance, TheKeysReplicaUnlessItIsOverTheBound) {
  // Idle: the highest score. Bound ceil(1.25 x 1 / 2) = 1.
  EXPECT_EQ(bounded_rendezvous({5, 9}, {0, 0}), 1u);
  // Preferred replica at 1, other idle: total 2, bound ceil(2.5 / 2) = 2; 1 < 2 keeps it.
  EXPECT_EQ(bounded_rendezvous({5, 9}, {0, 1}), 1u);
  // Preferred at 2: total 3, bound ceil(3.75 / 2) = 2; 2 is not under it, so the next in order.
  EXPECT_EQ(bounded_rendezvous({5, 9}, {0, 2}), 0u);
  // Both at 1: total 3, bound 2; the preferred one stays.
  EXPECT_EQ(bounded_rendezvous({5, 9}, {1, 1}), 1u);
  // Three replicas, loads 4, 4, 0: total 9, bound ceil(11.25 / 3) = 4; only the idle one is under.
  EXPECT_EQ(bounded_rendezvous({7, 8, 1}, {4, 4, 0}), 2u);
  // Loads 3, 3, 3: total 10, bound ceil(12.5 / 3) = 5; the highest score.
  EXPECT_EQ(bounded_rendezvous({7, 8, 1}, {3, 3, 3}), 1u);
  // Loads 5, 3, 1 with the middle one preferred: total 10, bound 5; 3 < 5 keeps it.
  EXPECT_EQ(bounded_rendezvous({7, 8, 1}, {5, 3, 1}), 1u);
  // One replica: always it.
  EXPECT_EQ(bounded_rendezvous({3}, {100}), 0u);
}

// Under a stream of requests for one key that never finish, no replica goes over the bound,
// 1.25 x the mean (125 of 400 over 4): the key's three best replicas fill up to it in their
// order, and the last one takes the remaining 25.
TEST(Balance, OneHotKeyIsSpreadWithinTheBound) {
  std::vector<int> loads(4, 0);
  const std::vector<uint64_t> scores = {10, 40, 30, 20};
  for (int r = 0; r < 400; ++r) {
    ++loads[bounded_rendezvous(scores, loads)];
    for (int l : loads) ASSERT_LE(l, (5 * (r + 1) + 15) / 16 + 1) << "after " << r + 1;
  }
  EXPECT_EQ(loads, (std::vector<int>{25, 125, 125, 125}));
}

}  // namespace
}  // namespace coda::proxy
