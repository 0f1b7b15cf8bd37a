// The interface every sampling processor implements (one processor per file in this folder).
#pragma once

#include <cstdint>

#include "sampling/candidates.h"

namespace coda {

// Seeded generator owned by one request, so a seed reproduces a request whatever else runs.
class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed) : state_(seed) {}
  // Uniform in [0, 1) with 53 random bits (splitmix64: same sequence on every platform).
  double uniform();

 private:
  uint64_t state_;
};

class Processor {
 public:
  virtual ~Processor() = default;
  virtual const char* name() const = 0;
  // Reshapes the candidates for the next token. `rng` is the request's generator (XTC draws from it).
  virtual void apply(Candidates& c, const TokenHistory& h, SamplerRng& rng) const = 0;
};

}  // namespace coda
