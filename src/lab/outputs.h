// An experiment's output directory: machine-readable results and a human report, written together.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace coda::lab {

// Creates `dir` (and its parents) and writes each (name, content) into it; the error names the
// file that could not be written.
Status write_output_files(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files);

// A number for a JSON output, or null where it is NaN or infinite (JSON has no such numbers).
// `Json` is nlohmann::json or nlohmann::ordered_json.
template <class Json>
Json finite_or_null(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

}  // namespace coda::lab
