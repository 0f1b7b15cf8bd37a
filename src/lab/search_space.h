// The parameters `coda tune` searches, as Optuna models them: each a float or an integer between
// two bounds, optionally on a log scale or on a grid of steps. Parsed from
// "temperature=0.7:0.9,min_p=0:0.1,repetition_penalty=1.0:1.1,top_k=10:100:int,min_p=0:0.2:0.01"
// (name=low:high[:log|:int|:STEP|:int:STEP|:int:log]).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace coda::lab {

struct ParamSpec {
  std::string name;
  double low = 0, high = 1;
  bool log = false;
  bool integer = false;
  double step = 0;  // 0: continuous (for integers: 1)

  // Optuna's distribution JSON ("FloatDistribution" / "IntDistribution"), as its journal stores it.
  std::string optuna_distribution() const;
  // A value clamped into range and snapped to the grid.
  double snap(double v) const;
  bool contains(double v) const;
};

using SearchSpace = std::vector<ParamSpec>;

Expected<SearchSpace> parse_search_space(const std::string& spec);

}  // namespace coda::lab
