// `coda proxy`: coda's guard in front of any OpenAI-compatible deployment (vLLM, llama.cpp,
// coda serve, a load balancer over many), or in front of several replicas itself: each request
// goes to the upstream with the fewest requests in flight, and one that refuses the connection
// before anything reached the client is retried on another (the refusing one is skipped for
// --upstream-fail-timeout seconds). It serves the routes `coda serve` does:
// GET /health (the upstream's state), GET /metrics (the proxy's own, both planes, labelled by
// upstream and model), GET /v1/models (the upstream's), POST /v1/completions and
// /v1/chat/completions (streaming or not). Requests go upstream unchanged except for what the
// guard needs: stream on, usage on, logprobs with top_logprobs, max_tokens when the request names
// none, and coda's own `coda` field taken out. Errors keep OpenAI's shape: the upstream's status
// and body as they came, 502 for an unreachable or broken upstream, 504 when it times out.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "client/openai_client.h"
#include "core/status.h"
#include "guard/guard.h"
#include "proxy/session.h"
#include "server/http_api.h"
#include "server/http_listen.h"
#include "server/metrics.h"
#include "server/request_limits.h"
#include "server/response_store.h"

namespace coda::proxy {

struct ProxyOptions {
  client::Endpoint upstream;            // api key and timeouts for every upstream; url: the first
  std::vector<std::string> more_urls;   // further replicas of the same model, same settings
  double upstream_fail_timeout_s = 10;  // an upstream that refused a connection is skipped this long
  bool prefix_affinity = true;          // requests that begin alike go to the same replica (its prefix cache)
  std::string host = "127.0.0.1";
  int port = 8081;                               // 0: any free port
  TlsFiles tls;                                  // serve https (--ssl-certfile, --ssl-keyfile)
  std::vector<std::string> api_keys;             // empty: no key needed
  GuardConfig guard;                             // the operator's policy and thresholds (and the thinking's)
  int64_t effort_budgets[3] = {1024, 4096, -1};  // thinking budgets for reasoning_effort low, medium, high
  bool forward_budget = false;                   // --upstream-reasoning-budget forward
  bool finish_reason_compat = false;             // repetition/degenerate reported as "stop"
  int64_t default_max_tokens = 8192;
  int max_connections = 256;  // requests in flight; more get 429
  int top_logprobs = 20;      // asked of the upstream; 0 guards on text alone
  int hot_tokens = 50;
  size_t max_body_bytes = size_t{8} << 20;
  int read_timeout_s = 30;  // for the client's request body
  RequestLimits limits;     // what one request may contain, as coda serve
  // Memory for the conversations /v1/responses keeps for previous_response_id, as coda serve
  // (--responses-store MB; 0: none kept, previous_response_id refused).
  size_t responses_store_bytes = size_t{64} << 20;
  bool metrics_auth = false;       // GET /metrics behind --api-key too (--metrics-auth)
  double shutdown_timeout_s = 30;  // SIGTERM: how long requests in flight get to finish (--shutdown-timeout)
};

// Consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2018): among n
// candidates with rendezvous `scores` for a request's key and `loads` (requests in flight), the
// highest-scoring one whose load is under ceil(1.25 x (the total load + 1) / n), the mean load
// with this request counted; there is always one.
size_t bounded_rendezvous(const std::vector<uint64_t>& scores, const std::vector<int>& loads);

// One upstream engine: its client, the label its metrics carry, and its load.
struct Upstream {
  explicit Upstream(client::OpenAIClient c) : client(std::move(c)), label(client.describe()) {}
  client::OpenAIClient client;
  std::string label;
  std::atomic<int> in_flight{0};
  std::atomic<int64_t> down_until_ns{0};  // steady clock; skipped until then (unless all are)
  // What its /v1/models says it is (client::engine_of), asked at its first request and kept once
  // it answers. An upstream that is down or silent then (a vLLM still loading its model) is asked
  // again at a later request, at most every 10 s; until then it counts as Unknown.
  client::Engine engine();

 private:
  std::mutex engine_mu_;
  std::optional<client::Engine> engine_;
  int64_t engine_asked_ns_ = 0;  // steady clock; 0: never
};

class ProxyServer {
 public:
  static Expected<std::unique_ptr<ProxyServer>> create(ProxyOptions options);
  ~ProxyServer();
  Expected<int> bind();
  void serve();
  void stop();  // stops listening and waits for the streams in flight to end
  // The graceful shutdown (server/shutdown.h), as coda serve's: new requests get 503 and /health
  // "draining"; the requests in flight get `timeout_s` to finish; then every upstream generation
  // still held is cancelled (its connection closed) and its client gets a terminal answer (an error
  // event then [DONE], or 503 with Retry-After); then serve() returns. True when all finished in time.
  bool drain(double timeout_s);
  // The model label of a request's metrics: a model the upstreams serve (their /v1/models), else
  // "other", so that clients cannot grow the metrics with names of their own.
  std::string model_label(const std::string& model);
  Metrics& metrics() { return metrics_; }

 private:
  ProxyServer(ProxyOptions options, std::vector<std::unique_ptr<Upstream>> upstreams);
  void routes();
  // `llama`: llama-server's /completion, translated to /v1/completions and answered in its shape.
  // `llama`: llama-server's /completion; `responses`: OpenAI's /v1/responses (run as chat).
  void completions(const httplib::Request& req, httplib::Response& res, bool chat, bool llama = false,
                   bool responses = false);
  void record(const SessionResult& r, const std::string& model, double seconds, double ttft_s,
              const std::string& upstream);
  // `model`: the label, as record() made it with model_label().
  void record_failure(const client::Completion& c, const std::string& model, const std::string& upstream);
  // The upstream for the next request among those not marked down and not in `tried`, which it
  // marks as tried; nullptr when every one was tried. With an affinity key (a hash of how the request begins): the
  // first in the key's rendezvous order whose load is under the bound (consistent hashing with bounded loads); without
  // one: the fewest in flight, rotating among equals.
  Upstream* pick(std::vector<char>& tried, uint64_t key = 0);
  void mark_down(Upstream& u);
  // One session, moved to another upstream while the chosen one refuses the connection and the
  // client has seen nothing. `used`: the upstream that gave the result.
  SessionResult run_balanced(const nlohmann::ordered_json& body, const ClientView& view, const SessionOptions& so,
                             const Emit& emit, Upstream*& used);
  uint64_t affinity_key(const nlohmann::ordered_json& body, bool chat) const;
  // n > 1 or a batch of prompts, not streamed: each choice a guarded session of its own.
  // `fallback_id`: the body's id where the upstream gives none.
  void serve_choices(const httplib::Request& req, httplib::Response& res, const nlohmann::ordered_json& body,
                     size_t prompts, int64_t n, const ClientView& view, const SessionOptions& so,
                     const std::string& model, const std::string& fallback_id);

  ProxyOptions opts_;
  std::vector<std::unique_ptr<Upstream>> upstreams_;
  std::atomic<uint64_t> rotation_{0};
  Metrics metrics_{false};
  std::unique_ptr<ResponseStore> responses_;  // null when --responses-store is 0
  std::unique_ptr<httplib::Server> http_;     // https when the options give a certificate
  std::string tls_error_;                     // a certificate that did not load (bind() reports it)
  std::atomic<int> in_flight_{0};
  std::mutex mu_;
  std::condition_variable idle_;
  int streams_ = 0;  // session threads still running
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> draining_{false};
  int bound_port_ = 0;                                                              // the port bind() got
  std::shared_ptr<OpenRequests> open_requests_ = std::make_shared<OpenRequests>();  // SIGTERM came: no new requests
  std::atomic<bool> aborting_{false};  // the drain's time ran out: every session ends now
  std::mutex models_mu_;
  std::set<std::string> served_models_;  // guarded by models_mu_: the upstreams' model ids
  int64_t models_asked_ns_ = 0;          // guarded by models_mu_: steady clock of the last ask; 0 never
};

}  // namespace coda::proxy
