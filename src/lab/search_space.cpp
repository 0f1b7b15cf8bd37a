#include "lab/search_space.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/strings.h"

namespace coda::lab {

std::string ParamSpec::optuna_distribution() const {
  nlohmann::ordered_json j;
  if (integer) {
    j = {{"name", "IntDistribution"},
         {"attributes",
          {{"log", log}, {"step", step > 0 ? static_cast<int64_t>(step) : 1}, {"low", static_cast<int64_t>(low)},
           {"high", static_cast<int64_t>(high)}}}};
  } else {
    j = {{"name", "FloatDistribution"},
         {"attributes",
          {{"step", step > 0 ? nlohmann::ordered_json(step) : nlohmann::ordered_json(nullptr)},
           {"low", low},
           {"high", high},
           {"log", log}}}};
  }
  return j.dump();
}

double ParamSpec::snap(double v) const {
  v = std::clamp(v, low, high);
  const double q = integer ? std::max(1.0, step) : step;
  if (q > 0 && !log) v = std::clamp(low + std::round((v - low) / q) * q, low, high);
  if (integer) v = std::clamp(std::round(v), low, high);
  return v;
}

bool ParamSpec::contains(double v) const {
  return v >= low - 1e-12 && v <= high + 1e-12;
}

Expected<SearchSpace> parse_search_space(const std::string& spec) {
  SearchSpace space;
  for (const std::string& item : split(spec, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return Error("space: '" + item + "' is not name=low:high[:log|:int|:STEP]");
    ParamSpec p;
    p.name = item.substr(0, eq);
    const auto parts = split(item.substr(eq + 1), ':');
    if (parts.size() < 2 || !parse_number(parts[0], p.low) || !parse_number(parts[1], p.high))
      return Error("space: '" + item + "': expected two numbers low:high");
    for (size_t i = 2; i < parts.size(); ++i) {
      double step = 0;
      if (parts[i] == "log") {
        p.log = true;
      } else if (parts[i] == "int") {
        p.integer = true;
      } else if (parse_number(parts[i], step) && step > 0) {
        p.step = step;
      } else {
        return Error("space: '" + item + "': '" + parts[i] + "' is not log, int or a positive step");
      }
    }
    if (!(p.low < p.high)) return Error("space: " + p.name + ": low must be below high");
    if (p.log && p.low <= 0) return Error("space: " + p.name + ": a log scale needs low > 0");
    if (p.log && p.step > 0) return Error("space: " + p.name + ": a log scale cannot have a step (Optuna's rule)");
    if (p.integer && (p.low != std::floor(p.low) || p.high != std::floor(p.high)))
      return Error("space: " + p.name + ": integer bounds must be whole numbers");
    for (const auto& q : space)
      if (q.name == p.name) return Error("space: " + p.name + " appears twice");
    space.push_back(p);
  }
  if (space.empty()) return Error("space: no parameters; e.g. --space \"temperature=0.7:0.9,min_p=0:0.1\"");
  return space;
}

}  // namespace coda::lab
