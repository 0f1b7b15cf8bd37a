#include "cli/http_flags.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

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

void add_api_key_flags(CLI::App* sub, ApiKeyFlags& f) {
  sub->add_option("--api-key", f.keys,
                  "Require 'Authorization: Bearer KEY' on /v1/*; several keys comma-separated or repeated (default: "
                  "$CODA_API_KEY)")
      ->delimiter(',')
      ->allow_extra_args(false);
  sub->add_option("--api-key-file", f.file, "Read the keys from a file, one per line (kept out of the process list)");
}

namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// A key travels in an HTTP header: no whitespace or control characters inside it.
Status check_key(const std::string& key, const std::string& where) {
  for (unsigned char c : key)
    if (c <= 0x20 || c == 0x7F)
      return Error(where + ": a key contains a space or a control character; an Authorization header cannot carry it");
  return Status::Ok();
}

}  // namespace

Expected<std::vector<std::string>> read_key_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) return Error(flag + ": cannot read " + path);
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    const std::string key = trimmed(line);
    if (key.empty() || key[0] == '#') continue;  // blank lines and comments
    if (Status s = check_key(key, flag + " " + path); !s.ok()) return s.error();
    keys.push_back(key);
  }
  if (keys.empty()) return Error(flag + ": " + path + " holds no key (one key per line; # starts a comment)");
  return keys;
}

Expected<std::vector<std::string>> resolve_api_keys(const ApiKeyFlags& f) {
  std::vector<std::string> keys;
  for (const std::string& k : f.keys) {
    const std::string key = trimmed(k);
    if (key.empty()) return Error("--api-key: an empty key; give KEY or KEY1,KEY2");
    if (Status s = check_key(key, "--api-key"); !s.ok()) return s.error();
    keys.push_back(key);
  }
  if (!f.file.empty()) {
    auto from_file = read_key_file(f.file, "--api-key-file");
    if (!from_file) return from_file.error();
    keys.insert(keys.end(), from_file->begin(), from_file->end());
  }
  if (keys.empty() && f.file.empty()) {
    if (const char* env = std::getenv("CODA_API_KEY"); env != nullptr && *env != 0) {
      const std::string key = trimmed(env);
      if (Status s = check_key(key, "CODA_API_KEY"); !s.ok()) return s.error();
      if (!key.empty()) keys.push_back(key);
    }
  }
  return keys;
}

void print_access(const char* who, const std::string& host, size_t n_keys) {
  if (n_keys > 0) {
    std::fprintf(stderr, "%s: /v1/* needs an API key (%zu key%s)\n", who, n_keys, n_keys == 1 ? "" : "s");
    return;
  }
  const bool loopback = host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
  if (!loopback)
    std::fprintf(stderr,
                 "%s: warning: listening on %s without an API key: anyone who can reach the port can use it (give "
                 "--api-key, --api-key-file or $CODA_API_KEY)\n",
                 who, host.c_str());
}

void tune_allocator_for_server() {
  // One arena per core: the HTTP threads mostly wait on sockets, and more arenas only keep more
  // high-water marks (glibc's default is 8 per core).
  tune_malloc_for_server(default_threads());
}

}  // namespace coda::cli
