// What every OpenAI-compatible front end of coda (`coda serve`, `coda proxy`) does the same way:
// errors in OpenAI's shape, the API key on the guarded routes, and OpenAI-shaped answers for what
// cpp-httplib answers by itself (404 unknown route, 413 oversized body, 400 malformed request) or
// for an exception that escaped a handler (500).
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace coda {

void send_api_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                    const std::string& code = "", const std::string& param = "");

// The requests a server is answering, from routing until the last byte of the answer is written
// (cpp-httplib calls its logger then). A drain waits until none is left before it stops
// listening: cpp-httplib's stop() cuts a chunked answer short, and a stream would end without its
// last events.
class OpenRequests {
 public:
  void open(const void* request);
  void close(const void* request);
  size_t count() const;

 private:
  mutable std::mutex mu_;
  std::set<const void*> open_;
};

struct HttpApiOptions {
  std::vector<std::string> api_keys;          // any one of them opens the guarded routes; none: no key needed
  std::vector<std::string> guarded_prefixes;  // routes behind the key, e.g. "/v1/"
  size_t max_body_bytes = 0;                  // larger bodies: 413
  int read_timeout_s = 30;                    // named in the 408 message
  // True while the server drains on its way down (server/shutdown.h): every route but /health and
  // /metrics answers 503 with Retry-After, and the connection closes, so clients go elsewhere.
  std::function<bool()> draining;
  bool metrics_auth = false;  // GET /metrics behind the key too (--metrics-auth; open by default, as vLLM's)
  std::shared_ptr<OpenRequests> open_requests;  // counted when given
};

// Installs, before any route:
// - framing: a Content-Length that is not a plain byte count answers 400, one over the body limit
//   413, before a byte of the body is read (cpp-httplib 0.11 would otherwise try to read or skip
//   it and leave the client without an answer); the connection is closed after the answer, since
//   the body that may follow is not read;
// - while draining, 503 with Retry-After on every route but /health and /metrics;
// - the key check on the guarded routes (401): 'Authorization: Bearer KEY' (the scheme in any case)
//   with one of the keys, compared in time independent of where a wrong key differs;
// and, for what cpp-httplib answers by itself, OpenAI-shaped bodies: 404, 413, 408 for a body that
// stopped short of its Content-Length within the read timeout, 400 otherwise; 500 for an exception
// that escaped a handler; and on every answer an X-Request-Id (request_id_for). `on_reject` is told
// the status of every request refused there.
void install_api_handlers(httplib::Server& http, HttpApiOptions options, std::function<void(int)> on_reject);

// The request's X-Request-Id when it is one a response may echo (1 to 128 visible ASCII
// characters), else a new random one (32 hex digits, as vLLM makes them). install_api_handlers
// sets it on every answer that a handler has not given one; a handler that passes the id on (the
// proxy, to its upstream, so both servers' logs name the request alike) sets it itself.
std::string request_id_for(const httplib::Request& req);

// Whether an Authorization header value carries one of `keys` (see install_api_handlers).
bool authorized(const std::string& authorization, const std::vector<std::string>& keys);

}  // namespace coda
