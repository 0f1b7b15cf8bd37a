// One OpenAI-compatible HTTP client for everything coda says to another server: the lab's load
// benchmark and tuner drive a deployment with it, the proxy forwards through it. It speaks
// /v1/completions and /v1/chat/completions, streaming (SSE, parsed by the specification) and not,
// and reads what servers send back in their different shapes: text or deltas, finish_reason, usage,
// logprobs in the chat shape (`content[]` with `top_logprobs`, also what llama.cpp returns on
// /v1/completions) or the legacy shape (`tokens`, `token_logprobs`, `top_logprobs` dicts: OpenAI,
// vLLM), and coda's own `coda` report when present.
//
// Nothing here throws or ends the caller: a refused connection, a timeout, an HTTP error body, a
// malformed stream or a cancellation all come back as a `Completion` with ok = false, the error's
// kind and message, and whatever had arrived before (the vLLM benchmark's habit: a failed request is
// a record, not an exception).
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace coda::client {

struct Endpoint {
  std::string url;      // http(s)://host:port, optionally with a path prefix, with or without /v1
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
  double connect_timeout_s = 10;
  double read_timeout_s = 120;  // the longest silence between two reads (a hung upstream)
  // https: a PEM file of the certificate authorities to trust instead of the system's, for a
  // server with a private CA or a self-signed certificate (curl's --cacert).
  std::string ca_cert;
};

struct TopLogprob {
  std::string token;
  double logprob = 0;
};

struct TokenLogprob {
  std::string token;
  double logprob = 0;
  std::vector<TopLogprob> top;  // most likely first, as sent
};

enum class ErrorKind {
  None,
  Connection,  // could not connect, or the connection broke
  Timeout,     // connect or read timeout
  Http,        // a non-2xx status; `status` and `error_body` say more
  Upstream,    // an error event inside a 200 stream
  Protocol,    // not OpenAI's shape: bad JSON, a stream without an end
  Cancelled,   // the caller stopped it (callback, cancel flag)
};
const char* to_string(ErrorKind k);

// A URL as it may be shown: any credentials in it (scheme://user:pass@host) replaced by ***.
std::string redact_url(const std::string& url);

// One request's outcome. Times are milliseconds since the request was sent.
struct Completion {
  bool ok = false;
  ErrorKind error_kind = ErrorKind::None;
  std::string error;                  // a message a user can act on
  int status = 0;                     // HTTP status; 0 when no response came
  bool connected = true;              // false: no connection was made (refused, unreachable, or the connect
                                      // timed out), so the request never reached the server
  nlohmann::ordered_json error_body;  // the server's error JSON, when it sent one
  std::string text;                   // the generated text (concatenated deltas when streaming, without on_delta)
  std::string reasoning;              // chat: the reasoning beside it (reasoning_content), concatenated
  std::string finish_reason;          // empty when none was reported
  std::string stop_reason;            // vLLM's (coda's too): the stop string that ended the text; else empty
  int64_t prompt_tokens = -1;         // from usage; -1 when the server did not say
  int64_t completion_tokens = -1;
  int64_t reasoning_tokens = -1;  // usage.completion_tokens_details.reasoning_tokens; -1 when not said
  std::vector<TokenLogprob> logprobs;
  nlohmann::ordered_json coda;  // coda's report ("coda" field), null when absent
  double ttft_ms = -1;          // first content chunk (streaming) or the whole answer
  double e2e_ms = 0;
  std::vector<double> chunk_ms;  // arrival of every chunk that carried text
};

// Asks for each token's logprob with `top` alternatives, in the request's own shape: chat
// `logprobs: true, top_logprobs: N`; completions `logprobs: N`.
void ask_logprobs(nlohmann::ordered_json& body, bool chat, int top);

// What a streaming callback sees for each data event: the parsed delta and the raw chunk.
struct Delta {
  std::string text;
  // Chat: the model's reasoning, which vLLM's reasoning parsers send beside the content as
  // `reasoning_content` (or `reasoning`, in newer vLLM), with the name the server used.
  std::string reasoning;
  const char* reasoning_key = nullptr;
  nlohmann::ordered_json tool_calls;  // chat: the delta's (or message's) `tool_calls` as sent; null if none
  std::string finish_reason;
  std::string stop_reason;  // vLLM's (coda's too), when a stop string ended the text; else empty
  std::vector<TokenLogprob> logprobs;
  const nlohmann::ordered_json* chunk = nullptr;  // the event's JSON as sent
  double at_ms = 0;
};
// Returns false to stop: the connection is closed, which cancels the generation upstream.
using OnDelta = std::function<bool(const Delta&)>;

class OpenAIClient {
 public:
  // Checks the URL: http:// or https://, a host, a port in range.
  static Expected<OpenAIClient> create(Endpoint endpoint);

  // POSTs `body` to /v1/chat/completions (chat) or /v1/completions; streams when body["stream"] is
  // true. `on_delta` sees each streamed chunk, and then the chunks' text, reasoning and logprobs are
  // left to it (not also gathered into the result, which a long generation would make large); without
  // it they are gathered. `cancel` and `caller_gone`, when given, are checked as bytes arrive and
  // every kCancelPollMs while the server is silent (a long prefill, a hung upstream): either one
  // closes the connection and the result is ErrorKind::Cancelled. `request_id`, when not empty, is
  // sent as X-Request-Id (vLLM names the request by it in its logs and ids).
  // Thread-safe: each call opens its own connection.
  Completion complete(const nlohmann::ordered_json& body, bool chat, const OnDelta& on_delta = {},
                      const std::atomic<bool>* cancel = nullptr, const std::function<bool()>& caller_gone = {},
                      const std::string& request_id = {}) const;
  static constexpr int kCancelPollMs = 100;

  // The requests below (side requests: models, tokenizer, metrics, passed-through routes) read at
  // most this much, and their whole answer must arrive within the read timeout (or `timeout_s`).
  static constexpr size_t kMaxSideAnswerBytes = size_t{256} << 20;

  // GET a JSON document, e.g. "/v1/models" or "/health" (paths under /v1 follow the URL's prefix).
  // `timeout_s` > 0 caps the wait below the endpoint's read timeout.
  Expected<nlohmann::ordered_json> get_json(const std::string& path, int* status = nullptr, double timeout_s = 0) const;
  // POSTs a JSON body (text, sent as it is) to a path of the server, e.g. "/tokenize" (paths under
  // /v1 follow the URL's prefix), and returns the JSON answer whatever its status (an error body
  // included), with the status; an error only when no JSON came back.
  Expected<nlohmann::ordered_json> post_json(const std::string& path, const std::string& body, int* status) const;
  // The body of a GET as text (e.g. /metrics, from the origin); an error for a non-2xx status.
  // `timeout_s` > 0 caps the wait below the endpoint's read timeout (a side request that must not
  // hold up the caller when the server hangs).
  Expected<std::string> get_text(const std::string& path, double timeout_s = 0) const;

  const Endpoint& endpoint() const { return ep_; }
  std::string describe() const;  // scheme://host:port/prefix, for messages

 private:
  OpenAIClient() = default;
  std::string route(const std::string& v1_path) const;  // "/v1/completions" under the prefix
  std::string origin() const;                           // scheme://host:port
  struct Answer {
    int status = 0;
    std::string body;
  };
  // One GET (body null) or POST of a side request, bounded in size and in time. `status` (when
  // given) gets the HTTP status as soon as one arrives, so a caller can tell an upstream that
  // answered badly from one that could not be reached.
  Expected<Answer> side_request(const std::string& path, const std::string* body, double timeout_s, int* status) const;

  Endpoint ep_;
  bool https_ = false;  // TLS through httplib's OpenSSL build (Debian's libcpp-httplib has it)
  std::string host_;
  int port_ = 80;
  std::string prefix_;  // path before /v1, without a trailing slash
};

// Logprobs of one choice in either shape (chat `content[]`, or legacy `tokens`/`token_logprobs`/
// `top_logprobs`); empty when absent or malformed.
std::vector<TokenLogprob> parse_logprobs(const nlohmann::ordered_json& choice_logprobs);

// The engine behind an OpenAI-compatible server, as its /v1/models names its models' owner
// (`owned_by`): "llamacpp" (llama.cpp's and ik_llama.cpp's servers), "vllm", "coda" (coda serve).
enum class Engine { Unknown, LlamaCpp, Vllm, Coda };
// Nullopt when the server could not be asked (down, an error, no answer within `timeout_s`), so a
// caller can ask again later; Unknown when it answered without naming one of these.
std::optional<Engine> engine_of(const OpenAIClient& client, double timeout_s);
// Whether the server names itself llama.cpp in /v1/models. Its sampling fields are OpenAI's and
// vLLM's names but for one: the repetition penalty is read only as `repeat_penalty`, and
// `repetition_penalty` is ignored without a word. False when the server cannot be asked.
bool says_llamacpp(const OpenAIClient& client, double timeout_s);
// Adds llama.cpp's name for a field the body gives by vLLM's: `repeat_penalty` for
// `repetition_penalty` (unless the body names both). Returns whether it added anything.
bool add_llamacpp_names(nlohmann::ordered_json& body);

// Whether an answer said "stop" for what was a cut at `max_tokens`: its own count of completion
// tokens reached the cap and no stop string ended it. ik_llama.cpp's server before its pull request
// 2362 (August 2026) and llama.cpp's before 7198 (May 2024) say "stop" for every cut at the limit;
// a server that keeps to OpenAI's meaning says it there only when the end token came last, which is
// rare. The lab counts such an answer as a failure, and the proxy reads it as "length".
bool stopped_at_limit(const Completion& c, int64_t max_tokens);

}  // namespace coda::client
