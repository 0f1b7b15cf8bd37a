// The human half of `coda bench`'s output: report.html with SVG charts (latency distributions,
// finish reasons per set, output length against max_tokens) rendered from the same records and
// summary as summary.json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "lab/load_bench.h"

namespace coda::lab {

std::string bench_report_html(const nlohmann::ordered_json& summary, const LoadRun& run, const LoadOptions& opts);

// Writes summary.json, requests.jsonl and report.html into `dir` (created if missing).
Status write_bench_outputs(const std::string& dir, const nlohmann::ordered_json& summary, const LoadRun& run,
                           const LoadOptions& opts);

}  // namespace coda::lab
