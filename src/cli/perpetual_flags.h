// Perpetual generation (the ICLR 2025 blog on perpetual text), as `coda run` and `coda chat` take
// it: an EOS before --perpetual-min-tokens is stepped back from, --perpetual-backstep tokens, and
// sampling resumes at --perpetual-start-factor x the temperature, decaying by --perpetual-decay per
// token. It works under every guard policy, --guard off included (the guard then only observes).
#pragma once

#include <CLI/CLI.hpp>

#include "guard/guard.h"

namespace coda::cli {

void add_perpetual_flags(CLI::App* sub, GuardConfig* config);

}  // namespace coda::cli
