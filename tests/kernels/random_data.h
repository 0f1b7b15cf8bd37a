// Seeded normal vectors for the kernel tests: every test draws its inputs the same way, so a
// failure reproduces from its seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace coda {

inline std::vector<float> random_vec(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace coda
