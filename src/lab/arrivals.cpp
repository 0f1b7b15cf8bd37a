#include "lab/arrivals.h"

#include <cmath>
#include <random>
#include <string>

namespace coda::lab {

Expected<std::vector<double>> arrival_times(int64_t n, double rate_per_s, double burstiness, uint64_t seed) {
  if (n < 0) return Error("requests: " + std::to_string(n) + " is negative");
  if (!(rate_per_s >= 0) || std::isnan(rate_per_s)) return Error("rate: must be >= 0 (0: all at once)");
  if (!(burstiness > 0) || !std::isfinite(burstiness)) return Error("burstiness: must be > 0 (1: Poisson)");
  std::vector<double> t(static_cast<size_t>(n), 0.0);
  if (rate_per_s == 0 || std::isinf(rate_per_s)) return t;
  std::mt19937_64 rng(seed);
  // Shape k, scale theta = 1 / (rate * k): mean k * theta = 1 / rate.
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate_per_s * burstiness));
  double at = 0;
  for (auto& x : t) {
    at += gap(rng);
    x = at;
  }
  return t;
}

}  // namespace coda::lab
