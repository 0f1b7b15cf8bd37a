// When each request of a load test is sent, drawn in one place (as vLLM's serving benchmark does).
// The gaps between requests follow a gamma distribution with shape `burstiness` and mean
// 1 / rate: burstiness 1 is a Poisson process (exponential gaps), below 1 burstier, above 1 more
// regular. A rate of 0 (or infinity) sends everything at once.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace coda::lab {

// `n` send times in seconds from the start; the first request goes at its own gap (not at 0), so
// every gap is a draw. Errors on a negative rate or a burstiness <= 0.
Expected<std::vector<double>> arrival_times(int64_t n, double rate_per_s, double burstiness, uint64_t seed);

}  // namespace coda::lab
