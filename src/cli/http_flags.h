// Flags that `coda serve` and `coda proxy` share: what one request may contain, how long a client
// may take to send it, and the allocator setup both long-running servers start with.
#pragma once

#include <CLI/CLI.hpp>

#include "server/request_limits.h"

namespace coda::cli {

// --max-messages, --max-message-bytes, --max-tools, --max-json-depth, --max-stop.
void add_request_limit_flags(CLI::App* sub, RequestLimits& limits);
// Bounded malloc arenas and a fixed mmap threshold (see core/malloc_tuning.h), once at start.
void tune_allocator_for_server();

}  // namespace coda::cli
