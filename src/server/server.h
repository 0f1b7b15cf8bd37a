// `coda serve`: the OpenAI-compatible HTTP server (cpp-httplib) on top of the scheduler.
//
// Routes: GET /health, GET /metrics (Prometheus text), GET /v1/models, POST /v1/completions,
// POST /v1/chat/completions (JSON or SSE with `data: [DONE]`). Every error is OpenAI's
// {"error": {...}} with the matching status: 400 invalid parameters and context_length_exceeded,
// 401 bad or missing API key, 404 unknown model or route, 413 oversized body, 429 queue full.
// POST /v1/responses runs OpenAI's Responses API as a chat completion; POST /v1/embeddings (and
// /embeddings) answers the pooled final hidden state of each input.
// With `admin_api`: POST /admin/pause and POST /admin/resume hold and release the scheduler.
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/generator.h"
#include "server/http_api.h"
#include "server/http_listen.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/request_limits.h"
#include "server/response_store.h"
#include "server/scheduler.h"

namespace coda {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  std::vector<std::string> api_keys;  // empty: no key needed
  size_t max_body_bytes = size_t{8} << 20;
  int read_timeout_s = 30;
  int write_timeout_s = 30;
  size_t max_queue = 64;
  size_t max_batch = 8;                // sequences generated together
  int64_t kv_budget_tokens = 1 << 20;  // KV cache tokens all running sequences may hold
  int64_t prefix_cache_tokens = 0;     // of those, kept for prompt prefixes (0: no prefix cache)
  int http_threads = 0;                // --max-connections; 0: max_queue + max_batch + 8
  RequestLimits limits;
  bool admin_api = false;  // POST /admin/pause and /admin/resume (behind the API key)
  bool metrics_auth = false;  // GET /metrics behind the API key too (--metrics-auth)
  double shutdown_timeout_s = 30;  // SIGTERM: how long requests in flight get to finish (--shutdown-timeout)
  bool slots_api = true;   // GET /slots (behind the API key); --no-slots turns it off
  ServerDefaults defaults;
  TlsFiles tls;  // serve https (--ssl-certfile, --ssl-keyfile)
  std::string model_path;  // GET /props reports it, as llama-server does
  Pooling pooling = Pooling::Mean;  // how /v1/embeddings pools the final hidden states (--pooling)
  // Memory for the conversations /v1/responses keeps for previous_response_id (--responses-store
  // MB; 0: none kept, previous_response_id refused).
  size_t responses_store_bytes = size_t{64} << 20;
};

class Server {
 public:
  Server(Generator& gen, ServerOptions opts);
  ~Server();
  // Binds; returns the port (useful with port 0).
  Expected<int> bind();
  // Serves until stop(). Call after bind().
  void serve();
  void stop();
  // The graceful shutdown (server/shutdown.h): new requests get 503 and /health "draining"; the
  // requests in flight get `timeout_s` to finish, then the rest end with a 503 (or an error event
  // and [DONE] on a stream); then serve() returns. True when everything finished in time.
  bool drain(double timeout_s);
  Metrics& metrics() { return metrics_; }

 private:
  void routes();
  void completions(const httplib::Request& req, httplib::Response& res, bool chat);
  void refuse_at_capacity(httplib::Response& res, const std::string& tail);
  void refuse(httplib::Response& res, const ApiError& e);
  // llama-server's native POST /completion (server/llama_api.h).
  void llama_completion(const httplib::Request& req, httplib::Response& res);
  // vLLM's and llama.cpp's POST /tokenize and /detokenize.
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  // llama-server's POST /apply-template: a chat body's prompt as the chat template renders it.
  void apply_template(const httplib::Request& req, httplib::Response& res);
  // OpenAI's POST /v1/embeddings (server/embeddings_api.h), batched with the generations.
  void embeddings(const httplib::Request& req, httplib::Response& res);
  // OpenAI's POST /v1/responses for text and function tools (server/responses_api.h), run as a chat
  // completion.
  void responses(const httplib::Request& req, httplib::Response& res);
  void serve_choices(ApiRequest r, bool chat, const httplib::Request& req, httplib::Response& res);

  Generator& gen_;
  ServerOptions opts_;
  Metrics metrics_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ResponseStore> responses_;  // null when --responses-store is 0
  std::unique_ptr<httplib::Server> http_;  // https when the options give a certificate
  std::string tls_error_;                  // a certificate that did not load (bind() reports it)
  int64_t started_ = 0;
  std::atomic<bool> draining_{false};
  int bound_port_ = 0;  // the port bind() got
  std::shared_ptr<OpenRequests> open_requests_ = std::make_shared<OpenRequests>();
};

}  // namespace coda
