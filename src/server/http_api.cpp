#include "server/http_api.h"

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

void install_api_handlers(httplib::Server& http, HttpApiOptions o, std::function<void(int)> on_reject) {
  http.set_pre_routing_handler([o, on_reject](const httplib::Request& req, httplib::Response& res) {
    if (o.api_key.empty()) return httplib::Server::HandlerResponse::Unhandled;
    bool guarded = false;
    for (const auto& p : o.guarded_prefixes) guarded = guarded || req.path.rfind(p, 0) == 0;
    if (!guarded || req.get_header_value("Authorization") == "Bearer " + o.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    on_reject(401);
    send_api_error(res, 401, "Incorrect API key provided. Pass it as 'Authorization: Bearer KEY'.",
                   "invalid_request_error", "invalid_api_key");
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([o, on_reject](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    on_reject(res.status);
    if (res.status == 404)
      send_api_error(res, 404,
                     "Unknown route " + req.method + " " + req.path +
                         "; see /v1/models, /v1/completions, /v1/chat/completions, /health, /metrics",
                     "invalid_request_error", "not_found");
    else if (res.status == 413)
      send_api_error(res, 413, "The request body is larger than " + std::to_string(o.max_body_bytes) + " bytes.",
                     "invalid_request_error", "request_too_large");
    else
      send_api_error(res, res.status,
                     "The request could not be processed (HTTP " + std::to_string(res.status) + ").",
                     "invalid_request_error");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_api_error(res, 500, "Internal error.", "server_error");
  });
}

}  // namespace coda
