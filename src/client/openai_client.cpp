#include "client/openai_client.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "client/sse.h"
#include "core/json_parse.h"

namespace coda::client {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// httplib reports a read timeout and a dropped connection alike (Error::Read); the clock tells them
// apart: a wait that lasted the whole timeout (within 50 ms) was the timeout.
bool waited_out(double elapsed_ms, double timeout_s) {
  return elapsed_ms + 50 >= timeout_s * 1000;
}

// "2", "0.5", "1.25": a timeout as a user gave it.
std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

const nlohmann::ordered_json* member(const nlohmann::ordered_json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string string_at(const nlohmann::ordered_json& j, const char* key) {
  const auto* v = member(j, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

// The error message inside an OpenAI error body ({"error": {"message"}}), vLLM's
// ({"object": "error", "message"}) or a bare string; empty when the body is none of those.
std::string error_message(const nlohmann::ordered_json& body) {
  if (const auto* e = member(body, "error")) {
    if (e->is_string()) return e->get<std::string>();
    if (auto m = string_at(*e, "message"); !m.empty()) return m;
    return e->dump();
  }
  if (string_at(body, "object") == "error") return string_at(body, "message");
  return {};
}

// Reads usage, finish_reason, text, logprobs and coda's report from one response or chunk.
// `gather`: add the delta's text, reasoning and logprobs to the completion (off when a callback
// takes every delta: a proxied generation of 100k tokens with 20 alternatives each would otherwise
// hold a copy of all of it, about 2 KB a token, until it ends).
void absorb(const nlohmann::ordered_json& j, bool chat, bool streaming, bool gather, Completion& c, Delta& d) {
  if (const auto* u = member(j, "usage"); u && u->is_object()) {
    if (const auto* p = member(*u, "prompt_tokens"); p && p->is_number_integer()) c.prompt_tokens = p->get<int64_t>();
    if (const auto* p = member(*u, "completion_tokens"); p && p->is_number_integer())
      c.completion_tokens = p->get<int64_t>();
    if (const auto* d = member(*u, "completion_tokens_details"); d && d->is_object())
      if (const auto* p = member(*d, "reasoning_tokens"); p && p->is_number_integer())
        c.reasoning_tokens = p->get<int64_t>();
  } else if (const auto* t = member(j, "timings"); t && t->is_object()) {
    // llama.cpp's server with timings_per_token: the prompt is the tokens it processed and those it
    // found in its cache. Its closing usage, when the stream gets that far, says the same.
    const auto* pn = member(*t, "prompt_n");
    const auto* cn = member(*t, "cache_n");
    if (pn && cn && pn->is_number_integer() && cn->is_number_integer() && pn->get<int64_t>() >= 0 &&
        cn->get<int64_t>() >= 0)
      c.prompt_tokens = pn->get<int64_t>() + cn->get<int64_t>();
  }
  if (const auto* r = member(j, "coda")) c.coda = *r;
  const auto* choices = member(j, "choices");
  if (!choices || !choices->is_array() || choices->empty()) return;
  const nlohmann::ordered_json& ch = (*choices)[0];
  if (chat) {
    const auto* m = member(ch, streaming ? "delta" : "message");
    if (m) {
      d.text = string_at(*m, "content");
      for (const char* key : {"reasoning_content", "reasoning"})
        if (const auto* r = member(*m, key); r && r->is_string() && !r->get<std::string>().empty()) {
          d.reasoning = r->get<std::string>();
          d.reasoning_key = key;
          break;
        }
      if (const auto* tc = member(*m, "tool_calls"); tc && tc->is_array() && !tc->empty()) d.tool_calls = *tc;
    }
  } else {
    d.text = string_at(ch, "text");
  }
  d.finish_reason = string_at(ch, "finish_reason");
  d.stop_reason = string_at(ch, "stop_reason");
  if (const auto* lp = member(ch, "logprobs")) d.logprobs = parse_logprobs(*lp);
  if (!d.finish_reason.empty()) c.finish_reason = d.finish_reason;
  if (!d.stop_reason.empty()) c.stop_reason = d.stop_reason;
  if (!gather) return;
  c.text += d.text;
  c.reasoning += d.reasoning;
  c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
}

void set_error(Completion& c, ErrorKind kind, std::string message) {
  if (c.error_kind != ErrorKind::None) return;  // the first cause wins
  c.ok = false;
  c.error_kind = kind;
  c.error = std::move(message);
}

// One JSON object from the server (an event's data or a whole body), or null after recording
// why not: not JSON (a protocol error) or an error object (the server's own error).
std::optional<nlohmann::ordered_json> read_object(const std::string& text, const std::string& not_json,
                                                  const std::string& reported, Completion& c) {
  nlohmann::ordered_json j = parse_ordered_json(text);
  if (j.is_discarded() || !j.is_object()) {
    set_error(c, ErrorKind::Protocol, not_json + text.substr(0, 200));
    return std::nullopt;
  }
  if (auto m = error_message(j); !m.empty()) {
    c.error_body = j;
    set_error(c, ErrorKind::Upstream, reported + m);
    return std::nullopt;
  }
  return j;
}

}  // namespace

const char* to_string(ErrorKind k) {
  switch (k) {
    case ErrorKind::None:
      return "none";
    case ErrorKind::Connection:
      return "connection";
    case ErrorKind::Timeout:
      return "timeout";
    case ErrorKind::Http:
      return "http";
    case ErrorKind::Upstream:
      return "upstream";
    case ErrorKind::Protocol:
      return "protocol";
    case ErrorKind::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

std::vector<TokenLogprob> parse_logprobs(const nlohmann::ordered_json& lp) {
  std::vector<TokenLogprob> out;
  auto number = [](const nlohmann::ordered_json* v) { return v && v->is_number() ? v->get<double>() : 0.0; };
  if (const auto* content = member(lp, "content"); content && content->is_array()) {  // chat shape
    for (const auto& t : *content) {
      TokenLogprob tl{string_at(t, "token"), number(member(t, "logprob")), {}};
      if (const auto* top = member(t, "top_logprobs"); top && top->is_array())
        for (const auto& x : *top) tl.top.push_back({string_at(x, "token"), number(member(x, "logprob"))});
      out.push_back(std::move(tl));
    }
    return out;
  }
  const auto* tokens = member(lp, "tokens");  // legacy shape
  const auto* values = member(lp, "token_logprobs");
  if (!tokens || !tokens->is_array()) return out;
  const auto* tops = member(lp, "top_logprobs");
  for (size_t i = 0; i < tokens->size(); ++i) {
    TokenLogprob tl;
    if ((*tokens)[i].is_string()) tl.token = (*tokens)[i].get<std::string>();
    if (values && values->is_array() && i < values->size()) tl.logprob = number(&(*values)[i]);
    if (tops && tops->is_array() && i < tops->size() && (*tops)[i].is_object()) {
      for (const auto& [tok, v] : (*tops)[i].items()) tl.top.push_back({tok, v.is_number() ? v.get<double>() : 0.0});
      std::stable_sort(tl.top.begin(), tl.top.end(),
                       [](const TopLogprob& a, const TopLogprob& b) { return a.logprob > b.logprob; });
    }
    out.push_back(std::move(tl));
  }
  return out;
}

std::string redact_url(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t from = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t end = url.find_first_of("/?#", from);
  const size_t at = url.rfind('@', end == std::string::npos ? url.size() - 1 : end);
  if (at == std::string::npos || at < from) return url;
  return url.substr(0, from) + "***" + url.substr(at);
}

Expected<OpenAIClient> OpenAIClient::create(Endpoint ep) {
  std::string u = ep.url;
  OpenAIClient c;
  if (u.rfind("https://", 0) == 0) {
    c.https_ = true;
    u = u.substr(8);
  } else if (u.rfind("http://", 0) == 0) {
    u = u.substr(7);
  } else if (u.find("://") != std::string::npos) {
    return Error("url " + redact_url(ep.url) + ": only http:// and https:// URLs are supported");
  }
  const size_t slash = u.find('/');
  std::string hostport = u.substr(0, slash);
  // Credentials in the URL (http://user:pass@host) would never be sent, and the URL is printed
  // on /health, in metrics labels and in messages: refused, and the message leaves them out.
  if (const size_t at = hostport.rfind('@'); at != std::string::npos)
    return Error("url " + redact_url(ep.url) +
                 ": credentials in the URL are not supported (they would not be sent, and the URL is shown on "
                 "/health and /metrics); give the upstream's API key with --upstream-api-key-file FILE (coda proxy) "
                 "or --api-key (coda bench, tune, threshold, diagnose)");
  std::string path = slash == std::string::npos ? "" : u.substr(slash);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) path.resize(path.size() - 3);
  c.prefix_ = path;
  c.port_ = c.https_ ? 443 : 80;
  const size_t colon = hostport.rfind(':');
  if (colon != std::string::npos && hostport.find(']', colon) == std::string::npos) {
    const std::string p = hostport.substr(colon + 1);
    char* end = nullptr;
    const long v = std::strtol(p.c_str(), &end, 10);
    if (p.empty() || *end != 0 || v < 1 || v > 65535)
      return Error("url " + redact_url(ep.url) + ": port '" + p + "' is not a number in 1..65535");
    c.port_ = static_cast<int>(v);
    hostport.resize(colon);
  }
  if (hostport.size() > 2 && hostport.front() == '[' && hostport.back() == ']')
    hostport = hostport.substr(1, hostport.size() - 2);
  if (hostport.empty()) return Error("url " + redact_url(ep.url) + ": no host; expected http://HOST:PORT[/v1]");
  if (!(ep.connect_timeout_s > 0) || !(ep.read_timeout_s > 0)) return Error("client timeouts must be > 0 seconds");
  c.host_ = hostport;
  c.ep_ = std::move(ep);
  return c;
}

std::string OpenAIClient::describe() const {
  return (https_ ? "https://" : "http://") + host_ + ":" + std::to_string(port_) + prefix_;
}

std::string OpenAIClient::origin() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return (https_ ? "https://" : "http://") + (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
}

std::string OpenAIClient::route(const std::string& v1_path) const {
  return prefix_ + v1_path;
}

namespace {

void configure(httplib::Client& cli, const Endpoint& ep) {
  auto usec = [](double s) { return static_cast<time_t>((s - static_cast<double>(static_cast<time_t>(s))) * 1e6); };
  cli.set_connection_timeout(static_cast<time_t>(ep.connect_timeout_s), usec(ep.connect_timeout_s));
  cli.set_read_timeout(static_cast<time_t>(ep.read_timeout_s), usec(ep.read_timeout_s));
  cli.set_write_timeout(static_cast<time_t>(ep.read_timeout_s), usec(ep.read_timeout_s));
  cli.set_keep_alive(false);
  if (!ep.api_key.empty()) cli.set_bearer_token_auth(ep.api_key.c_str());
  if (!ep.ca_cert.empty()) cli.set_ca_cert_path(ep.ca_cert);
}

// httplib's name for a failure, with what to do about the TLS ones.
std::string failure_text(httplib::Error err) {
  switch (err) {
    case httplib::Error::SSLServerVerification:
      return "its TLS certificate did not verify against the trusted certificate authorities (a private CA or a "
             "self-signed certificate: give the CA's PEM file with --ca-cert, --upstream-ca-cert for coda proxy)";
    case httplib::Error::SSLLoadingCerts:
      return "the CA certificates could not be loaded (is the --ca-cert file a PEM certificate?)";
    case httplib::Error::SSLConnection:
      return "the TLS handshake failed (does the server speak https on that port?)";
    default:
      return httplib::to_string(err);
  }
}

}  // namespace

Completion OpenAIClient::complete(const nlohmann::ordered_json& body, bool chat, const OnDelta& on_delta,
                                  const std::atomic<bool>* cancel, const std::function<bool()>& caller_gone,
                                  const std::string& request_id) const {
  Completion c;
  const bool streaming =
      body.is_object() && body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>();
  httplib::Client cli(origin());
  configure(cli, ep_);

  httplib::Request req;
  req.method = "POST";
  req.path = route(chat ? "/v1/chat/completions" : "/v1/completions");
  req.body = body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", streaming ? "text/event-stream" : "application/json");
  if (!request_id.empty()) req.set_header("X-Request-Id", request_id);

  const auto t0 = Clock::now();
  auto last_token = t0;      // the last event that carried a generated token
  std::string raw;           // non-streaming body, or an error body
  bool stream_body = false;  // the response is a 200 event stream
  bool done = false;         // `data: [DONE]` seen
  bool any_choice = false;   // an event carried a choice: a stream of `{"foo":1}` or `"choices": []` is no answer
  std::atomic<bool> stopped_by_caller{false};
  SseParser sse;
  std::vector<SseEvent> events;

  req.response_handler = [&](const httplib::Response& r) {
    c.status = r.status;
    // A server that ignores `stream` answers with one JSON body: read it as such.
    stream_body = streaming && r.status >= 200 && r.status < 300 &&
                  r.get_header_value("Content-Type").find("event-stream") != std::string::npos;
    return true;
  };
  const auto caller_stopped = [&] { return (cancel && cancel->load()) || (caller_gone && caller_gone()); };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (caller_stopped()) {
      stopped_by_caller = true;
      return false;
    }
    if (!stream_body) {
      if (raw.size() + n > (size_t{64} << 20)) {
        set_error(c, ErrorKind::Protocol, "the response body is larger than 64 MiB");
        return false;
      }
      raw.append(data, n);
      return true;
    }
    events.clear();
    if (!sse.feed(std::string_view(data, n), events)) {
      set_error(c, ErrorKind::Protocol, "an event-stream line or event is longer than 16 MiB");
      return false;
    }
    // Bytes that carry no token do not count as an answer: an upstream that keeps a stream alive
    // with comments (": ping") or empty chunks and never generates would otherwise hold the request
    // (and a proxy's connection) forever, since the read timeout only sees silence.
    if (!done && c.finish_reason.empty() && ms_since(last_token) > ep_.read_timeout_s * 1000) {
      set_error(c, ErrorKind::Timeout,
                "the stream from " + describe() + " sent no token for " + seconds_text(ep_.read_timeout_s) +
                    " s (only keep-alive comments or empty chunks)");
      return false;
    }
    for (const SseEvent& ev : events) {
      if (done) break;
      if (ev.data == "[DONE]") {
        done = true;
        break;
      }
      auto obj =
          read_object(ev.data, "malformed event in the stream: ", "the server reported an error mid-stream: ", c);
      if (!obj) return false;
      const nlohmann::ordered_json& j = *obj;
      Delta d;
      d.chunk = &j;
      d.at_ms = ms_since(t0);
      absorb(j, chat, true, !on_delta, c, d);
      if (const auto* ch = member(j, "choices"); ch && ch->is_array() && !ch->empty()) any_choice = true;
      if (!d.text.empty() || !d.reasoning.empty() || !d.tool_calls.is_null()) {  // any generated token
        if (c.ttft_ms < 0) c.ttft_ms = d.at_ms;
        c.chunk_ms.push_back(d.at_ms);
        last_token = Clock::now();
      }
      if (on_delta && !on_delta(d)) {
        stopped_by_caller = true;
        return false;
      }
    }
    return true;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  // While the server says nothing (a long prefill, an upstream that hangs) no callback runs, so a
  // watcher checks the caller every kCancelPollMs and shuts the connection (httplib's stop() is
  // the one call it allows from another thread): the send then fails at once.
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  bool sending = true;
  std::thread watcher;
  if (cancel || caller_gone)
    watcher = std::thread([&] {
      std::unique_lock<std::mutex> lock(watch_mu);
      while (sending) {
        if (watch_cv.wait_for(lock, std::chrono::milliseconds(kCancelPollMs), [&] { return !sending; })) break;
        if (caller_stopped()) {
          stopped_by_caller = true;
          cli.stop();
          break;
        }
      }
    });
  const bool sent = cli.send(req, res, err);
  if (watcher.joinable()) {
    {
      std::lock_guard<std::mutex> lock(watch_mu);
      sending = false;
    }
    watch_cv.notify_all();
    watcher.join();
  }
  c.e2e_ms = ms_since(t0);
  if (stopped_by_caller) {
    set_error(c, ErrorKind::Cancelled, "cancelled by the caller");
    return c;
  }
  if (c.error_kind != ErrorKind::None) return c;
  if (!sent) {
    switch (err) {
      case httplib::Error::Connection:
        set_error(c, ErrorKind::Connection, "cannot connect to " + describe() + " (is the server up?)");
        c.connected = false;
        break;
      case httplib::Error::ConnectionTimeout:
        set_error(c, ErrorKind::Timeout, "connecting to " + describe() + " timed out");
        c.connected = false;
        break;
      case httplib::Error::Read:
        if (waited_out(c.e2e_ms, ep_.read_timeout_s) && c.status == 0)
          set_error(c, ErrorKind::Timeout, "no response from " + describe() + " within the read timeout");
        else if (c.status == 0)
          set_error(c, ErrorKind::Connection, "the connection to " + describe() + " closed before a response");
        else
          set_error(c, ErrorKind::Connection, "the response from " + describe() + " broke off");
        break;
      default:
        set_error(c, ErrorKind::Connection, std::string("request to ") + describe() + " failed: " + failure_text(err));
    }
    // A stream that went silent past the read timeout is a timeout, whatever httplib called it.
    if (stream_body && c.error_kind == ErrorKind::Connection && !c.chunk_ms.empty() &&
        waited_out(c.e2e_ms - c.chunk_ms.back(), ep_.read_timeout_s)) {
      c.error_kind = ErrorKind::Timeout;
      c.error = "the stream from " + describe() + " went silent for longer than the read timeout";
    }
    return c;
  }
  if (c.status < 200 || c.status >= 300) {
    nlohmann::ordered_json j = parse_ordered_json(raw);
    if (!j.is_discarded()) c.error_body = j;
    std::string m = j.is_discarded() ? raw.substr(0, 300) : error_message(j);
    if (m.empty()) m = raw.substr(0, 300);
    set_error(c, ErrorKind::Http, "HTTP " + std::to_string(c.status) + ": " + m);
    return c;
  }
  if (stream_body) {
    if (!done && c.finish_reason.empty()) {
      set_error(c, ErrorKind::Protocol, "the stream ended without a finish_reason or [DONE]");
      return c;
    }
    if (!any_choice) {
      set_error(c, ErrorKind::Protocol,
                "the stream ended without a single choice (no event had a non-empty \"choices\" array): not an "
                "OpenAI completion stream");
      return c;
    }
    c.ok = true;
    return c;
  }
  auto obj = read_object(raw, "the response is not a JSON object: ", "the server reported an error: ", c);
  if (!obj) return c;
  const nlohmann::ordered_json& j = *obj;
  Delta d;
  d.chunk = &j;
  absorb(j, chat, false, true, c, d);
  if (const auto* ch = member(j, "choices"); !ch || !ch->is_array() || ch->empty()) {
    set_error(c, ErrorKind::Protocol, "the response has no choices: " + raw.substr(0, 200));
    return c;
  }
  c.ttft_ms = c.e2e_ms;
  if (!c.text.empty()) c.chunk_ms.push_back(c.e2e_ms);
  c.ok = true;
  return c;
}

Expected<OpenAIClient::Answer> OpenAIClient::side_request(const std::string& path, const std::string* body,
                                                          double timeout_s, int* status) const {
  httplib::Client cli(origin());
  Endpoint ep = ep_;
  if (timeout_s > 0) {
    ep.connect_timeout_s = std::min(ep.connect_timeout_s, timeout_s);
    ep.read_timeout_s = std::min(ep.read_timeout_s, timeout_s);
  }
  configure(cli, ep);
  const std::string p = path.rfind("/v1/", 0) == 0 ? route(path) : path;
  const std::string what = std::string(body ? "POST " : "GET ") + describe() + p;
  httplib::Request req;
  req.method = body ? "POST" : "GET";
  req.path = p;
  if (body) {
    req.body = *body;
    req.set_header("Content-Type", "application/json");
  }
  // The read timeout sees only silence: a server that trickles a byte at a time, or sends without
  // end, is cut by the whole answer's deadline and size instead of holding the caller (a proxy's
  // /health, a passed-through route) and growing its memory.
  const auto t0 = Clock::now();
  Answer a;
  std::string cut;  // why the answer was cut short, when it was
  req.response_handler = [&](const httplib::Response& r) {
    a.status = r.status;
    if (status) *status = r.status;  // an answer came, even if it is cut short below
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (a.body.size() + n > kMaxSideAnswerBytes) {
      cut = "the answer is larger than " + std::to_string(kMaxSideAnswerBytes >> 20) + " MiB";
      return false;
    }
    if (ms_since(t0) > ep.read_timeout_s * 1000) {
      cut = "the answer took longer than " + seconds_text(ep.read_timeout_s) + " s";
      return false;
    }
    a.body.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!cli.send(req, res, err)) {
    if (!cut.empty()) return Error(what + " failed: " + cut);
    if (err == httplib::Error::Read && a.status == 0 && waited_out(ms_since(t0), ep.read_timeout_s))
      return Error(what + " failed: no answer within " + seconds_text(ep.read_timeout_s) + " s");
    return Error(what + " failed: " + failure_text(err));
  }
  if (a.status == 0) a.status = res.status;
  if (status) *status = a.status;
  return a;
}

Expected<nlohmann::ordered_json> OpenAIClient::get_json(const std::string& path, int* status, double timeout_s) const {
  auto a = side_request(path, nullptr, timeout_s, status);
  if (!a) return a.error();
  nlohmann::ordered_json j = parse_ordered_json(a->body);
  if (j.is_discarded())
    return Error("GET " + path + ": HTTP " + std::to_string(a->status) + ", not JSON: " + a->body.substr(0, 200));
  if (a->status < 200 || a->status >= 300) {
    std::string m = error_message(j);
    return Error("GET " + path + ": HTTP " + std::to_string(a->status) + (m.empty() ? "" : ": " + m));
  }
  return j;
}

Expected<nlohmann::ordered_json> OpenAIClient::post_json(const std::string& path, const std::string& body,
                                                         int* status) const {
  auto a = side_request(path, &body, 0, status);
  if (!a) return a.error();
  nlohmann::ordered_json j = parse_ordered_json(a->body);
  if (j.is_discarded())
    return Error("POST " + path + ": HTTP " + std::to_string(a->status) + ", not JSON: " + a->body.substr(0, 200));
  return j;
}

Expected<std::string> OpenAIClient::get_text(const std::string& path, double timeout_s) const {
  auto a = side_request(path, nullptr, timeout_s, nullptr);
  if (!a) return a.error();
  if (a->status < 200 || a->status >= 300) {
    // llama-server explains itself ("Start it with `--metrics`"): keep what the server said.
    const std::string m = error_message(parse_ordered_json(a->body));
    return Error("GET " + path + ": HTTP " + std::to_string(a->status) + (m.empty() ? "" : ": " + m));
  }
  return std::move(a->body);
}

void ask_logprobs(nlohmann::ordered_json& body, bool chat, int top) {
  if (chat) {
    body["logprobs"] = true;
    body["top_logprobs"] = top;
  } else {
    body["logprobs"] = top;
  }
}

std::optional<Engine> engine_of(const OpenAIClient& client, double timeout_s) {
  int status = 0;
  auto models = client.get_json("/v1/models", &status, timeout_s);
  if (!models) return status >= 400 && status < 500 ? std::optional<Engine>(Engine::Unknown) : std::nullopt;
  if (!models->is_object() || !models->contains("data") || !(*models)["data"].is_array()) return Engine::Unknown;
  for (const auto& m : (*models)["data"]) {
    const auto owner = m.is_object() ? m.value("owned_by", nlohmann::ordered_json()) : nlohmann::ordered_json();
    if (owner == "llamacpp") return Engine::LlamaCpp;
    if (owner == "vllm") return Engine::Vllm;
    if (owner == "coda") return Engine::Coda;
  }
  return Engine::Unknown;
}

bool says_llamacpp(const OpenAIClient& client, double timeout_s) {
  return engine_of(client, timeout_s) == Engine::LlamaCpp;
}

bool add_llamacpp_names(nlohmann::ordered_json& body) {
  if (!body.is_object() || !body.contains("repetition_penalty") || body.contains("repeat_penalty")) return false;
  body["repeat_penalty"] = body["repetition_penalty"];
  return true;
}

bool stopped_at_limit(const Completion& c, int64_t max_tokens) {
  return c.ok && c.finish_reason == "stop" && c.stop_reason.empty() && max_tokens > 0 &&
         c.completion_tokens >= max_tokens;
}

}  // namespace coda::client
