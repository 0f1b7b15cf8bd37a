// Flags that `coda serve` and `coda proxy` share: what one request may contain, how long a client
// may take to send it, and the allocator setup both long-running servers start with.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/request_limits.h"

namespace coda::cli {

// --max-messages, --max-message-bytes, --max-tools, --max-json-depth, --max-stop.
void add_request_limit_flags(CLI::App* sub, RequestLimits& limits);
// The keys a server accepts, as llama-server takes them: --api-key KEY[,KEY...] (several keys let a
// new one go live before the old one is retired) and --api-key-file FILE (one key per line, so no
// key shows in the process list); $CODA_API_KEY when neither is given (vLLM reads VLLM_API_KEY).
struct ApiKeyFlags {
  std::vector<std::string> keys;  // --api-key, repeated or comma-separated
  std::string file;               // --api-key-file
};
void add_api_key_flags(CLI::App* sub, ApiKeyFlags& f);
// Every key the flags name (none: the server needs no key). An unreadable file, a file without a
// key, or a key with whitespace or control characters inside is an error that says which.
Expected<std::vector<std::string>> resolve_api_keys(const ApiKeyFlags& f);
// The keys in a file, one per line (blank lines and # comments skipped); an error when it cannot be
// read, holds none, or holds one an Authorization header cannot carry. `flag` names it in messages.
Expected<std::vector<std::string>> read_key_file(const std::string& path, const std::string& flag);
// One stderr line at start on who may use the server: how many keys guard /v1/*, or a warning when
// it listens beyond loopback with none (anyone who reaches the port can generate).
void print_access(const char* who, const std::string& host, size_t n_keys);
// Bounded malloc arenas and a fixed mmap threshold (see core/malloc_tuning.h), once at start.
void tune_allocator_for_server();

}  // namespace coda::cli
