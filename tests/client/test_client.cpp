// The OpenAI client against real HTTP on loopback: a scripted server written for this test (with
// SSE comments, CRLF, several fields, error bodies, a hang, a cut stream, malformed events) and
// coda's own server; and the SSE parser against the specification's rules.
#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "client/openai_client.h"
#include "client/sse.h"
#include "lab/load_bench.h"
#include "server/http_listen.h"

namespace coda::client {
namespace {

std::vector<std::string> parse_all(const std::string& raw, size_t step) {
  SseParser p;
  std::vector<SseEvent> ev;
  for (size_t i = 0; i < raw.size(); i += step) EXPECT_TRUE(p.feed(std::string_view(raw).substr(i, step), ev));
  std::vector<std::string> out;
  for (const auto& e : ev) out.push_back(e.data);
  return out;
}

TEST(Sse, SpecificationRules) {
  using V = std::vector<std::string>;
  EXPECT_EQ(parse_all(": waiting\n\ndata: {}\n\n", 100), V{"{}"});               // comments are not events
  EXPECT_EQ(parse_all("data:x\n\n", 100), V{"x"});                                 // no space after the colon
  EXPECT_EQ(parse_all("data:  x\n\n", 100), V{" x"});                              // only one space dropped
  EXPECT_EQ(parse_all("data: YHOO\ndata: +2\ndata: 10\n\n", 100), V{"YHOO\n+2\n10"});  // lines join with LF
  EXPECT_EQ(parse_all("event: add\nid: 7\ndata: 73857293\r\n\r\n", 100), V{"73857293"});
  EXPECT_EQ(parse_all("data: a\r\rdata: b\n\n", 100), (V{"a", "b"}));             // CR alone ends a line
  EXPECT_EQ(parse_all("data\n\ndata\ndata\n\ndata:\n\n", 100), (V{"", "\n", ""}));  // fields without colon
  EXPECT_EQ(parse_all("event: x\n\n", 100), V{});                                  // no data, no event
  EXPECT_EQ(parse_all("data: unterminated", 100), V{});                            // not dispatched yet
  const std::string raw = ": waiting\r\n\r\ndata: {\"a\": 1}\r\n\r\n: waiting\n\ndata: [DONE]\r\n\r\n";
  for (size_t step : {1u, 2u, 3u, 7u, 1000u}) EXPECT_EQ(parse_all(raw, step), (V{"{\"a\": 1}", "[DONE]"})) << step;
  SseParser small(8);
  std::vector<SseEvent> ev;
  EXPECT_FALSE(small.feed("data: 0123456789\n\n", ev));  // a line beyond the bound is an error
  // So is an event whose data lines never end in a blank line; events within the bound pass.
  SseParser events(16);
  EXPECT_TRUE(events.feed("data: 0123\ndata: 4567\n\ndata: 0123\ndata: 4567\n\n", ev));
  EXPECT_FALSE(events.feed("data: 0123\ndata: 4567\ndata: 89ab\ndata: cdef\n", ev));
}

TEST(Logprobs, BothShapes) {
  auto chat = nlohmann::json::parse(R"({"content": [{"token": "a", "logprob": -0.5,
      "top_logprobs": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.5}]}]})");
  auto v = parse_logprobs(chat);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].token, "a");
  EXPECT_DOUBLE_EQ(v[0].top[1].logprob, -1.5);
  auto legacy = nlohmann::json::parse(R"({"tokens": ["x", "y"], "token_logprobs": [-0.1, -2.0],
      "top_logprobs": [{"z": -3.0, "x": -0.1}, {"y": -2.0}], "text_offset": [0, 1]})");
  v = parse_logprobs(legacy);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].top[0].token, "x");  // sorted by probability
  EXPECT_DOUBLE_EQ(v[1].logprob, -2.0);
  EXPECT_TRUE(parse_logprobs(nlohmann::json::parse("[1, 2]")).empty());
}

TEST(Client, UrlsAreCheckedUpFront) {
  EXPECT_FALSE(OpenAIClient::create({"ftp://x", "", 1, 1, ""}).ok());
  EXPECT_FALSE(OpenAIClient::create({"http://:80", "", 1, 1, ""}).ok());
  EXPECT_FALSE(OpenAIClient::create({"http://h:99999", "", 1, 1, ""}).ok());
  EXPECT_FALSE(OpenAIClient::create({"http://h:abc/v1", "", 1, 1, ""}).ok());
  auto c = OpenAIClient::create({"http://localhost:8000/v1/", "", 1, 1, ""});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->describe(), "http://localhost:8000");
  EXPECT_EQ(OpenAIClient::create({"http://gw/team/v1", "", 1, 1, ""})->describe(), "http://gw:80/team");
}

// A scripted OpenAI-compatible server: each path prefix misbehaves in one way.
class ScriptedServer {
 public:
  ScriptedServer() {
    auto sse = [](std::vector<std::string> events, bool cut = false) {
      return [events, cut](const httplib::Request&, httplib::Response& res) {
        res.set_chunked_content_provider("text/event-stream", [events, cut, i = size_t{0}](
                                                                  size_t, httplib::DataSink& sink) mutable {
          if (i < events.size()) {
            const std::string& e = events[i++];
            sink.write(e.data(), e.size());
            return true;
          }
          if (cut) return false;  // close the connection mid-stream
          sink.done();
          return true;
        });
      };
    };
    const std::string c1 = R"(data: {"choices":[{"text":"Hel","finish_reason":null}]})";
    const std::string c2 = R"(data: {"choices":[{"text":"lo","finish_reason":"stop"}]})";
    const std::string usage = R"(data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}})";
    srv_.Post("/ok/v1/completions", sse({": keep-alive\r\n\r\n", c1 + "\r\n\r\n", ": waiting\n\n",
                                         "event: message\nid: 2\n" + c2 + "\n\n", usage + "\n\n", "data: [DONE]\n\n"}));
    srv_.Post("/ok/v1/chat/completions", [](const httplib::Request& req, httplib::Response& res) {
      auto body = nlohmann::json::parse(req.body);
      res.set_content(R"({"choices":[{"message":{"role":"assistant","content":"Hi!"},"finish_reason":"length",
        "logprobs":{"content":[{"token":"Hi","logprob":-0.2,"top_logprobs":[]}]}}],
        "usage":{"prompt_tokens":4,"completion_tokens":1},"coda":{"events":[{"type":"loop"}]}})",
                      "application/json");
      if (req.get_header_value("Authorization") != "Bearer k") res.status = 401;
      (void)body;
    });
    srv_.Post("/err/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      res.status = 400;
      res.set_content(R"({"error":{"message":"temperature: 9 is out of range","type":"invalid_request_error"}})",
                      "application/json");
    });
    srv_.Post("/html/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      res.status = 502;
      res.set_content("<html>Bad Gateway</html>", "text/html");
    });
    srv_.Post("/malformed/v1/completions", sse({c1 + "\n\n", "data: {not json\n\n", "data: [DONE]\n\n"}));
    // llama.cpp's server with timings_per_token: each chunk has its timings (prompt tokens
    // processed, and found in its cache), the closing usage the same count.
    const std::string t1 =
        R"(data: {"choices":[{"text":"Hel","finish_reason":null}],"timings":{"cache_n":5,"prompt_n":2}})";
    const std::string t2 =
        R"(data: {"choices":[{"text":"lo","finish_reason":null}],"timings":{"cache_n":"x","prompt_n":2}})";
    srv_.Post("/timings/v1/completions", sse({t1 + "\n\n", t2 + "\n\n", usage + "\n\n", "data: [DONE]\n\n"}));
    for (const std::string owner : {"llamacpp", "vllm", "coda", "sglang"})
      srv_.Get("/" + owner + "/v1/models", [owner](const httplib::Request&, httplib::Response& res) {
        res.set_content(R"({"object":"list","data":[{"id":"m","object":"model","owned_by":")" + owner + R"("}]})",
                        "application/json");
      });
    srv_.Get("/err/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.status = 503;
      res.set_content(R"({"error":{"message":"loading"}})", "application/json");
    });
    srv_.Post("/midstream/v1/completions", sse({c1 + "\n\n", R"(data: {"error":{"message":"out of KV"}})" "\n\n"}));
    srv_.Post("/cut/v1/completions", sse({c1 + "\n\n"}, true));
    srv_.Post("/noend/v1/completions", sse({c1 + "\n\n"}));
    srv_.Post("/hang/v1/completions", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/event-stream", [this, sent = false](size_t, httplib::DataSink& sink) mutable {
        if (!sent) {
          const std::string e = R"(data: {"choices":[{"text":"a","finish_reason":null}]})" "\n\n";
          sink.write(e.data(), e.size());
          sent = true;
          return true;
        }
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return released_; });  // silent until the test ends
        return false;
      });
    });
    // One token, then only keep-alive comments: bytes, but never an answer.
    srv_.Post("/pinging/v1/completions", [this](const httplib::Request&, httplib::Response& res) {
      // (At most 1,000 pings, so that a client that never gives up fails the test instead of hanging it.)
      res.set_chunked_content_provider("text/event-stream", [this, sent = 0](size_t, httplib::DataSink& sink) mutable {
        if (sent > 1000) return false;
        const std::string e = sent++ ? std::string(": ping\n\n")
                                     : std::string(R"(data: {"choices":[{"text":"a","finish_reason":null}]})"
                                                   "\n\n");
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, std::chrono::milliseconds(10), [this] { return released_; })) return false;
        return sink.write(e.data(), e.size());
      });
    });
    // A side route that sends a byte every 10 ms without end.
    srv_.Get("/trickle", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("application/json", [this](size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, std::chrono::milliseconds(10), [this] { return released_; })) return false;
        return sink.write(" ", 1);
      });
    });
    // Request k gets behaviour k % 4: a good stream, a 500, a cut stream, a hang.
    srv_.Post("/mixed/v1/completions", [this, ok = sse({c1 + "\n\n", c2 + "\n\n", "data: [DONE]\n\n"}),
                                        cut = sse({c1 + "\n\n"}, true)](const httplib::Request& req,
                                                                          httplib::Response& res) {
      const int k = mixed_++;
      if (k % 4 == 0) return ok(req, res);
      if (k % 4 == 1) {
        res.status = 500;
        res.set_content(R"({"error":{"message":"internal","type":"server_error"}})", "application/json");
        return;
      }
      if (k % 4 == 2) return cut(req, res);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return released_; });
    });
    port_ = *bind_http(srv_, "127.0.0.1", 0);  // a backlog for 12 connections at once
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    // bind_to_any_port already listens: connections wait in the backlog until the loop accepts them.
  }
  ~ScriptedServer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
    srv_.stop();
    thread_.join();
  }
  std::string url(const std::string& prefix) const { return "http://127.0.0.1:" + std::to_string(port_) + prefix; }

 private:
  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::atomic<int> mixed_{0};
};

OpenAIClient client_for(const std::string& url, double read_timeout = 30, const std::string& key = "") {
  return *OpenAIClient::create({url, key, 5, read_timeout, ""});
}

const nlohmann::json kStream = {{"prompt", "x"}, {"stream", true}};

TEST(Client, StreamWithCommentsCrlfAndFields) {
  ScriptedServer s;
  std::vector<std::string> deltas;
  auto c = client_for(s.url("/ok")).complete(kStream, false, [&](const Delta& d) {
    deltas.push_back(d.text);
    return true;
  });
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(deltas, (std::vector<std::string>{"Hel", "lo", ""}));
  EXPECT_EQ(c.text, "") << "the callback took the deltas; the result does not gather them too";
  EXPECT_EQ(c.finish_reason, "stop");
  EXPECT_EQ(c.prompt_tokens, 3);
  EXPECT_EQ(c.completion_tokens, 2);
  EXPECT_EQ(c.chunk_ms.size(), 2u);
  EXPECT_GE(c.ttft_ms, 0);
  EXPECT_EQ(deltas, (std::vector<std::string>{"Hel", "lo", ""}));
}

TEST(Client, LlamaCppTimingsCountThePromptUntilUsageSaysIt) {
  ScriptedServer s;
  // Cancelled after the first chunk (as a guard stop closes the stream): its timings, 2 + 5.
  auto c = client_for(s.url("/timings")).complete(kStream, false, [](const Delta&) { return false; });
  EXPECT_EQ(c.prompt_tokens, 7);
  // Read to the end: a malformed timings chunk changes nothing, the closing usage has the last word.
  c = client_for(s.url("/timings")).complete(kStream, false, [](const Delta&) { return true; });
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.prompt_tokens, 3);
}

TEST(Client, EngineIsWhatModelsNamesTheOwner) {
  ScriptedServer s;
  EXPECT_EQ(engine_of(client_for(s.url("/llamacpp")), 5), Engine::LlamaCpp);
  EXPECT_TRUE(says_llamacpp(client_for(s.url("/llamacpp")), 5));
  EXPECT_EQ(engine_of(client_for(s.url("/vllm")), 5), Engine::Vllm);
  EXPECT_EQ(engine_of(client_for(s.url("/coda")), 5), Engine::Coda);
  EXPECT_EQ(engine_of(client_for(s.url("/sglang")), 5), Engine::Unknown);
  EXPECT_FALSE(says_llamacpp(client_for(s.url("/vllm")), 5));
  // No /v1/models there (404): an answer, Unknown. A 503 while loading: ask again later.
  EXPECT_EQ(engine_of(client_for(s.url("/nothing")), 5), Engine::Unknown);
  EXPECT_EQ(engine_of(client_for(s.url("/err")), 5), std::nullopt);
}

TEST(Client, StreamWithoutACallbackGathersTheText) {
  ScriptedServer s;
  auto c = client_for(s.url("/ok")).complete(kStream, false);
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.text, "Hello");
  EXPECT_EQ(c.finish_reason, "stop");
}

TEST(Client, NonStreamingChatWithLogprobsAndCodaReport) {
  ScriptedServer s;
  auto c = client_for(s.url("/ok/v1"), 30, "k").complete({{"messages", nlohmann::json::array()}}, true);
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.text, "Hi!");
  EXPECT_EQ(c.finish_reason, "length");
  ASSERT_EQ(c.logprobs.size(), 1u);
  EXPECT_DOUBLE_EQ(c.logprobs[0].logprob, -0.2);
  EXPECT_EQ(c.coda["events"][0]["type"], "loop");
  auto unauth = client_for(s.url("/ok")).complete({{"messages", nlohmann::json::array()}}, true);
  EXPECT_FALSE(unauth.ok);
  EXPECT_EQ(unauth.status, 401);
}

TEST(Client, EveryFailureIsARecordWithItsKind) {
  ScriptedServer s;
  auto err = client_for(s.url("/err")).complete(kStream, false);
  EXPECT_EQ(err.error_kind, ErrorKind::Http);
  EXPECT_EQ(err.status, 400);
  EXPECT_NE(err.error.find("temperature: 9"), std::string::npos) << err.error;
  EXPECT_EQ(err.error_body["error"]["type"], "invalid_request_error");

  auto html = client_for(s.url("/html")).complete(kStream, false);
  EXPECT_EQ(html.error_kind, ErrorKind::Http);
  EXPECT_EQ(html.status, 502);

  auto bad = client_for(s.url("/malformed")).complete(kStream, false);
  EXPECT_EQ(bad.error_kind, ErrorKind::Protocol);
  EXPECT_EQ(bad.text, "Hel");  // what arrived before is kept

  auto mid = client_for(s.url("/midstream")).complete(kStream, false);
  EXPECT_EQ(mid.error_kind, ErrorKind::Upstream);
  EXPECT_NE(mid.error.find("out of KV"), std::string::npos);

  auto cut = client_for(s.url("/cut")).complete(kStream, false);
  EXPECT_FALSE(cut.ok);
  EXPECT_TRUE(cut.error_kind == ErrorKind::Connection || cut.error_kind == ErrorKind::Protocol) << cut.error;

  auto noend = client_for(s.url("/noend")).complete(kStream, false);
  EXPECT_EQ(noend.error_kind, ErrorKind::Protocol);

  auto hang = client_for(s.url("/hang"), 0.5).complete(kStream, false);
  EXPECT_EQ(hang.error_kind, ErrorKind::Timeout) << hang.error;
  EXPECT_EQ(hang.text, "a");
  // Comments keep the bytes coming but are not tokens: the read timeout counts from the last token.
  auto pinging = client_for(s.url("/pinging"), 0.5).complete(kStream, false);
  EXPECT_EQ(pinging.error_kind, ErrorKind::Timeout) << pinging.error;
  EXPECT_NE(pinging.error.find("keep-alive"), std::string::npos) << pinging.error;
  EXPECT_EQ(pinging.text, "a");
  // These all reached the server (the proxy retries only requests that did not).
  for (const auto* c : {&html, &bad, &mid, &cut, &noend, &hang, &pinging}) EXPECT_TRUE(c->connected) << c->error;

  // A side request that trickles is cut at its deadline, whatever the bytes.
  int status = 0;
  auto trickle = client_for(s.url(""), 0.5).get_json("/trickle", &status);
  ASSERT_FALSE(trickle);
  EXPECT_NE(trickle.message().find("took longer than 0.5 s"), std::string::npos) << trickle.message();
  EXPECT_EQ(status, 200);  // it did answer: the caller can tell it from a server that is down

  auto stopped = client_for(s.url("/ok")).complete(kStream, false, [](const Delta&) { return false; });
  EXPECT_EQ(stopped.error_kind, ErrorKind::Cancelled);

  std::atomic<bool> cancel{true};
  auto flagged = client_for(s.url("/ok")).complete(kStream, false, {}, &cancel);
  EXPECT_EQ(flagged.error_kind, ErrorKind::Cancelled);
}

// A caller that gives up while the server is silent (a long prefill, a hung upstream) is heard
// without waiting for a byte: the read timeout here is 60 s, so only the watcher can make these
// Cancelled (a client that waited for bytes would end them as timeouts a minute later).
TEST(Client, ACallerThatLeavesIsHeardWhileTheServerIsSilent) {
  ScriptedServer s;
  std::atomic<bool> left{false};
  const auto after_first_token = [&](const Delta&) {
    left = true;  // the server goes silent after its first token
    return true;
  };
  auto gone =
      client_for(s.url("/hang"), 60).complete(kStream, false, after_first_token, nullptr, [&] { return left.load(); });
  EXPECT_EQ(gone.error_kind, ErrorKind::Cancelled) << gone.error;
  left = false;
  auto flagged = client_for(s.url("/hang"), 60).complete(kStream, false, after_first_token, &left);
  EXPECT_EQ(flagged.error_kind, ErrorKind::Cancelled) << flagged.error;
}

// A loopback port nobody listens on: bound, never listening, and held until the test ends. A
// connect there is refused. Closing it early would free the number for any `--port 0` server of a
// test running beside this one, and the "closed" port would answer.
class ClosedPort {
 public:
  ClosedPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
  }
  ~ClosedPort() { ::close(fd_); }
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_;
  int port_ = 0;
};

TEST(Client, RefusedConnection) {
  const ClosedPort closed;
  auto c = client_for(closed.url()).complete(kStream, false);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.error_kind, ErrorKind::Connection) << c.error;
  EXPECT_EQ(c.status, 0);
  EXPECT_FALSE(c.connected);  // never reached a server: safe to send elsewhere
}

TEST(LoadRun, ErrorsHangsAndCutStreamsAreRecordsNotCrashes) {
  ScriptedServer s;
  lab::HttpTarget target(client_for(s.url("/mixed"), 0.5));
  lab::LoadOptions o;
  o.rate_per_min = 0;  // all at once
  o.requests = 12;
  o.max_tokens = 8;
  o.abort_after_errors = 1000;
  const std::vector<lab::BenchPrompt> prompts = {{"p", nullptr, "g"}};
  auto run = lab::run_load(target, prompts, o, {}, nullptr);
  ASSERT_EQ(run.records.size(), 12u);
  std::map<std::string, int> kinds;
  for (const auto& r : run.records) ++kinds[r.out.ok ? "ok" : to_string(r.out.error_kind)];
  EXPECT_EQ(kinds["ok"], 3);
  EXPECT_EQ(kinds["http"], 3);
  EXPECT_EQ(kinds["timeout"], 3);
  EXPECT_EQ(kinds["connection"] + kinds["protocol"], 3);
  const auto sum = lab::summarize(run, o, target.describe());
  EXPECT_EQ(sum["completed"], 3);
  EXPECT_EQ(sum["errors"], 9);
  EXPECT_EQ(sum["finish_reasons"]["stop"], 3);
  EXPECT_FALSE(run.target_down);
}

TEST(LoadRun, ADownTargetStopsTheRunEarly) {
  const ClosedPort closed;
  lab::HttpTarget target(client_for(closed.url()));
  lab::LoadOptions o;
  o.rate_per_min = 6000;
  o.requests = 200;
  o.abort_after_errors = 5;
  o.max_concurrency = 1;
  auto run = lab::run_load(target, {{"p", nullptr, "g"}}, o, {}, nullptr);
  EXPECT_TRUE(run.target_down);
  EXPECT_LT(run.records.size(), 200u);
  EXPECT_NE(run.first_error.find("cannot connect"), std::string::npos) << run.first_error;
}

}  // namespace
}  // namespace coda::client
