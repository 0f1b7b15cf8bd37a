// The default thread count follows the weights a decode step streams (engine/thread_choice.h).
#include <gtest/gtest.h>

#include "engine/thread_choice.h"

namespace coda {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(ThreadChoice, ASmallModelRunsOnOneThreadAndABigOneOnEveryCore) {
  // Less than two threads' worth per token: one thread, whatever the cores.
  EXPECT_EQ(choose_threads(2 * kMinWeightBytesPerThread - 1, 16).threads, 1);
  EXPECT_EQ(choose_threads(kMinWeightBytesPerThread / 2, 2).threads, 1);
  // 681 MiB (a 1B Q4_K model): every core, capped by the cores.
  EXPECT_EQ(choose_threads(681 * kMiB, 2).threads, 2);
  EXPECT_EQ(choose_threads(681 * kMiB, 16).threads, 16);
  // In between: one thread per kMinWeightBytesPerThread.
  EXPECT_EQ(choose_threads(3 * kMinWeightBytesPerThread + 1, 16).threads, 3);
  EXPECT_EQ(choose_threads(3 * kMinWeightBytesPerThread - 1, 16).threads, 2);
}

TEST(ThreadChoice, TheReasonNamesTheWeightsAndTheCores) {
  const ThreadChoice all = choose_threads(681 * kMiB, 2);
  EXPECT_NE(all.reason.find("all 2 cores"), std::string::npos) << all.reason;
  EXPECT_NE(all.reason.find("681.0 MiB of weights per token"), std::string::npos) << all.reason;
  const ThreadChoice one = choose_threads(kMinWeightBytesPerThread, 16);
  EXPECT_NE(one.reason.find("one thread"), std::string::npos) << one.reason;
  EXPECT_NE(one.reason.find("of 16 cores"), std::string::npos) << one.reason;
}

TEST(ThreadChoice, NoCoresOrNoWeightsStillGiveOneThread) {
  EXPECT_EQ(choose_threads(0, 4).threads, 1);
  EXPECT_EQ(choose_threads(681 * kMiB, 0).threads, 1);
  EXPECT_EQ(choose_threads(-1, 4).threads, 1);
}

TEST(ThreadChoice, UsableCoresIsPositiveAndCapped) {
  const int n = usable_cores();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, 16);
}

}  // namespace
}  // namespace coda
