// The load flags `coda bench` and `coda tune` share: prompts, arrivals, sets, max_tokens, what
// counts as a failure, and the sampling flag set of `coda run` (sent as request fields).
#pragma once

#include "lab/target.h"

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "engine/request.h"
#include "lab/load_bench.h"
#include "lab/prompts.h"

namespace coda::cli {

struct LoadFlags {
  GenerationRequest sampling;  // filled by the sampling flags; only those given are sent
  std::string prompts_file, sets = "exam", languages = "en,it,fr";
  std::string api = "completions";  // the built-in prompts' route: completions, chat or auto
  std::string dataset_name;         // vLLM's --dataset-name, checked and otherwise unused
  lab::LoadOptions load;
  std::string failure_reasons = "length";
  bool no_stream = false;
};

void add_load_flags(CLI::App* app, LoadFlags& f);
// After parsing: the prompts, and f.load completed from the flags (-s/--seed seeds the run).
// `target` decides `--api auto`.
Expected<std::vector<lab::BenchPrompt>> finish_load_flags(const CLI::App* app, LoadFlags& f, const std::string& model,
                                                          lab::Target& target);
// The built-in prompts' route for `api` ("completions", "chat" or "auto": chat when the target's
// model takes chat messages; a line on stderr says which and why).
std::string resolve_api(const std::string& api, lab::Target& target, const char* command);

}  // namespace coda::cli
