#include "engine/thread_choice.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace coda {

int usable_cores() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(n, 1, 16);
}

ThreadChoice choose_threads(int64_t weight_bytes, int cores) {
  cores = std::max(cores, 1);
  const int64_t worth = std::max<int64_t>(weight_bytes / kMinWeightBytesPerThread, 1);
  ThreadChoice c;
  c.threads = static_cast<int>(std::min<int64_t>(worth, cores));
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f MiB", static_cast<double>(weight_bytes) / (1 << 20));
  const std::string per_token = std::string(mib) + " of weights per token";
  if (c.threads == cores)
    c.reason = (cores == 1 ? std::string("the only core") : "all " + std::to_string(cores) + " cores") + ": " +
               per_token;
  else
    c.reason = per_token + " keep " + (c.threads == 1 ? "one thread" : std::to_string(c.threads) + " threads") +
               " busy at " + std::to_string(kMinWeightBytesPerThread >> 20) + " MiB each; more would wait on " +
               "each other (of " + std::to_string(cores) + " cores)";
  return c;
}

}  // namespace coda
