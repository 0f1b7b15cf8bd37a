// What every OpenAI-compatible front end of coda (`coda serve`, `coda proxy`) does the same way:
// errors in OpenAI's shape, the API key on the guarded routes, and OpenAI-shaped answers for what
// cpp-httplib answers by itself (404 unknown route, 413 oversized body, 400 malformed request) or
// for an exception that escaped a handler (500).
#pragma once

#include <httplib.h>

#include <functional>
#include <string>
#include <vector>

namespace coda {

void send_api_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                    const std::string& code = "", const std::string& param = "");

struct HttpApiOptions {
  std::string api_key;                        // empty: no key needed
  std::vector<std::string> guarded_prefixes;  // routes behind the key, e.g. "/v1/"
  size_t max_body_bytes = 0;                  // named in the 413 message
};

// Installs the key check, the error handler and the exception handler. `on_reject` is told the
// status of every request refused there (for a rejection counter).
void install_api_handlers(httplib::Server& http, HttpApiOptions options, std::function<void(int)> on_reject);

}  // namespace coda
