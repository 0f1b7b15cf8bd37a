#include "proxy/proxy_server.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <deque>
#include <future>
#include <memory>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>

#include "core/json_parse.h"
#include "core/malloc_tuning.h"
#include "core/strings.h"
#include "proxy/request_check.h"
#include "server/http_api.h"
#include "server/http_listen.h"
#include "server/llama_api.h"
#include "server/openai_api.h"
#include "server/responses_api.h"
#include "server/shutdown.h"

namespace coda::proxy {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

// Seconds /health gives each upstream to answer /v1/models.
constexpr double kHealthProbeTimeoutS = 5;

// At most this many of the upstreams' model ids name series (a deployment serves a handful).
constexpr size_t kMaxServedModels = 256;

// The finish reasons a series may be labelled with; an upstream's own invention counts as "other".
std::string known_finish_reason(const std::string& r) {
  static const std::set<std::string> known = {"stop",  "length",     "repetition",     "degenerate",   "abort",
                                              "error", "tool_calls", "content_filter", "function_call"};
  return known.count(r) ? r : "other";
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The client's answer for an upstream that failed before anything reached the client.
void send_upstream_failure(httplib::Response& res, const client::Completion& c, const std::string& upstream) {
  switch (c.error_kind) {
    case client::ErrorKind::Timeout:
      return send_api_error(res, 504, "The upstream " + upstream + " timed out: " + c.error, "upstream_error",
                            "upstream_timeout");
    case client::ErrorKind::Http:
      if (c.error_body.is_object() && c.error_body.contains("error")) {
        res.status = c.status;
        res.set_content(dump(c.error_body), "application/json");
        return;
      }
      return send_api_error(res, c.status, c.error, c.status >= 500 ? "upstream_error" : "invalid_request_error",
                            "upstream_http_" + std::to_string(c.status));
    case client::ErrorKind::Connection:
      // Refused (nothing listens, or the host is gone) and reset after the connection was accepted
      // (the engine crashed on this request) call for different fixes, so they read differently.
      if (!c.connected)
        return send_api_error(res, 502, "The upstream " + upstream + " refused the connection: " + c.error,
                              "upstream_error", "upstream_unreachable");
      return send_api_error(res, 502,
                            "The upstream " + upstream +
                                " accepted the connection, then closed it without an answer "
                                "(did the engine crash on this request?): " +
                                c.error,
                            "upstream_error", "upstream_connection_reset");
    default:
      return send_api_error(res, 502, "The upstream " + upstream + " sent a malformed response: " + c.error,
                            "upstream_error", "bad_upstream_response");
  }
}

// The answer to a request the proxy could not finish before it stopped (the drain's time ran out):
// 503 with Retry-After, which clients retry (never a 400, which tells them not to).
constexpr const char* kShutdownMessage =
    "The proxy is shutting down and could not finish this request in time; its upstream generation was cancelled. "
    "Retry it (on another replica if there is one).";

void send_shutdown(httplib::Response& res) {
  res.set_header("Retry-After", "5");
  send_api_error(res, 503, kShutdownMessage, "server_error", "server_shutting_down");
}

json shutdown_event() {
  return {{"error",
           {{"message", kShutdownMessage},
            {"type", "server_error"},
            {"param", nullptr},
            {"code", "server_shutting_down"}}}};
}

json error_event(const client::Completion& c, const std::string& upstream) {
  return {{"error",
           {{"message", "The upstream " + upstream + " failed mid-stream: " + c.error},
            {"type", "upstream_error"},
            {"param", nullptr},
            {"code", c.error_kind == client::ErrorKind::Timeout ? "upstream_timeout" : "upstream_error"}}}};
}

std::string client_finish_reason(const std::string& r, bool compat) {
  if (compat && (r == "repetition" || r == "degenerate")) return "stop";
  return r;
}

std::string model_of(const std::string& asked, const json& chunk) {
  if (!asked.empty()) return asked;
  if (chunk.is_object() && chunk.contains("model") && chunk["model"].is_string())
    return chunk["model"].get<std::string>();
  return "";
}

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

// Logprobs in the shape of the client's route: chat `content[]`, or the legacy arrays.
json logprobs_json(const std::vector<client::TokenLogprob>& lps, bool chat, size_t& text_offset) {
  if (chat) {
    json content = json::array();
    for (const auto& t : lps) {
      json e{{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}};
      json top = json::array();
      for (const auto& a : t.top)
        top.push_back({{"token", a.token}, {"logprob", a.logprob}, {"bytes", bytes_of(a.token)}});
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", content}};
  }
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& t : lps) {
    tokens.push_back(t.token);
    values.push_back(t.logprob);
    json top = json::object();
    for (const auto& a : t.top) top[a.token] = a.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += t.token.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// What a client sees of one request: the chunk and body shapes, built on the upstream's own chunk
// (its id, model, created and any field coda does not know), with the text the proxy released.
struct Shaper {
  bool chat;
  ClientView view;
  std::string fallback_id;
  size_t text_offset = 0;
  bool first = true;

  json head(const json& upstream_chunk, bool chunk) const {
    json j = upstream_chunk.is_object() ? upstream_chunk : json::object();
    j.erase("usage");
    j.erase("choices");
    j.erase("coda");
    if (!j.contains("id")) j["id"] = fallback_id;
    if (!j.contains("created")) j["created"] = static_cast<int64_t>(std::time(nullptr));
    if (!j.contains("model")) j["model"] = "unknown";
    j["object"] = chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return j;
  }
  json chunk(const json& upstream_chunk, const Released& out, const std::vector<client::TokenLogprob>& lps,
             const char* finish_reason) {
    const std::string& text = out.content;
    json j = head(upstream_chunk, true);
    json choice{{"index", 0}};
    if (chat) {
      json delta = json::object();
      if (first) delta["role"] = "assistant";
      if (!text.empty() || first) delta["content"] = text;
      if (!out.reasoning.empty()) delta[out.reasoning_key] = out.reasoning;
      if (!out.tool_calls.is_null()) delta["tool_calls"] = out.tool_calls;
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = text;
    }
    first = false;
    choice["logprobs"] = view.logprobs && !lps.empty() ? logprobs_json(lps, chat, text_offset) : json(nullptr);
    choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
    j["choices"] = json::array({choice});
    return j;
  }
};

json usage_of(const SessionResult& r) {
  const int64_t p = std::max<int64_t>(0, r.prompt_tokens), c = std::max<int64_t>(0, r.completion_tokens);
  json u{{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
  // The upstream's own count when one request made the reply; the guard's count of the units in the
  // thinking when the proxy closed it (a continuation) or the upstream did not say.
  const int64_t reasoning = r.upstream_requests <= 1 && r.upstream_reasoning_tokens >= 0 ? r.upstream_reasoning_tokens
                            : r.report.thinking                                          ? r.report.reasoning_tokens
                                                                                         : -1;
  if (reasoning >= 0) u["completion_tokens_details"] = {{"reasoning_tokens", std::min(reasoning, c)}};
  return u;
}

// One choice of a body that is not streamed: what the guard released, as OpenAI shapes it.
json choice_of(const SessionResult& r, const std::vector<client::TokenLogprob>& lps, const ClientView& view,
               const std::string& finish_reason) {
  json choice{{"index", 0}};
  if (view.chat) {
    // OpenAI's message: content null beside tool calls that stand alone.
    choice["message"] = {{"role", "assistant"},
                         {"content", r.text.empty() && !r.tool_calls.is_null() ? json(nullptr) : json(r.text)}};
    if (!r.reasoning.empty()) choice["message"][r.reasoning_key] = r.reasoning;
    if (!r.tool_calls.is_null()) choice["message"]["tool_calls"] = r.tool_calls;
  } else {
    choice["text"] = r.text;
  }
  size_t offset = 0;
  choice["logprobs"] = view.logprobs && !lps.empty() ? logprobs_json(lps, view.chat, offset) : json(nullptr);
  choice["finish_reason"] = finish_reason;
  choice["stop_reason"] = r.stop_reason.empty() ? json(nullptr) : json(r.stop_reason);
  return choice;
}

// A completion request's prompts when it sends a batch (a list of strings, or a list of token-id
// lists) of more than one; 1 otherwise (a string, one token-id list, a list of one).
size_t batch_size(const json& body, bool chat) {
  if (chat || !body.contains("prompt") || !body["prompt"].is_array()) return 1;
  const json& p = body["prompt"];
  if (p.size() < 2) return 1;
  const bool strings = std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_string(); });
  const bool lists = std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_array(); });
  return strings || lists ? p.size() : 1;
}

json report_of(const SessionResult& r) {
  json j = json::parse(dump_json(r.report.to_json()));
  j["proxy"] = {{"upstream_requests", r.upstream_requests},    {"upstream_cancellations", r.upstream_cancellations},
                {"upstream_overrun", r.upstream_overrun},      {"guarded_on", r.text_only ? "text" : "tokens"},
                {"logprobs_refused", r.logprobs_refused},      {"usage_estimated", r.usage_estimated},
                {"perpetual_backsteps", r.perpetual_backsteps}};
  return j;
}

// llama-server's answer to a /completion request (`body` as translated into OpenAI's), from what
// the upstream gave: no token ids (an OpenAI-compatible upstream sends none), times as the proxy saw
// them (the prompt until the first text, the rest after it).
json llama_answer_of(const SessionResult& r, const json& body, const std::string& model, double ttft_s, double total_s,
                     bool final_of_stream) {
  LlamaAnswer a;
  a.text = r.text;
  a.finish_reason = r.finish_reason;
  if (r.finish_reason == "stop") a.stopping_word = r.stop_reason;
  a.prompt = body.value("prompt", json()).is_string() ? body["prompt"].get<std::string>() : "";
  a.model = model;
  a.prompt_tokens = std::max<int64_t>(0, r.prompt_tokens);
  a.completion_tokens = std::max<int64_t>(0, r.completion_tokens);
  a.prompt_ms = ttft_s > 0 ? 1e3 * ttft_s : 0;
  a.predicted_ms = ttft_s > 0 ? 1e3 * (total_s - ttft_s) : 0;
  a.settings = {{"n_predict", body.value("max_tokens", json(-1))}, {"model", model}};
  for (const char* k : {"seed", "temperature", "top_k", "top_p", "min_p", "stop", "stream"})
    if (body.contains(k)) a.settings[k] = body[k];
  a.report = report_of(r);
  return llama_answer_json(a, final_of_stream);
}

// Everything one streaming request passes between its session thread and its HTTP thread.
struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> events;  // SSE lines, ready to write
  bool started = false;            // the first text went out: the status is 200 from here
  bool finished = false;
  std::atomic<bool> client_gone{false};
  SessionResult result;
  std::string upstream;    // the one that gave the result
  bool shut_down = false;  // ended by the drain's timeout while the client was still there
};

}  // namespace

Expected<std::unique_ptr<ProxyServer>> ProxyServer::create(ProxyOptions options) {
  std::vector<std::unique_ptr<Upstream>> ups;
  std::vector<std::string> urls{options.upstream.url};
  urls.insert(urls.end(), options.more_urls.begin(), options.more_urls.end());
  for (const auto& url : urls) {
    client::Endpoint ep = options.upstream;
    ep.url = url;
    auto up = client::OpenAIClient::create(ep);
    if (!up) return Error("--upstream " + client::redact_url(url) + ": " + up.message());
    for (const auto& u : ups)
      if (u->label == up->describe()) return Error("--upstream " + url + ": given twice");
    ups.push_back(std::make_unique<Upstream>(std::move(*up)));
  }
  if (!(options.upstream_fail_timeout_s >= 0)) return Error("--upstream-fail-timeout: must be 0 or more seconds");
  if (options.max_connections < 1) return Error("--max-connections: must be at least 1");
  if (options.default_max_tokens < 1) return Error("--default-max-tokens: must be at least 1");
  if (options.top_logprobs < 0 || options.top_logprobs > 20) return Error("--upstream-top-logprobs: must be in 0..20");
  return std::unique_ptr<ProxyServer>(new ProxyServer(std::move(options), std::move(ups)));
}

ProxyServer::ProxyServer(ProxyOptions options, std::vector<std::unique_ptr<Upstream>> upstreams)
    : opts_(std::move(options)), upstreams_(std::move(upstreams)) {
  if (opts_.responses_store_bytes > 0) responses_ = std::make_unique<ResponseStore>(opts_.responses_store_bytes);
  const int threads = opts_.max_connections + 8;
  http_ = make_http_server(opts_.tls, tls_error_);  // bind() reports a certificate that did not load
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(opts_.max_body_bytes);
  http_->set_read_timeout(opts_.read_timeout_s, 0);
  const std::vector<double> tokens = {16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768};
  const std::vector<double> latency = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  metrics_.define_histogram("coda:request_generation_tokens", tokens, "Tokens the client received per request.");
  define_reasoning_metrics(metrics_);
  metrics_.define_histogram("coda:guard_tokens_saved", tokens,
                            "Tokens of max_tokens left ungenerated because the guard stopped the request.");
  metrics_.define_histogram("coda:e2e_request_latency_seconds", latency, "End-to-end request latency.");
  metrics_.define_histogram("coda:time_to_first_token_seconds", latency, "Time to the first text sent to the client.");
  metrics_.set_help("coda:num_requests_running", "Requests in flight through the proxy, by upstream.");
  metrics_.set_help("coda:passthrough_requests_total",
                    "Requests to the upstream's other /v1 routes (embeddings, rerank, ...), passed through unwatched.");
  metrics_.set_help("coda:upstream_failovers_total",
                    "Requests moved to another upstream after this one refused the connection.");
  metrics_.set_help("coda:request_success_total", "Finished requests by finish_reason.");
  metrics_.set_help("coda:request_rejected_total", "Requests refused by the proxy itself, by HTTP status.");
  metrics_.set_help("coda:guard_events_total", "Degeneration guard events by type.");
  metrics_.set_help("coda:guard_stops_total", "Requests the guard stopped (finish_reason repetition or degenerate).");
  metrics_.set_help("coda:guard_repairs_total", "Repairs made by the guard.");
  metrics_.set_help("coda:upstream_requests_total", "Requests sent upstream (a repair sends more than one).");
  metrics_.set_help("coda:upstream_cancellations_total",
                    "Upstream generations the proxy cancelled by closing the stream (guard or client).");
  metrics_.set_help("coda:upstream_overruns_total",
                    "Generations cut at max_tokens because the upstream wrote past the max_tokens it was sent.");
  metrics_.set_help("coda:upstream_errors_total", "Upstream failures by HTTP status or kind (connection, timeout).");
  metrics_.set_help("coda:guard_text_only_total",
                    "Requests guarded on text alone (the upstream sent no logprobs): no entropy signals.");
  metrics_.set_help("coda:upstream_logprobs_refused_total",
                    "Requests the upstream refused with logprobs (retried "
                    "without).");
  metrics_.set_help("coda:prompt_tokens_total", "Prompt tokens reported by the upstream.");
  metrics_.set_help("coda:generation_tokens_total", "Tokens the clients received.");
  for (const auto& u : upstreams_) metrics_.set_gauge("coda:num_requests_running", 0, {{"upstream", u->label}});
  routes();
}

namespace {

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Up to `limit` bytes of a value's text to `head`: a string's first bytes; an array's items in turn
// (chat content parts by their text, or a prompt's token ids); a number as written. Each value
// ends with a separator, so that moving bytes from one to the next changes the result.
void append_head(std::string& head, size_t limit, const json& v) {
  if (head.size() >= limit) return;
  if (v.is_string()) {
    head.append(v.get_ref<const std::string&>(), 0, limit - head.size());
  } else if (v.is_array()) {
    for (const auto& part : v)
      append_head(head, limit, part.is_object() && part.contains("text") ? part["text"] : part);
  } else if (!v.is_object()) {
    head += dump(v);
  }
  head += '\x1f';
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer: spreads the bits of a combined hash
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

size_t bounded_rendezvous(const std::vector<uint64_t>& scores, const std::vector<int>& loads) {
  const auto n = static_cast<int64_t>(loads.size());
  int64_t total = 1;
  for (int l : loads) total += l;
  const int64_t bound = (5 * total + 4 * n - 1) / (4 * n);  // ceil(1.25 total / n)
  size_t best = loads.size();
  for (size_t i = 0; i < loads.size(); ++i)
    if (loads[i] < bound && (best == loads.size() || scores[i] > scores[best])) best = i;
  return best;  // some load is below the mean, hence below the bound
}

uint64_t ProxyServer::affinity_key(const json& body, bool chat) const {
  if (!opts_.prefix_affinity || upstreams_.size() < 2) return 0;
  // How the request begins, as the upstream's prefix cache sees it: a chat's messages up to and
  // including the first user message (the system prompt and the question, which every later turn
  // of the conversation repeats), or a completion prompt's first 512 bytes.
  // Only those bytes are copied: a long system prompt or an inline image is not serialized whole.
  std::string head;
  const size_t limit = chat ? 1024 : 512;
  auto take = [&](const json& v) { append_head(head, limit, v); };
  if (chat && body.contains("messages") && body["messages"].is_array()) {
    for (const auto& m : body["messages"]) {
      if (!m.is_object()) continue;
      take(m.value("role", json("")));
      take(m.value("content", json("")));
      if (head.size() >= limit || m.value("role", json("")) == "user") break;
    }
  } else if (!chat && body.contains("prompt")) {
    take(body["prompt"]);
  }
  if (head.size() > limit) head.resize(limit);
  if (head.empty()) return 0;
  return fnv1a(head) | 1;  // 0 means no key
}

Upstream* ProxyServer::pick(std::vector<char>& tried, uint64_t key) {
  const int64_t now = Clock::now().time_since_epoch().count();
  // The candidates (indices): those up and not yet tried; when none is up, the ones down (still
  // worth a try when nothing else is left).
  std::vector<size_t> cands;
  for (int pass = 0; pass < 2 && cands.empty(); ++pass)
    for (size_t i = 0; i < upstreams_.size(); ++i)
      if (!tried[i] && (pass == 1 || upstreams_[i]->down_until_ns.load() <= now)) cands.push_back(i);
  if (cands.empty()) return nullptr;
  std::vector<int> loads;
  for (size_t i : cands) loads.push_back(upstreams_[i]->in_flight.load());
  size_t chosen = 0;
  if (key != 0 && cands.size() > 1) {
    // Rendezvous scores: a replica that goes away moves only its own keys.
    std::vector<uint64_t> scores;
    for (size_t i : cands) scores.push_back(mix(key ^ fnv1a(upstreams_[i]->label)));
    chosen = bounded_rendezvous(scores, loads);
  } else {
    // The fewest in flight, and among equals the next in turn.
    const int least = *std::min_element(loads.begin(), loads.end());
    std::vector<size_t> idlest;
    for (size_t k = 0; k < cands.size(); ++k)
      if (loads[k] == least) idlest.push_back(k);
    chosen = idlest[static_cast<size_t>(rotation_.fetch_add(1) % idlest.size())];
  }
  tried[cands[chosen]] = 1;
  return upstreams_[cands[chosen]].get();
}

client::Engine Upstream::engine() {
  std::lock_guard<std::mutex> lock(engine_mu_);
  if (engine_) return *engine_;
  const int64_t now = Clock::now().time_since_epoch().count();
  const int64_t retry_after = std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(10)).count();
  if (engine_asked_ns_ != 0 && now - engine_asked_ns_ < retry_after) return client::Engine::Unknown;
  engine_asked_ns_ = now;
  engine_ = client::engine_of(client, 5);
  return engine_.value_or(client::Engine::Unknown);
}

void ProxyServer::mark_down(Upstream& u) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(opts_.upstream_fail_timeout_s));
  u.down_until_ns = until.time_since_epoch().count();
}

SessionResult ProxyServer::run_balanced(const json& body, const ClientView& view, const SessionOptions& so,
                                        const Emit& emit, Upstream*& used) {
  std::vector<char> tried(upstreams_.size(), 0);
  SessionResult r;
  const uint64_t key = affinity_key(body, view.chat);
  while (Upstream* u = pick(tried, key)) {
    used = u;
    metrics_.set_gauge("coda:num_requests_running", u->in_flight.fetch_add(1) + 1, {{"upstream", u->label}});
    SessionOptions here = so;
    here.engine = [u] { return u->engine(); };
    // A drain whose time ran out ends every session as if its client had left: the upstream
    // connection closes (the engine aborts), and the handler answers the client (send_shutdown).
    here.client_left = [this, left = so.client_left] { return aborting_.load() || (left && left()); };
    const Emit guarded = [this, &emit](const Released& out, const std::vector<client::TokenLogprob>& lps,
                                       const json& chunk) { return !aborting_.load() && emit(out, lps, chunk); };
    r = run_session(u->client, body, view, here, guarded);
    metrics_.set_gauge("coda:num_requests_running", u->in_flight.fetch_sub(1) - 1, {{"upstream", u->label}});
    // Refused, unreachable (a connect timeout: a host that is gone), or dropped before the client
    // saw anything: another replica can take the request whole. A read timeout is not retried:
    // that replica may be generating.
    const bool refused = !r.ok && (r.failure.error_kind == client::ErrorKind::Connection || !r.failure.connected) &&
                         !r.emitted && !r.client_gone;
    if (!refused) break;
    mark_down(*u);
    if (std::find(tried.begin(), tried.end(), 0) == tried.end()) break;
    metrics_.add("coda:upstream_failovers_total", 1, {{"upstream", u->label}});
    metrics_.add("coda:upstream_errors_total", 1, {{"upstream", u->label}, {"model", ""}, {"status", "connection"}});
  }
  return r;
}

ProxyServer::~ProxyServer() {
  stop();
}

Expected<int> ProxyServer::bind() {
  if (!tls_error_.empty()) return Error(tls_error_);
  auto port = bind_http(*http_, opts_.host, opts_.port);
  if (port) bound_port_ = *port;
  return port;
}

void ProxyServer::serve() {
  http_->listen_after_bind();
}

bool ProxyServer::drain(double timeout_s) {
  draining_ = true;
  auto idle = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_.load() == 0 && streams_ == 0;
  };
  const bool finished = wait_until(idle, deadline_in(timeout_s));
  if (!finished) {
    // Every session sees its caller gone: its upstream connection closes (the engine aborts the
    // generation) and its client gets the shutdown's answer instead of a silent cut.
    aborting_ = true;
    wait_until(idle, deadline_in(5));
  }
  stop_when_answered(*http_, *open_requests_, bound_port_);
  return finished;
}

std::string ProxyServer::model_label(const std::string& model) {
  if (model.empty()) return model;
  const int64_t now = Clock::now().time_since_epoch().count();
  {
    std::lock_guard<std::mutex> lock(models_mu_);
    if (served_models_.count(model)) return model;
    // An unknown name asks the upstreams again, at most every 10 s (a model loaded since).
    const int64_t every = std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(10)).count();
    if (models_asked_ns_ != 0 && now - models_asked_ns_ < every) return "other";
    models_asked_ns_ = now;
  }
  std::set<std::string> ids;
  for (const auto& u : upstreams_) {
    auto list = u->client.get_json("/v1/models", nullptr, 2);
    if (!list || !list->is_object() || !list->contains("data") || !(*list)["data"].is_array()) continue;
    for (const auto& m : (*list)["data"])
      if (m.is_object() && m.contains("id") && m["id"].is_string() && ids.size() < kMaxServedModels &&
          m["id"].get_ref<const std::string&>().size() <= kMaxLabelValueBytes)
        ids.insert(m["id"].get<std::string>());
  }
  std::lock_guard<std::mutex> lock(models_mu_);
  if (!ids.empty()) served_models_ = std::move(ids);
  return served_models_.count(model) ? model : "other";
}

void ProxyServer::stop() {
  http_->stop();
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return streams_ == 0; });
}

void ProxyServer::record_failure(const client::Completion& c, const std::string& model, const std::string& upstream) {
  std::string what =
      c.error_kind == client::ErrorKind::Http ? std::to_string(c.status) : client::to_string(c.error_kind);
  metrics_.add("coda:upstream_errors_total", 1, {{"upstream", upstream}, {"model", model}, {"status", what}});
  metrics_.add("coda:request_success_total", 1,
               {{"finished_reason", "error"}, {"upstream", upstream}, {"model", model}});
}

void ProxyServer::record(const SessionResult& r, const std::string& asked_model, double seconds, double ttft_s,
                         const std::string& upstream) {
  const std::string model = model_label(asked_model);
  const MetricLabels l{{"upstream", upstream}, {"model", model}};
  auto with = [&](const char* k, const std::string& v) {
    MetricLabels x{{k, v}};
    x.insert(x.end(), l.begin(), l.end());
    return x;
  };
  metrics_.add("coda:upstream_requests_total", r.upstream_requests, l);
  if (r.upstream_cancellations) metrics_.add("coda:upstream_cancellations_total", r.upstream_cancellations, l);
  if (r.upstream_overrun) metrics_.add("coda:upstream_overruns_total", 1, l);
  if (!r.ok) {
    record_failure(r.failure, model, upstream);
    return;
  }
  metrics_.add("coda:request_success_total", 1, with("finished_reason", known_finish_reason(r.finish_reason)));
  for (const auto& e : r.report.events) metrics_.add("coda:guard_events_total", 1, with("type", e.type));
  record_reasoning(metrics_, r.report, l);
  if (!r.report.repairs.empty())
    metrics_.add("coda:guard_repairs_total", static_cast<double>(r.report.repairs.size()), l);
  if (r.finish_reason == "repetition" || r.finish_reason == "degenerate") {
    metrics_.add("coda:guard_stops_total", 1, l);
    metrics_.observe("coda:guard_tokens_saved", static_cast<double>(r.tokens_saved), l);
  }
  if (r.text_only) metrics_.add("coda:guard_text_only_total", 1, l);
  if (r.logprobs_refused) metrics_.add("coda:upstream_logprobs_refused_total", 1, l);
  if (r.prompt_tokens > 0) metrics_.add("coda:prompt_tokens_total", static_cast<double>(r.prompt_tokens), l);
  metrics_.add("coda:generation_tokens_total", static_cast<double>(std::max<int64_t>(0, r.completion_tokens)), l);
  metrics_.observe("coda:request_generation_tokens", static_cast<double>(std::max<int64_t>(0, r.completion_tokens)), l);
  metrics_.observe("coda:e2e_request_latency_seconds", seconds, l);
  if (ttft_s >= 0) metrics_.observe("coda:time_to_first_token_seconds", ttft_s, l);
}

void ProxyServer::routes() {
  install_api_handlers(*http_,
                       {opts_.api_keys,
                        {"/v1/", "/tokenize", "/detokenize", "/apply-template", "/completion", "/props", "/slots"},
                        opts_.max_body_bytes,
                        opts_.read_timeout_s,
                        [this] { return draining_.load(); },
                        opts_.metrics_auth,
                        open_requests_},
                       [this](int status) {
                         metrics_.add("coda:request_rejected_total", 1, {{"status", std::to_string(status)}});
                       });
  // /health: ok while any upstream answers /v1/models; each upstream's state beside. The upstreams
  // are asked at once and given a few seconds: a load balancer's probe must not wait out the
  // upstream read timeout (minutes) behind one hung replica.
  // GET `path` from every upstream at once, each given a probe's few seconds; answers in upstream order.
  auto ask_every_upstream = [this](const std::string& path) {
    std::vector<std::future<Expected<json>>> asks;
    for (const auto& u : upstreams_)
      asks.push_back(std::async(std::launch::async, [&client = u->client, path] {
        return client.get_json(path, nullptr, kHealthProbeTimeoutS);
      }));
    std::vector<Expected<json>> answers;
    for (auto& a : asks) answers.push_back(a.get());
    return answers;
  };
  auto health = [this, ask_every_upstream](const httplib::Request&, httplib::Response& res) {
    if (draining_) {  // a load balancer's probe takes the proxy out of rotation
      res.status = 503;
      return res.set_content(dump(json{{"status", "draining"}}), "application/json");
    }
    json each = json::array();
    std::string first_error;
    bool any = false;
    auto probes = ask_every_upstream("/v1/models");
    for (size_t i = 0; i < upstreams_.size(); ++i) {
      const auto& u = upstreams_[i];
      auto& models = probes[i];
      json e{{"upstream", u->label}, {"status", models ? "ok" : "unavailable"}, {"in_flight", u->in_flight.load()}};
      if (!models) {
        e["error"] = models.message();
        if (first_error.empty()) first_error = models.message();
      }
      any = any || static_cast<bool>(models);
      each.push_back(std::move(e));
    }
    json body{{"status", any ? "ok" : "unavailable"}, {"upstream", upstreams_[0]->label}};
    if (!any) body["error"] = first_error;
    if (upstreams_.size() > 1) body["upstreams"] = std::move(each);
    res.status = any ? 200 : 503;
    res.set_content(dump(body), "application/json");
  };
  http_->Get("/health", health);
  http_->Get("/v1/health", health);  // llama-server's alias, open under --api-key as there
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.prometheus(), "text/plain; version=0.0.4");
  });
  // The routes that are not generations (models, tokenizer, version) go to the least busy upstream,
  // and to the next one when it cannot be reached; an answer (an error included) comes back with
  // its status, as the engine gave it.
  auto pass = [this](const std::string& path, const std::string* body, httplib::Response& res) {
    std::vector<char> tried(upstreams_.size(), 0);
    Upstream* u = nullptr;
    Expected<json> answer = Error("no upstream");
    int status = 0;
    while ((u = pick(tried)) != nullptr) {
      status = 0;
      answer = body ? u->client.post_json(path, *body, &status) : u->client.get_json(path, &status);
      if (answer || status != 0) break;  // an HTTP answer: this upstream is up
      mark_down(*u);
      metrics_.add("coda:upstream_errors_total", 1, {{"upstream", u->label}, {"model", ""}, {"status", "connection"}});
    }
    if (!answer) {
      if (status != 0)
        metrics_.add("coda:upstream_errors_total", 1,
                     {{"upstream", u->label}, {"model", ""}, {"status", std::to_string(status)}});
      const std::string who = u != nullptr ? u->label : upstreams_.back()->label;
      return send_api_error(res, status >= 400 ? status : 502, "The upstream " + who + ": " + answer.message(),
                            "upstream_error", path == "/v1/models" ? "upstream_models" : "upstream_" + path.substr(1));
    }
    res.status = status ? status : 200;
    res.set_content(dump(*answer), "application/json");
  };
  http_->Get("/v1/models", [pass](const httplib::Request&, httplib::Response& s) { pass("/v1/models", nullptr, s); });
  // OpenAI's "retrieve model", answered from the upstream's list so that it works whether or not
  // the engine serves the route. An upstream's error comes back as it is.
  http_->Get(R"(/v1/models/(.+))", [pass](const httplib::Request& q, httplib::Response& s) {
    pass("/v1/models", nullptr, s);
    if (s.status != 200) return;
    const json list = json::parse(s.body, nullptr, false);
    if (list.is_object() && list.contains("data") && list["data"].is_array())
      for (const auto& m : list["data"])
        if (m.is_object() && m.value("id", json()) == q.matches[1].str())
          return s.set_content(dump(m), "application/json");
    send_api_error(s, 404,
                   "The model `" + q.matches[1].str().substr(0, 200) +
                       "` does not exist upstream; GET /v1/models lists what it serves.",
                   "invalid_request_error", "model_not_found");
  });
  for (const char* path : {"/tokenize", "/detokenize", "/apply-template"})
    http_->Post(path, [pass, path](const httplib::Request& q, httplib::Response& s) { pass(path, &q.body, s); });
  http_->Get("/version", [pass](const httplib::Request&, httplib::Response& s) { pass("/version", nullptr, s); });
  http_->Get("/props", [pass](const httplib::Request&, httplib::Response& s) { pass("/props", nullptr, s); });
  // llama-server's GET /slots over every replica: each upstream that serves it is asked at once (a
  // probe's few seconds, as /health), and their slots come back in one array, each marked with its
  // `upstream`, so a monitor pointed at the proxy sees the whole pool. `fail_on_no_slot` answers
  // 503 when no replica has an idle slot.
  http_->Get("/slots", [this, ask_every_upstream](const httplib::Request& q, httplib::Response& res) {
    auto answers = ask_every_upstream("/slots");
    json all = json::array();
    std::string first_error;
    bool any = false;
    for (size_t i = 0; i < upstreams_.size(); ++i) {
      auto& slots = answers[i];
      if (!slots || !slots->is_array()) {
        if (first_error.empty())
          first_error = upstreams_[i]->label + ": " + (slots ? "not a list of slots" : slots.message());
        continue;
      }
      any = true;
      for (auto& slot : *slots) {
        if (!slot.is_object()) continue;
        slot["upstream"] = upstreams_[i]->label;
        all.push_back(std::move(slot));
      }
    }
    if (!any)
      return send_api_error(res, 502, "No upstream answered GET /slots (" + first_error + ")", "upstream_error",
                            "upstream_slots");
    // A slot is idle by llama-server's `is_processing: false`, or by `state: 0` in the older shape
    // that ik_llama.cpp's server still sends.
    const bool idle = std::any_of(all.begin(), all.end(), [](const json& x) {
      if (x.contains("is_processing") && x["is_processing"].is_boolean()) return !x["is_processing"].get<bool>();
      return x.contains("state") && x["state"].is_number_integer() && x["state"].get<int64_t>() == 0;
    });
    if (q.has_param("fail_on_no_slot") && !idle)
      return send_api_error(res, 503, "No slot available on any upstream", "unavailable_error");
    res.set_content(dump(all), "application/json");
  });
  http_->Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& s) { completions(q, s, false); });
  http_->Post("/v1/chat/completions",
              [this](const httplib::Request& q, httplib::Response& s) { completions(q, s, true); });
  // llama-server's own dialect, guarded like the rest: sent upstream as /v1/completions and
  // answered in llama-server's shape (server/llama_api.h).
  for (const char* path : {"/completion", "/completions"})
    http_->Post(path, [this](const httplib::Request& q, httplib::Response& s) { completions(q, s, false, true); });
  // OpenAI's Responses API for text, guarded as chat: sent upstream as /v1/chat/completions and
  // answered as a response object or its typed events (server/responses_api.h).
  http_->Post("/v1/responses",
              [this](const httplib::Request& q, httplib::Response& s) { completions(q, s, true, false, true); });
  // The responses the proxy made are kept here, not upstream.
  http_->Get(R"(/v1/responses/([^/]+))", [this](const httplib::Request& q, httplib::Response& s) {
    answer_stored_response(responses_.get(), q.matches[1].str(), false, s);
  });
  http_->Delete(R"(/v1/responses/([^/]+))", [this](const httplib::Request& q, httplib::Response& s) {
    answer_stored_response(responses_.get(), q.matches[1].str(), true, s);
  });
  // The engine's other /v1 routes (embeddings, rerank, score, ...): clients that share one base URL
  // keep working behind the proxy. They are not watched (the guard watches completions and chat),
  // and pass through as JSON, counted by route.
  auto other = [this, pass](const httplib::Request& q, httplib::Response& s, bool post) {
    const std::string type = q.get_header_value("Content-Type");
    if (post && (q.is_multipart_form_data() || (!type.empty() && type.find("json") == std::string::npos))) {
      metrics_.add("coda:request_rejected_total", 1, {{"status", "415"}});
      return send_api_error(s, 415,
                            "Only JSON bodies pass through the guard proxy (" + q.path + " sent " + type +
                                "); send it to the upstream directly",
                            "invalid_request_error", "unsupported_media_type");
    }
    // Answers pass through whole, as JSON: a stream there would come back as one late lump.
    if (post) {
      const json b = parse_ordered_json(q.body);
      if (b.is_object() && b.contains("stream") && b["stream"].is_boolean() && b["stream"].get<bool>()) {
        metrics_.add("coda:request_rejected_total", 1, {{"status", "400"}});
        return send_api_error(s, 400,
                              "stream: the guard proxy streams /v1/completions and /v1/chat/completions; " + q.path +
                                  " passes through whole, so send it with stream false or to the upstream directly",
                              "invalid_request_error", "", "stream");
      }
    }
    // The route names a series only when it is a known one: a client's made-up paths must not grow
    // the metrics without bound.
    static const std::set<std::string> known = {"/v1/embeddings", "/v1/rerank",  "/v1/score",      "/v1/responses",
                                                "/v1/classify",   "/v1/pooling", "/v1/moderations"};
    // The path goes upstream as the client wrote it, not decoded (cpp-httplib's q.path is), with
    // its query string. A path that could leave /v1 on the upstream (dot segments, written out or
    // percent-encoded, or an encoded slash or backslash) is refused.
    std::string raw = q.target.empty() ? q.path : q.target;
    const size_t query = raw.find('?');
    const std::string raw_path = raw.substr(0, query);
    std::string lower = raw_path;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    bool dot_segment = false;
    for (size_t b = 0; b <= q.path.size();) {
      const size_t e = std::min(q.path.find('/', b), q.path.size());
      const std::string_view seg(q.path.data() + b, e - b);
      dot_segment = dot_segment || seg == "." || seg == "..";
      b = e + 1;
    }
    if (dot_segment || lower.find("%2f") != std::string::npos || lower.find("%5c") != std::string::npos ||
        raw_path.find('\\') != std::string::npos || raw_path.rfind("/v1/", 0) != 0) {
      metrics_.add("coda:request_rejected_total", 1, {{"status", "400"}});
      return send_api_error(s, 400,
                            "The path " + raw_path.substr(0, 200) +
                                " is not passed through: dot segments (. and .., also as %2e) and encoded slashes "
                                "(%2f, %5c) are refused",
                            "invalid_request_error", "invalid_path");
    }
    metrics_.add("coda:passthrough_requests_total", 1, {{"route", known.count(q.path) ? q.path : "other"}});
    pass(raw, post ? &q.body : nullptr, s);
  };
  http_->Post(R"(/v1/.+)", [other](const httplib::Request& q, httplib::Response& s) { other(q, s, true); });
  http_->Get(R"(/v1/.+)", [other](const httplib::Request& q, httplib::Response& s) { other(q, s, false); });
}

void ProxyServer::completions(const httplib::Request& req, httplib::Response& res, bool chat, bool llama,
                              bool responses) {
  const TrimAfterLargeBody trim(req.body.size());  // as coda serve
  auto reject = [&](int status, const std::string& message, const std::string& param, const std::string& code = "") {
    metrics_.add("coda:request_rejected_total", 1, {{"status", std::to_string(status)}});
    send_api_error(res, status, message, status == 429 ? "rate_limit_exceeded" : "invalid_request_error", code, param);
  };
  if (auto e = check_request_limits(req.body, opts_.limits)) return reject(e->status, e->message, e->param);
  json body = parse_ordered_json(req.body);
  if (body.is_discarded()) return reject(400, "The request body is not valid JSON.", "");
  if (!body.is_object()) return reject(400, "The request body must be a JSON object.", "");
  if (llama) {
    LlamaCompletionOptions lo;
    auto translated = llama_completion_to_openai(body, lo);
    if (auto* e = std::get_if<ApiError>(&translated)) return reject(e->status, e->message, e->param);
    if (lo.n_probs > 0 || lo.return_tokens)
      return reject(400,
                    std::string(lo.n_probs > 0 ? "n_probs" : "return_tokens") +
                        ": not available through the guard proxy (an OpenAI-compatible upstream sends no token ids); "
                        "send the request to the upstream directly",
                    lo.n_probs > 0 ? "n_probs" : "return_tokens");
    body = std::move(std::get<json>(translated));
    body.erase("logprobs");  // asked for coda serve's token ids; the proxy asks its own
    if (auto e = check_request_limits(dump(body), opts_.limits)) return reject(e->status, e->message, e->param);
  }
  ResponsesEcho echo;
  // A response's id is unique even under one X-Request-Id: previous_response_id names it.
  const std::string resp_id = responses ? "resp_" + random_hex_id() : "";
  json turns;  // the conversation the response ends, kept for a later previous_response_id
  if (responses) {
    auto translated = responses_to_chat(body, echo, responses_.get());
    if (auto* e = std::get_if<ApiError>(&translated)) return reject(e->status, e->message, e->param, e->code);
    body = std::move(std::get<json>(translated));
    turns = body["messages"];
    if (auto e = check_request_limits(dump(body), opts_.limits)) return reject(e->status, e->message, e->param);
  }
  // By value: a stream's session thread calls it after this handler has returned.
  auto remember = [store = responses_.get(), echo, resp_id, turns = std::move(turns)](const json& chat_answer,
                                                                                      const json& response) {
    keep_response(store, resp_id, echo, turns, chat_answer, response);
  };
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  if (body.contains("stream") && !body["stream"].is_boolean() && !body["stream"].is_null())
    return reject(400, "stream: expected true or false", "stream");
  if (auto e = check_forwarded_fields(body, chat)) return reject(e->status, e->message, e->param);
  // n > 1 and a batch of prompts: each choice is a guarded session of its own (serve_choices).
  int64_t n = 1;
  if (body.contains("n") && !body["n"].is_null()) {
    if (!body["n"].is_number_integer() || body["n"].get<int64_t>() < 1 ||
        body["n"].get<int64_t>() > static_cast<int64_t>(kMaxChoices))
      return reject(400, "n: expected an integer from 1 to " + std::to_string(kMaxChoices), "n");
    n = body["n"].get<int64_t>();
  }
  const size_t prompts = batch_size(body, chat), choices = prompts * static_cast<size_t>(n);
  if (choices > 1) {
    if (llama || responses) return reject(400, "n: only n = 1 is supported on this route", "n");
    if (choices > kMaxChoices)
      return reject(400,
                    std::to_string(prompts) + " prompts x n = " + std::to_string(n) + " is " + std::to_string(choices) +
                        " choices; allowed at most " + std::to_string(kMaxChoices),
                    "n");
    if (choices * req.body.size() > kMaxChoiceBytes)
      return reject(400,
                    "n: " + std::to_string(choices) + " choices of a " + std::to_string(req.body.size()) +
                        "-byte request is too much to hold; send fewer choices or a smaller request",
                    "n");
    if (body.value("stream", json(false)) == json(true))
      return reject(400,
                    "n > 1 and batches of prompts need stream: false through the guard proxy (each choice is "
                    "guarded on its own)",
                    "n");
  }
  // An echoed prompt would reach the guard as if generated (a few-shot prompt's legitimate
  // repetition stopped as a loop), and the logprobs it asks the upstream for would cover the
  // whole prompt: prompt scoring (lm-evaluation-harness log-likelihoods) is not a generation.
  if (!chat && body.contains("echo") && body["echo"].is_boolean() && body["echo"].get<bool>())
    return reject(400,
                  "echo: not supported through the guard proxy, which watches generated text; send prompt-scoring "
                  "(echo) requests to the upstream directly",
                  "echo");

  // vLLM's return_tokens_as_token_ids names each logprob's token "token_id:N", and the guard reads
  // the tokens' text from the logprobs: it would fall back to text alone, and the client's logprobs
  // would not line up with the text it gets. The client's own logprobs cannot be given as ids
  // without the upstream's vocabulary, so that is refused; without them the flag changes nothing
  // the client sees, so it is dropped and the upstream sends text.
  if (body.contains("return_tokens_as_token_ids") && body["return_tokens_as_token_ids"].is_boolean() &&
      body["return_tokens_as_token_ids"].get<bool>()) {
    const bool wants_logprobs = chat ? body.value("logprobs", json(false)) == json(true)
                                     : body.contains("logprobs") && body["logprobs"].is_number_integer();
    if (wants_logprobs)
      return reject(400,
                    "return_tokens_as_token_ids: not supported through the guard proxy, which reads each token's "
                    "text from the logprobs; send such requests to the upstream directly",
                    "return_tokens_as_token_ids");
  }
  body.erase("return_tokens_as_token_ids");

  ClientView view;
  view.chat = chat;
  if (chat) {
    view.logprobs = body.value("logprobs", json(false)).is_boolean() && body.value("logprobs", false);
    if (body.contains("top_logprobs") && body["top_logprobs"].is_number_integer())
      view.top_logprobs = static_cast<int>(std::clamp<int64_t>(body["top_logprobs"].get<int64_t>(), 0, 1000));
  } else if (body.contains("logprobs") && body["logprobs"].is_number_integer()) {
    view.logprobs = true;
    view.top_logprobs = static_cast<int>(std::clamp<int64_t>(body["logprobs"].get<int64_t>(), 0, 1000));
  }
  // Safety default: a request without a cap gets the operator's.
  if (!(body.contains("max_tokens") && !body["max_tokens"].is_null()) &&
      !(body.contains("max_completion_tokens") && !body["max_completion_tokens"].is_null()))
    body["max_tokens"] = opts_.default_max_tokens;

  // The guard for this request: the operator's, with what the request may choose clamped to it.
  SessionOptions so;
  so.request_id = request_id_for(req);
  res.set_header("X-Request-Id", so.request_id);
  so.guard = opts_.guard;
  so.top_logprobs = opts_.top_logprobs;
  so.hot_tokens = opts_.hot_tokens;
  if (body.contains("coda") && body["coda"].is_object()) {
    const json& c = body["coda"];
    if (c.contains("guard")) {
      if (!c["guard"].is_string())
        return reject(400, "coda.guard: expected observe, stop or repair (optionally with detectors: stop:loop)",
                      "coda.guard");
      if (Status s = set_guard_policy(c["guard"].get<std::string>(), so.guard); !s.ok())
        return reject(400, s.message(), "coda.guard");
    }
    if (c.contains("reasoning_loop")) {
      if (!c["reasoning_loop"].is_string() || (c["reasoning_loop"] != "answer" && c["reasoning_loop"] != "stop"))
        return reject(400,
                      "coda.reasoning_loop: expected \"answer\" (close the thinking and let the model answer) or "
                      "\"stop\"",
                      "coda.reasoning_loop");
      so.guard.thinking.answer_on_loop = c["reasoning_loop"] == "answer";
    }
    if (c.contains("perpetual")) {
      if (auto e = parse_perpetual(c["perpetual"], so.guard)) return reject(400, e->message, e->param);
    }
    if (c.contains("max_repairs") && c["max_repairs"].is_number_integer())
      so.guard.max_repairs =
          static_cast<int>(std::clamp<int64_t>(c["max_repairs"].get<int64_t>(), 0, opts_.guard.max_repairs));
  }
  // Thinking budgets (the effort also goes upstream as it is: gpt-oss thinks more or less for it).
  so.forward_budget = opts_.forward_budget;
  if (auto e = parse_length_fields(body, opts_.effort_budgets, so.guard)) return reject(400, e->message, e->param);
  if (body.contains("repetition_detection") && !body["repetition_detection"].is_null()) {
    nlohmann::ordered_json rd = nlohmann::ordered_json::parse(dump(body["repetition_detection"]));
    if (rd.is_object() && rd.contains("max_pattern_size") && rd["max_pattern_size"].is_number_integer() &&
        rd["max_pattern_size"].get<int64_t>() > so.guard.max_period)
      rd["max_pattern_size"] = so.guard.max_period;  // the proxy watches up to its window; the upstream gets all
    if (auto e = parse_repetition_detection(rd, so.guard)) return reject(400, e->message, e->param);
  }
  std::string model = body.contains("model") && body["model"].is_string() ? body["model"].get<std::string>() : "";

  const int slots = static_cast<int>(choices);  // each choice is an upstream request of its own
  if (in_flight_.fetch_add(slots) + slots > opts_.max_connections) {
    in_flight_.fetch_sub(slots);
    res.set_header("Retry-After", "1");
    return reject(
        429,
        "The proxy is at capacity (" + std::to_string(opts_.max_connections) + " requests in flight); retry shortly.",
        "", "rate_limit_exceeded");
  }
  const auto t0 = Clock::now();
  auto seconds = [t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto done_in_flight = [this, slots] { in_flight_.fetch_sub(slots); };
  const bool stream = body.value("stream", json(false)).is_boolean() && body.value("stream", false);
  const bool include_usage = body.contains("stream_options") && body["stream_options"].is_object() &&
                             body["stream_options"].value("include_usage", json(false)).is_boolean() &&
                             body["stream_options"].value("include_usage", false);
  Shaper shaper{chat, view, (chat ? "chatcmpl-proxy-" : "cmpl-proxy-") + std::to_string(next_id_.fetch_add(1))};

  if (!stream && choices > 1) {
    serve_choices(req, res, body, prompts, n, view, so, model, shaper.fallback_id);
    done_in_flight();
    return;
  }
  if (!stream) {
    double ttft = -1;
    std::vector<client::TokenLogprob> all_lps;
    Upstream* used = nullptr;
    // Nothing is written to a non-streaming client until the end, so its leaving is watched for:
    // then the upstream connection closes and the upstream aborts the generation (as for a stream).
    const ClientWatch watch(req);
    SessionOptions watched = so;
    watched.client_left = [&watch] { return watch.gone(); };  // also while the upstream is silent
    SessionResult r = run_balanced(
        body, view, watched,
        [&](const Released&, const std::vector<client::TokenLogprob>& lps, const json&) {
          if (ttft < 0) ttft = seconds();
          all_lps.insert(all_lps.end(), lps.begin(), lps.end());
          return !watch.gone();
        },
        used);
    const std::string m = model_of(model, r.last_chunk);
    record(r, m, seconds(), ttft, used->label);
    done_in_flight();
    if (r.client_gone && aborting_ && !watch.gone()) return send_shutdown(res);
    if (!r.ok) return send_upstream_failure(res, r.failure, used->label);
    if (llama) return res.set_content(dump(llama_answer_of(r, body, m, ttft, seconds(), false)), "application/json");
    json j = shaper.head(r.last_chunk, false);
    j["choices"] =
        json::array({choice_of(r, all_lps, view, client_finish_reason(r.finish_reason, opts_.finish_reason_compat))});
    j["usage"] = usage_of(r);
    j["coda"] = report_of(r);
    if (responses) {
      const json chat_answer = std::move(j);
      j = response_object(chat_answer, echo, resp_id, created);
      remember(chat_answer, j);
    }
    res.set_content(dump(j), "application/json");
    return;
  }

  // Streaming: the session runs on its own thread and hands SSE lines over; the HTTP thread waits
  // for the first text (until then an upstream error can still be answered with its status).
  auto st = std::make_shared<StreamState>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++streams_;
  }
  SessionOptions watched = so;  // the HTTP thread below watches the client until the first text
  watched.client_left = [st] { return st->client_gone.load(); };
  std::thread([this, st, body, view, so = std::move(watched), chat, llama, responses, echo, created, include_usage,
               shaper, model, seconds, done_in_flight, resp_id, remember]() mutable {
    double ttft = -1;
    auto push_line = [&](std::string line) {
      std::lock_guard<std::mutex> lock(st->mu);
      st->events.push_back(std::move(line));
      st->started = true;
      st->cv.notify_all();
    };
    auto push = [&](const json& j) { push_line("data: " + dump(j) + "\n\n"); };
    // The Responses API's typed events: `event: TYPE`, the type and a sequence number in the data.
    // Its output items (reasoning, message, calls) as ResponseStream decides them
    // (server/responses_api.h).
    int64_t seq = 0;
    bool started = false;
    ResponseStream items(resp_id.empty() ? so.request_id : resp_id.substr(5));
    auto event = [&](const std::string& type, const json& fields) {
      json all{{"type", type}, {"sequence_number", seq++}};
      all.update(fields);
      push_line("event: " + type + "\ndata: " + dump(all) + "\n\n");
    };
    auto events = [&](const ResponseEvents& ev) {
      for (const auto& [type, fields] : ev) event(type, fields);
    };
    auto open_response = [&](const std::string& m) {
      if (started) return;
      started = true;
      const json skeleton = response_in_progress(echo, resp_id, created, m);
      event("response.created", {{"response", skeleton}});
      event("response.in_progress", {{"response", skeleton}});
    };
    SessionResult r;
    Upstream* used = upstreams_[0].get();
    try {
      r = run_balanced(
          body, view, so,
          [&](const Released& out, const std::vector<client::TokenLogprob>& lps, const json& chunk) {
            if (st->client_gone) return false;
            if (ttft < 0) ttft = seconds();
            if (llama) {
              if (!out.content.empty())
                push(json{{"index", 0}, {"content", out.content}, {"tokens", json::array()}, {"stop", false}});
            } else if (responses) {
              open_response(model_of(model, chunk));
              events(items.reasoning(out.reasoning));
              events(items.answer(out.content));
            } else {
              push(shaper.chunk(chunk, out, lps, nullptr));
            }
            return !st->client_gone.load();
          },
          used);
    } catch (const std::exception& e) {  // a bug, not user input: the stream ends with an error, the proxy stays up
      r = SessionResult{};
      r.failure.error_kind = client::ErrorKind::Protocol;
      r.failure.error = std::string("internal error: ") + e.what();
      r.emitted = st->started;
    }
    const std::string m = model_of(model, r.last_chunk);
    record(r, m, seconds(), ttft, used->label);
    const bool shut_down = r.client_gone && aborting_ && !st->client_gone;  // the client is still there
    if (shut_down && st->started) {
      // The stream ends with an error event (then [DONE]), not a silent cut.
      if (responses)
        event("error", {{"code", "server_shutting_down"}, {"message", kShutdownMessage}, {"param", nullptr}});
      else
        push(shutdown_event());
    } else if (r.ok && !r.client_gone && llama) {
      push(llama_answer_of(r, body, m, ttft, seconds(), true));
    } else if (r.ok && !r.client_gone && responses) {
      open_response(m);
      json message{{"role", "assistant"}, {"content", r.text}};
      if (!r.tool_calls.is_null()) message["tool_calls"] = r.tool_calls;
      if (!r.reasoning.empty()) message["reasoning_content"] = r.reasoning;
      const json chat_answer{
          {"model", m},
          {"choices",
           json::array({{{"index", 0},
                         {"message", std::move(message)},
                         {"finish_reason", client_finish_reason(r.finish_reason, opts_.finish_reason_compat)}}})},
          {"usage", usage_of(r)},
          {"coda", report_of(r)}};
      const json final = response_object(chat_answer, echo, resp_id, created);
      remember(chat_answer, final);
      events(items.finish(final));
    } else if (r.ok && !r.client_gone) {
      json last = shaper.chunk(r.last_chunk, Released{}, {},
                               client_finish_reason(r.finish_reason, opts_.finish_reason_compat).c_str());
      if (chat) last["choices"][0]["delta"] = json::object();
      last["choices"][0]["stop_reason"] = r.stop_reason.empty() ? json(nullptr) : json(r.stop_reason);
      last["coda"] = report_of(r);
      push(last);
      if (include_usage) {
        json u = shaper.head(r.last_chunk, true);
        u["choices"] = json::array();
        u["usage"] = usage_of(r);
        push(u);
      }
    } else if (!r.ok && r.emitted && responses) {  // the Responses API's own error event
      const json e = error_event(r.failure, used->label)["error"];
      event("error", {{"code", e["code"]}, {"message", e["message"]}, {"param", nullptr}});
    } else if (!r.ok && r.emitted) {
      push(error_event(r.failure, used->label));
    }
    done_in_flight();
    {
      std::lock_guard<std::mutex> lock(st->mu);
      st->result = std::move(r);
      st->upstream = used->label;
      st->shut_down = shut_down;
      st->finished = true;
      st->cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--streams_ == 0) idle_.notify_all();
  }).detach();

  {
    std::unique_lock<std::mutex> lock(st->mu);
    // Until the first text nothing is written, so a client that leaves during a long upstream
    // prefill is looked for here; the session then closes the upstream stream.
    const ClientWatch watch(req);
    while (!st->cv.wait_for(lock, std::chrono::milliseconds(client::OpenAIClient::kCancelPollMs),
                            [&] { return st->started || st->finished; }))
      if (!st->client_gone && watch.gone()) st->client_gone = true;
    if (!st->started && st->shut_down) return send_shutdown(res);
    if (!st->started && st->client_gone) return;  // nobody to answer
    if (!st->started && !st->result.ok) return send_upstream_failure(res, st->result.failure, st->upstream);
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, llama, responses](size_t, httplib::DataSink& sink) {
        std::deque<std::string> out;
        bool finished = false;
        {
          std::unique_lock<std::mutex> lock(st->mu);
          st->cv.wait_for(lock, std::chrono::seconds(1), [&] { return !st->events.empty() || st->finished; });
          out.swap(st->events);
          finished = st->finished;
        }
        for (const auto& e : out)
          if (!sink.write(e.data(), e.size())) {
            st->client_gone = true;
            return false;
          }
        if (out.empty() && !finished && !sink.is_writable()) {
          st->client_gone = true;
          return false;
        }
        if (finished) {
          // llama-server's streams and the Responses API's end without one.
          if (!llama && !responses) sink.write("data: [DONE]\n\n", 14);
          sink.done();
        }
        return true;
      },
      [st](bool success) {
        if (!success) st->client_gone = true;
      });
}

// n > 1 or a batch of prompts, not streamed (as coda serve answers them): every choice is a session
// of its own, run concurrently, each with its own guard, its own upstream request (n = 1, so it can
// be cancelled or repaired alone) and its own report (`coda` inside the choice). Prompt i's n samples
// are choices i n .. i n + n - 1, as vLLM orders them; with a seed, choice i gets seed + i, as coda
// serve gives it. Usage counts each prompt once. One failed choice fails the request, as in coda serve.
void ProxyServer::serve_choices(const httplib::Request& req, httplib::Response& res, const json& body, size_t prompts,
                                int64_t n, const ClientView& view, const SessionOptions& so, const std::string& model,
                                const std::string& fallback_id) {
  const size_t total = prompts * static_cast<size_t>(n);
  const bool seeded = body.contains("seed") && body["seed"].is_number_integer();
  const ClientWatch watch(req);
  SessionOptions watched = so;
  watched.client_left = [&watch] { return watch.gone(); };
  struct Part {
    SessionResult r;
    std::vector<client::TokenLogprob> lps;
    double ttft = -1;
    Upstream* used = nullptr;
  };
  std::vector<Part> parts(total);
  const auto t0 = Clock::now();
  auto seconds = [t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto run_part = [&](size_t i) {
    json one = body;
    one.erase("n");
    if (prompts > 1) one["prompt"] = body["prompt"][i / static_cast<size_t>(n)];
    if (seeded) one["seed"] = body["seed"].get<int64_t>() + static_cast<int64_t>(i);
    Part& p = parts[i];
    p.used = upstreams_[0].get();
    try {
      p.r = run_balanced(
          one, view, watched,
          [&](const Released&, const std::vector<client::TokenLogprob>& lps, const json&) {
            if (p.ttft < 0) p.ttft = seconds();
            p.lps.insert(p.lps.end(), lps.begin(), lps.end());
            return !watch.gone();
          },
          p.used);
    } catch (const std::exception& e) {  // a bug, not user input: this choice fails, the proxy stays up
      p.r = SessionResult{};
      p.r.failure.error_kind = client::ErrorKind::Protocol;
      p.r.failure.error = std::string("internal error: ") + e.what();
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 0; i < total; ++i) {
    try {
      threads.emplace_back(run_part, i);
    } catch (const std::system_error&) {  // no thread to be had: this choice runs here, in turn
      run_part(i);
    }
  }
  for (auto& t : threads) t.join();
  json j;
  json list = json::array();
  SessionResult total_usage;
  total_usage.prompt_tokens = total_usage.completion_tokens = 0;
  for (size_t i = 0; i < total; ++i) {
    const Part& p = parts[i];
    record(p.r, model_of(model, p.r.last_chunk), seconds(), p.ttft, p.used->label);
  }
  for (size_t i = 0; i < total; ++i) {
    const Part& p = parts[i];
    if (p.r.client_gone && aborting_ && !watch.gone()) return send_shutdown(res);
    if (!p.r.ok) return send_upstream_failure(res, p.r.failure, p.used->label);
    if (j.is_null()) j = Shaper{view.chat, view, fallback_id}.head(p.r.last_chunk, false);
    json choice = choice_of(p.r, p.lps, view, client_finish_reason(p.r.finish_reason, opts_.finish_reason_compat));
    choice["index"] = i;
    choice["coda"] = report_of(p.r);
    list.push_back(std::move(choice));
    if (i % static_cast<size_t>(n) == 0) total_usage.prompt_tokens += std::max<int64_t>(0, p.r.prompt_tokens);
    total_usage.completion_tokens += std::max<int64_t>(0, p.r.completion_tokens);
  }
  j["choices"] = std::move(list);
  j["usage"] = usage_of(total_usage);
  res.set_content(dump(j), "application/json");
}

}  // namespace coda::proxy
