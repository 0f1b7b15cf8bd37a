// The sampling and stopping flags `coda run` and `coda chat` share, named as in llama.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/request.h"

namespace coda::cli {

// Registers --temp --top-k --top-p --min-p --typical --top-nsigma --dynatemp-range --dynatemp-exp
// --repeat-penalty --repeat-last-n --frequency-penalty --presence-penalty --dry-* --xtc-*
// --no-repeat-ngram-size --min-tokens --bad-word --ignore-eos --stop --seed on `app`, writing to
// `r`. Ranges are checked by the library, whose errors name the parameter and the allowed range.
void add_sampling_flags(CLI::App* app, GenerationRequest& r);

// The sampling flags given on the command line as OpenAI/vLLM/llama.cpp request fields (only
// those given, so a server keeps its own defaults for the rest): --temp -> temperature,
// --repeat-penalty -> repetition_penalty, --dry-multiplier -> dry_multiplier, ...
nlohmann::json sampling_fields(const CLI::App* app, const GenerationRequest& r);

}  // namespace coda::cli
