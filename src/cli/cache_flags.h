// --cache-type-k / --cache-type-v (llama.cpp's names): how the KV cache stores keys and values.
// Every command that runs the model in-process takes them.
#pragma once

#include <CLI/CLI.hpp>

#include "model/config.h"

namespace coda::cli {

void add_cache_type_flags(CLI::App* sub, KvType& k, KvType& v);

}  // namespace coda::cli
