// `coda proxy`: coda's guard in front of any OpenAI-compatible deployment (vLLM, llama.cpp,
// coda serve, a load balancer over many). It serves the routes `coda serve` does:
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
#include <mutex>
#include <string>

#include "client/openai_client.h"
#include "core/status.h"
#include "guard/guard.h"
#include "proxy/session.h"
#include "server/metrics.h"
#include "server/request_limits.h"

namespace coda::proxy {

struct ProxyOptions {
  client::Endpoint upstream;  // url, api key, timeouts
  std::string host = "127.0.0.1";
  int port = 8081;  // 0: any free port
  std::string api_key;
  GuardConfig guard;                  // the operator's policy and thresholds
  bool finish_reason_compat = false;  // repetition/degenerate reported as "stop"
  int64_t default_max_tokens = 8192;
  int max_connections = 256;  // requests in flight; more get 429
  int top_logprobs = 20;      // asked of the upstream; 0 guards on text alone
  int hot_tokens = 50;
  size_t max_body_bytes = size_t{8} << 20;
  int read_timeout_s = 30;  // for the client's request body
  RequestLimits limits;     // what one request may contain, as coda serve
};

class ProxyServer {
 public:
  static Expected<std::unique_ptr<ProxyServer>> create(ProxyOptions options);
  ~ProxyServer();
  Expected<int> bind();
  void serve();
  void shutdown();  // stops listening (from a signal handler); serve() returns
  void stop();      // stops listening and waits for the streams in flight to end
  Metrics& metrics() { return metrics_; }

 private:
  ProxyServer(ProxyOptions options, client::OpenAIClient upstream);
  void routes();
  void completions(const httplib::Request& req, httplib::Response& res, bool chat);
  void record(const SessionResult& r, const std::string& model, double seconds, double ttft_s);
  void record_failure(const client::Completion& c, const std::string& model);

  ProxyOptions opts_;
  client::OpenAIClient upstream_;
  std::string upstream_label_;
  Metrics metrics_{false};
  httplib::Server http_;
  std::atomic<int> in_flight_{0};
  std::mutex mu_;
  std::condition_variable idle_;
  int streams_ = 0;  // session threads still running
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace coda::proxy
