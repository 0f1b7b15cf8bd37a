#pragma once

#include <cstdint>
#include <string>

namespace coda {

// How many compute threads a model's steps are worth, and why (the serve start-up line prints it).
//
// A decode step streams every weight once, cut into about a hundred parallel sections. Each extra
// thread costs a fixed hand-off per section (waking, claiming a slot, joining), and pays back only
// when its share of the weights takes longer than that to stream. So the count is the weights per
// step divided by the least share that pays, capped by the cores: a model under 2 MiB per token runs on one
// thread, a 1B model on every core. `coda bench-model --threads-sweep` measures the curve.
struct ThreadChoice {
  int threads = 1;
  std::string reason;  // e.g. "all 2 cores: 681 MiB of weights per token"
};

// The least weight bytes per decode step that make one more thread pay. Calibrated with
// `bench-model --threads-sweep` on synthetic models of 0.9-198 MiB per token on a Zen 4 (docs/
// performance.md): at 0.9 MiB two threads were no faster than one, at 1.7 MiB they were 11% faster.
inline constexpr int64_t kMinWeightBytesPerThread = int64_t{1} << 20;

// The cores this process may use: the affinity mask (taskset, a container's cpuset), else
// std::thread::hardware_concurrency, capped at 16.
int usable_cores();

// `weight_bytes`: Model::decode_weight_bytes(); `cores`: usable_cores() outside tests.
ThreadChoice choose_threads(int64_t weight_bytes, int cores);

}  // namespace coda
