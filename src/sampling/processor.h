// The interface every sampling processor implements (one processor per file in this folder).
#pragma once

#include "sampling/candidates.h"

namespace coda {

class Processor {
 public:
  virtual ~Processor() = default;
  virtual const char* name() const = 0;
  // Reshapes the candidates for the next token.
  virtual void apply(Candidates& c, const TokenHistory& h) const = 0;
};

}  // namespace coda
