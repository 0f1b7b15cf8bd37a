#include "server/http_api.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string_view>
#include <variant>

#include "core/strings.h"
#include "server/openai_api.h"

namespace coda {

void send_api_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                    const std::string& code, const std::string& param) {
  ApiError e;
  e.status = status;
  e.message = message;
  e.type = type;
  e.code = code;
  e.param = param;
  res.status = status;
  res.set_content(dump_json(e.body()), "application/json");
}

namespace {

// A Content-Length as HTTP defines it (1*DIGIT); nullopt for anything else. A count past 64 bits
// is still a count (of more than any limit): UINT64_MAX.
std::optional<uint64_t> content_length(const std::string& v) {
  if (v.empty()) return std::nullopt;
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto d = static_cast<uint64_t>(c - '0');
    n = n > (UINT64_MAX - d) / 10 ? UINT64_MAX : n * 10 + d;
  }
  return n;
}

// The request's declared body length: nullopt without the header; an error message when the
// header is not a byte count, or is given twice with different values (a request smuggling
// pattern: front ends and servers could disagree on where the body ends).
std::optional<std::variant<uint64_t, std::string>> declared_length(const httplib::Request& req) {
  const size_t count = req.get_header_value_count("Content-Length");
  if (count == 0) return std::nullopt;
  const std::string v = req.get_header_value("Content-Length");
  for (size_t i = 1; i < count; ++i)
    if (req.get_header_value("Content-Length", i) != v)
      return "Content-Length is given " + std::to_string(count) + " times with different values.";
  const auto n = content_length(v);
  if (!n) return "Content-Length: '" + v.substr(0, 40) + "' is not a byte count.";
  return *n;
}

}  // namespace

std::string request_id_for(const httplib::Request& req) {
  const std::string given = req.get_header_value("X-Request-Id");
  const bool usable = !given.empty() && given.size() <= 128 &&
                      std::all_of(given.begin(), given.end(), [](char ch) { return ch > 0x20 && ch < 0x7F; });
  if (usable) return given;
  return random_hex_id();
}

bool authorized(const std::string& authorization, const std::vector<std::string>& keys) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  const std::string_view given = std::string_view(authorization).substr(kScheme.size());
  // Every byte of every key is compared, whatever matched before: how long a refusal takes says
  // nothing about how much of a key a guess got right. (A key's length can still show.)
  bool any = false;
  for (const std::string& key : keys) {
    unsigned diff = given.size() == key.size() ? 0u : 1u;
    for (size_t i = 0; i < key.size(); ++i)
      diff |= static_cast<unsigned char>(key[i]) ^ static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    any |= diff == 0;
  }
  return any;
}

void OpenRequests::open(const void* request) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.insert(request);
}

void OpenRequests::close(const void* request) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(request);
}

size_t OpenRequests::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.size();
}

void install_api_handlers(httplib::Server& http, HttpApiOptions o, std::function<void(int)> on_reject) {
  if (o.open_requests)
    // After the whole answer is written (an answer that never got past parsing is not open: erase
    // does nothing). A request is known by its address, unique while it is being answered.
    http.set_logger([open = o.open_requests](const httplib::Request& req, const httplib::Response&) {
      open->close(&req);
    });
  http.set_pre_routing_handler([o, on_reject](const httplib::Request& req, httplib::Response& res) {
    if (o.open_requests) o.open_requests->open(&req);
    if (const auto declared = declared_length(req)) {
      const auto* n = std::get_if<uint64_t>(&*declared);
      if (!n || (o.max_body_bytes > 0 && *n > o.max_body_bytes)) {
        const int status = n ? 413 : 400;
        on_reject(status);
        if (n)
          send_api_error(res, 413,
                         "The request body (Content-Length " + req.get_header_value("Content-Length").substr(0, 40) +
                             ") is larger than " + std::to_string(o.max_body_bytes) + " bytes.",
                         "invalid_request_error", "request_too_large");
        else
          send_api_error(res, 400, std::get<std::string>(*declared), "invalid_request_error", "invalid_content_length");
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // Health stays open and answers while draining (llama-server leaves /v1/health open too); an
    // operator may still resume a paused scheduler (/admin/) so that the drain can finish.
    const bool health = req.path == "/health" || req.path == "/v1/health";
    if (o.draining && o.draining() && !health && req.path != "/metrics" && req.path.rfind("/admin/", 0) != 0) {
      on_reject(503);
      res.set_header("Retry-After", "5");
      res.set_header("Connection", "close");
      send_api_error(res, 503,
                     "The server is shutting down and takes no new requests; retry (another replica, or this one "
                     "once it is back).",
                     "server_error", "server_shutting_down");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (o.api_keys.empty()) return httplib::Server::HandlerResponse::Unhandled;
    bool guarded = o.metrics_auth && req.path == "/metrics";
    for (const auto& p : o.guarded_prefixes) guarded = guarded || (!health && req.path.rfind(p, 0) == 0);
    if (!guarded || authorized(req.get_header_value("Authorization"), o.api_keys))
      return httplib::Server::HandlerResponse::Unhandled;
    on_reject(401);
    send_api_error(res, 401, "Incorrect API key provided. Pass it as 'Authorization: Bearer KEY'.",
                   "invalid_request_error", "invalid_api_key");
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_post_routing_handler([o](const httplib::Request& req, httplib::Response& res) {
    if (!res.has_header("X-Request-Id")) res.set_header("X-Request-Id", request_id_for(req));
    // While draining, no connection is kept alive past its answer: the server can stop sooner.
    if (o.draining && o.draining() && !res.has_header("Connection")) res.set_header("Connection", "close");
  });
  http.set_error_handler([o, on_reject](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const auto declared = content_length(req.get_header_value("Content-Length"));
    if (res.status == 400 && declared && req.body.size() < *declared) {
      // cpp-httplib gave up reading the body at the read timeout.
      on_reject(408);
      send_api_error(res, 408,
                     "The request body stopped short of its Content-Length: " + std::to_string(req.body.size()) +
                         " of " + std::to_string(*declared) + " bytes arrived within the read timeout of " +
                         std::to_string(o.read_timeout_s) + " s.",
                     "invalid_request_error", "request_timeout");
      res.set_header("Connection", "close");
      return;
    }
    on_reject(res.status);
    if (res.status == 404)
      send_api_error(
          res, 404,
          "Unknown route " + req.method + " " + req.path +
              "; see /v1/models, /v1/completions, /v1/chat/completions, /v1/responses, /v1/embeddings, /completion "
              "(llama-server's), "
              "/tokenize, /detokenize, /apply-template, /version, /health, /metrics",
          "invalid_request_error", "not_found");
    else if (res.status == 413 &&
             req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0)
      // cpp-httplib reads a form only up to 8 KiB, and a form is what `curl -d` sends by default.
      send_api_error(res, 413,
                     "The request body came as a form (Content-Type: application/x-www-form-urlencoded, what curl -d "
                     "sends unless told otherwise), which is read only up to 8,192 bytes; send the JSON with "
                     "Content-Type: application/json (curl -H 'Content-Type: application/json').",
                     "invalid_request_error", "request_too_large");
    else if (res.status == 413)
      send_api_error(res, 413, "The request body is larger than " + std::to_string(o.max_body_bytes) + " bytes.",
                     "invalid_request_error", "request_too_large");
    else
      send_api_error(res, res.status, "The request could not be processed (HTTP " + std::to_string(res.status) + ").",
                     "invalid_request_error");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_api_error(res, 500, "Internal error.", "server_error");
  });
}

}  // namespace coda
