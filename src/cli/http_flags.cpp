#include "cli/http_flags.h"

#include "cli/commands.h"
#include "core/malloc_tuning.h"

namespace coda::cli {

void add_request_limit_flags(CLI::App* sub, RequestLimits& l) {
  sub->add_option("--max-messages", l.max_messages, "Chat messages per request (400 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 24));
  sub->add_option("--max-message-bytes", l.max_message_bytes, "Bytes of text in one chat message (400 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 31));
  sub->add_option("--max-tools", l.max_tools, "Tool definitions per request (400 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, size_t{1} << 16));
  sub->add_option("--max-json-depth", l.max_depth, "Nesting of objects and arrays in a request body (400 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{2}, size_t{1024}));
  sub->add_option("--max-stop", l.max_list, "Entries in stop, stop_token_ids, bad_words and logit_bias (400 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
}

void tune_allocator_for_server() {
  // One arena per core: the HTTP threads mostly wait on sockets, and more arenas only keep more
  // high-water marks (glibc's default is 8 per core).
  tune_malloc_for_server(default_threads());
}

}  // namespace coda::cli
