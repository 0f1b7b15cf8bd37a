#include "server/server.h"

#include <chrono>
#include <cmath>
#include <ctime>

#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "core/json_parse.h"
#include "core/malloc_tuning.h"
#include "core/strings.h"
#include "core/version.h"
#include "server/embeddings_api.h"
#include "server/http_api.h"
#include "server/http_listen.h"
#include "server/llama_api.h"
#include "server/responses_api.h"
#include "server/shutdown.h"

namespace coda {

namespace {

// Waits for every ticket's result. A non-streaming client that leaves meanwhile (it writes
// nothing until the end, so no failed write would tell) cancels them, as a streaming client's
// failed write does: the sequences end at the next step with finish_reason "abort".
std::vector<const Expected<GuardedResult>*> result_unless_client_leaves(
    const std::vector<std::shared_ptr<Ticket>>& tickets, const ClientWatch& watch) {
  std::vector<const Expected<GuardedResult>*> out;
  for (const auto& t : tickets) {
    while (!t->wait_result(std::chrono::milliseconds(100)))
      if (!t->cancelled && watch.gone())
        for (const auto& each : tickets) each->cancelled = true;
    out.push_back(&t->result());
  }
  return out;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "5");  // a shutdown: an SDK retries it
  res.set_content(dump_json(e.body()), "application/json");
}

// A generation-layer error as the API reports it.
// One Server-Sent Event carrying a JSON object; false when the client has gone.
bool write_sse(httplib::DataSink& sink, const nlohmann::ordered_json& j) {
  const std::string line = "data: " + dump_json(j) + "\n\n";
  return sink.write(line.data(), line.size());
}

ApiError generation_error(const std::string& message) {
  ApiError e;
  e.message = message;
  if (message == kShutdownMessage) {  // not the request's fault: 503, which clients retry (never 400)
    e.status = 503;
    e.type = "server_error";
    e.code = "server_shutting_down";
    return e;
  }
  if (message.rfind("This model's maximum context length", 0) == 0) {
    e.code = "context_length_exceeded";
    e.param = message.find("in the messages") != std::string::npos ? "messages" : "prompt";
  } else {
    const size_t colon = message.find(':');
    if (colon != std::string::npos && colon < 40 && message.find(' ') > colon) e.param = message.substr(0, colon);
  }
  return e;
}

// The answer's id and its X-Request-Id share one request id: the client's (vLLM builds
// "chatcmpl-<X-Request-Id>" the same way), or a new random one, so a client's logs can join the two.
std::string response_id(const httplib::Request& req, httplib::Response& res, bool chat) {
  const std::string request_id = request_id_for(req);
  res.set_header("X-Request-Id", request_id);
  return (chat ? "chatcmpl-" : "cmpl-") + request_id;
}

}  // namespace

Server::Server(Generator& gen, ServerOptions opts)
    : gen_(gen),
      opts_(std::move(opts)),
      scheduler_(std::make_unique<Scheduler>(
          gen, metrics_,
          SchedulerOptions{opts_.max_queue, opts_.max_batch, opts_.kv_budget_tokens, 64, opts_.prefix_cache_tokens})) {
  started_ = static_cast<int64_t>(std::time(nullptr));
  if (opts_.responses_store_bytes > 0) responses_ = std::make_unique<ResponseStore>(opts_.responses_store_bytes);
  const int threads =
      opts_.http_threads > 0 ? opts_.http_threads : static_cast<int>(opts_.max_queue + opts_.max_batch) + 8;
  http_ = make_http_server(opts_.tls, tls_error_);  // bind() reports a certificate that did not load
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(opts_.max_body_bytes);
  http_->set_read_timeout(opts_.read_timeout_s, 0);
  http_->set_write_timeout(opts_.write_timeout_s, 0);
  routes();
}

Server::~Server() {
  stop();
}

Expected<int> Server::bind() {
  if (!tls_error_.empty()) return Error(tls_error_);
  auto port = bind_http(*http_, opts_.host, opts_.port);
  if (port) bound_port_ = *port;
  return port;
}

void Server::serve() {
  http_->listen_after_bind();
}

void Server::stop() {
  http_->stop();
  scheduler_.reset();
}

bool Server::drain(double timeout_s) {
  draining_ = true;
  // A ticket lives until its answer is written, so none alive means nothing is left to finish.
  auto idle = [this] { return scheduler_->tickets_alive() == 0; };
  const bool finished = wait_until(idle, deadline_in(timeout_s));
  if (!finished) {
    // What is left ends with an error its client can act on (503, or an error event then [DONE]),
    // given a few seconds to be written.
    scheduler_->abort_all();
    wait_until(idle, deadline_in(5));
  }
  stop_when_answered(*http_, *open_requests_, bound_port_);
  return finished;
}

void Server::routes() {
  // API key on /v1/*, /admin/* and the tokenizer routes; /health, /metrics and /version stay open.
  install_api_handlers(
      *http_,
      {opts_.api_keys,
       {"/v1/", "/admin/", "/tokenize", "/detokenize", "/apply-template", "/completion", "/props", "/embeddings",
        "/slots"},
       opts_.max_body_bytes,
       opts_.read_timeout_s,
       [this] { return draining_.load(); },
       opts_.metrics_auth,
       open_requests_},
      [this](int status) { metrics_.add("coda:request_rejected_total", 1, "status", std::to_string(status)); });
  auto health = [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) {  // a load balancer's probe takes this replica out of rotation
      res.status = 503;
      return res.set_content("{\"status\":\"draining\"}", "application/json");
    }
    res.set_content("{\"status\":\"ok\"}", "application/json");
  };
  http_->Get("/health", health);
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.prometheus(), "text/plain; version=0.0.4");
  });
  auto model = [this] {
    return nlohmann::ordered_json{{"id", opts_.defaults.model_id},
                                  {"object", "model"},
                                  {"created", started_},
                                  {"owned_by", "coda"},
                                  {"max_model_len", gen_.n_ctx()}};
  };
  http_->Get("/v1/models", [model](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_json({{"object", "list"}, {"data", nlohmann::ordered_json::array({model()})}}),
                    "application/json");
  });
  // OpenAI's "retrieve model" (the SDKs' models.retrieve); an id may hold '/' (org/name).
  http_->Get(R"(/v1/models/(.+))", [this, model](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] == opts_.defaults.model_id) return res.set_content(dump_json(model()), "application/json");
    send_error(res, model_not_found(req.matches[1].str(), opts_.defaults.model_id));
  });
  if (opts_.admin_api) {
    auto state = [this](httplib::Response& res) {
      res.set_content(dump_json({{"paused", scheduler_->paused()},
                                 {"running", scheduler_->running()},
                                 {"waiting", scheduler_->waiting()}}),
                      "application/json");
    };
    http_->Post("/admin/pause", [this, state](const httplib::Request&, httplib::Response& res) {
      scheduler_->pause();
      state(res);
    });
    http_->Post("/admin/resume", [this, state](const httplib::Request&, httplib::Response& res) {
      scheduler_->resume();
      state(res);
    });
  }
  // llama-server's: its web UI and clients read the context, slots and chat template here.
  http_->Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    const ChatTemplate* t = gen_.chat_template();
    res.set_content(dump_json(llama_props(gen_.n_ctx(), opts_.max_batch, opts_.model_path, opts_.defaults.model_id,
                                          t ? t->source() : "", gen_.chat_template_chosen(), gen_.vocab())),
                    "application/json");
  });
  // llama-server's monitoring route: what each batch slot is doing, and how its generation looks to
  // the guard. `fail_on_no_slot` answers 503 when every slot is busy, as llama-server does.
  http_->Get("/slots", [this](const httplib::Request& req, httplib::Response& res) {
    if (!opts_.slots_api)
      return send_api_error(res, 501, "This server was started with --no-slots; restart it without to serve GET /slots",
                            "not_supported_error");
    const auto running = scheduler_->slots();
    if (req.has_param("fail_on_no_slot") && running.size() >= opts_.max_batch)
      return send_api_error(res, 503, "No slot available: all " + std::to_string(opts_.max_batch) + " are busy",
                            "unavailable_error");
    res.set_content(dump_json(llama_slots(running, opts_.max_batch, gen_.n_ctx())), "application/json");
  });
  http_->Get("/v1/health", health);  // llama-server's alias
  http_->Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_json({{"version", kVersion}}), "application/json");
  });
  http_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
  http_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
  http_->Post("/apply-template",
              [this](const httplib::Request& req, httplib::Response& res) { apply_template(req, res); });
  http_->Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completions(req, res, false); });
  http_->Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completions(req, res, true); });
  // llama-server's own dialect, under both of its names (not OpenAI's; that is /v1/completions).
  for (const char* path : {"/completion", "/completions"})
    http_->Post(path, [this](const httplib::Request& req, httplib::Response& res) { llama_completion(req, res); });
  http_->Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) { responses(req, res); });
  http_->Get(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    answer_stored_response(responses_.get(), req.matches[1].str(), false, res);
  });
  http_->Delete(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    answer_stored_response(responses_.get(), req.matches[1].str(), true, res);
  });
  for (const char* path : {"/v1/embeddings", "/embeddings"})  // the second is llama-server's alias
    http_->Post(path, [this](const httplib::Request& req, httplib::Response& res) { embeddings(req, res); });
}

// A refused request: counted by status, answered in OpenAI's error shape.
void Server::refuse(httplib::Response& res, const ApiError& e) {
  metrics_.add("coda:request_rejected_total", 1, "status", std::to_string(e.status));
  send_error(res, e);
}

// 429 while the queue is full: `tail` ends the message with what the client can do.
void Server::refuse_at_capacity(httplib::Response& res, const std::string& tail) {
  metrics_.add("coda:request_rejected_total", 1, "status", "429");
  res.set_header("Retry-After", "1");
  send_api_error(res, 429,
                 "The server is at capacity (" + std::to_string(opts_.max_queue) + " requests waiting)" + tail,
                 "rate_limit_exceeded", "rate_limit_exceeded");
}

void Server::llama_completion(const httplib::Request& req, httplib::Response& res) {
  const TrimAfterLargeBody trim(req.body.size());
  auto reject = [&](const ApiError& e) { refuse(res, e); };
  if (auto e = check_request_limits(req.body, opts_.limits)) return reject(*e);
  const auto in = parse_ordered_json(req.body);
  if (in.is_discarded()) {
    ApiError e;
    e.message = "The request body is not valid JSON.";
    return reject(e);
  }
  LlamaCompletionOptions o;
  auto body = llama_completion_to_openai(in, o);
  if (auto* e = std::get_if<ApiError>(&body)) return reject(*e);
  std::get<nlohmann::ordered_json>(body).erase("model");  // llama-server serves one model whatever is named
  // The OpenAI route's limits hold for what the translation made too (llama-server's list form of
  // logit_bias is an array the first check counts only as an array).
  const std::string openai_body = dump_json(std::get<nlohmann::ordered_json>(body));
  if (auto e = check_request_limits(openai_body, opts_.limits)) return reject(*e);
  auto parsed = parse_api_request(openai_body, false, opts_.defaults);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reject(*e);
  ApiRequest r = std::move(std::get<ApiRequest>(parsed));
  if (Status s = gen_.check(r.gen); !s.ok()) return reject(generation_error(s.message()));
  auto ticket = scheduler_->submit(r);
  if (!ticket) return refuse_at_capacity(res, "; retry shortly.");
  const std::string model = opts_.defaults.model_id;
  if (!r.stream) {
    const Expected<GuardedResult>& out = *result_unless_client_leaves({ticket}, ClientWatch(req))[0];
    if (!out) return send_error(res, generation_error(out.message()));
    res.set_content(dump_json(llama_completion_body(r, *out, model, gen_.n_ctx(), gen_.vocab(), o, false)),
                    "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  // Events as llama-server sends them: `data: {...}` per piece of text, the last with `stop`
  // true and the statistics; no `[DONE]`.
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, ticket, r, o, model](size_t, httplib::DataSink& sink) {
        auto send = [&](const nlohmann::ordered_json& j) { return write_sse(sink, j); };
        std::string text;
        std::vector<TokenLogprob> lps;
        bool done = false;
        ticket->wait(text, lps, done, std::chrono::milliseconds(200));
        if (!text.empty() || !lps.empty()) {
          if (!send(llama_stream_event(text, lps, ticket->prompt_tokens.load(), ticket->tokens_waited(), gen_.vocab(),
                                       o)))
            return false;
        } else if (!done && !sink.write(": waiting\n\n", 11)) {  // notices a client that left
          return false;
        }
        if (!done) return sink.is_writable();
        const Expected<GuardedResult>& out = ticket->result();
        send(out ? llama_completion_body(r, *out, model, gen_.n_ctx(), gen_.vocab(), o, true)
                 : generation_error(out.message()).body());
        sink.done();
        return true;
      },
      [ticket](bool success) {
        if (!success) ticket->cancelled = true;
      });
}

void Server::completions(const httplib::Request& req, httplib::Response& res, bool chat) {
  // A large body leaves its parsed document's blocks free in this thread's arena; hand them back
  // once the request is answered (the scheduler trims again when the engine goes idle).
  const TrimAfterLargeBody trim(req.body.size());
  if (auto e = check_request_limits(req.body, opts_.limits)) {
    metrics_.add("coda:request_rejected_total", 1, "status", std::to_string(e->status));
    return send_error(res, *e);
  }
  auto parsed = parse_api_request(req.body, chat, opts_.defaults);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    metrics_.add("coda:request_rejected_total", 1, "status", std::to_string(e->status));
    return send_error(res, *e);
  }
  ApiRequest r = std::move(std::get<ApiRequest>(parsed));
  if (!r.choices.empty()) return serve_choices(std::move(r), chat, req, res);
  if (Status s = gen_.check(r.gen); !s.ok()) {
    metrics_.add("coda:request_rejected_total", 1, "status", "400");
    return send_error(res, generation_error(s.message()));
  }
  auto ticket = scheduler_->submit(r);
  if (!ticket) return refuse_at_capacity(res, "; retry shortly.");
  const std::string id = response_id(req, res, chat);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));

  if (!r.stream) {
    const Expected<GuardedResult>& out = *result_unless_client_leaves({ticket}, ClientWatch(req))[0];
    if (!out) return send_error(res, generation_error(out.message()));
    res.set_content(dump_json(completion_body(r, *out, id, created, gen_.vocab())), "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  auto first = std::make_shared<bool>(true);
  auto text_offset = std::make_shared<size_t>(0);
  // tool_choice "auto": the reply so far, and how much of it went out as content. Text that may
  // start a call in the model's format waits for the end (chat/tool_calls.h).
  auto reply = std::make_shared<std::string>();
  auto reply_sent = std::make_shared<size_t>(0);
  // The <think> block streams in r.reasoning_field, the rest as content (chat/reasoning.h).
  auto thinking = std::make_shared<ReasoningSplitter>(r.reasoning_opened);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, ticket, r, id, created, first, text_offset, reply, reply_sent, thinking](size_t, httplib::DataSink& sink) {
        // With continuous usage stats every chunk carries the counts so far (vLLM's shape: the
        // opening chunk none generated yet), and the chunks sent once the result is in the exact
        // ones. An error body is not a chunk and carries none.
        const GenerationResult* final_usage = nullptr;
        int64_t final_reasoning = -1;
        auto send = [&](nlohmann::ordered_json j, bool opening = false) {
          if (r.continuous_usage && j.contains("choices")) {
            if (final_usage) {
              j["usage"] = usage_json(*final_usage, final_reasoning);
            } else {
              const int64_t p = ticket->prompt_tokens.load(), c = opening ? 0 : ticket->tokens_waited();
              j["usage"] = {{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
            }
          }
          return write_sse(sink, j);
        };
        std::string text;
        std::vector<TokenLogprob> lps;
        bool done = false;
        ticket->wait(text, lps, done, std::chrono::milliseconds(200));
        const bool generated = !text.empty();  // held-back text counts: the stream is not idle
        if (*first && (!text.empty() || !lps.empty() || done)) {
          *first = false;
          if (r.chat && !send(stream_chunk(r, id, created, "", nullptr, true), true)) return false;
        }
        // A forced tool call is sent whole at the end, as `tool_calls`, not as content.
        if (!r.tool_choice.empty()) text.clear(), lps.clear();
        std::string reasoning;
        if (r.reasoning) {
          std::string answer;
          thinking->feed(text, reasoning, answer);
          if (done) thinking->finish(reasoning, answer);
          text = std::move(answer);
        }
        if (r.tool_parse != ToolCallFormat::None) {
          reply->append(text);
          const size_t safe = std::max(*reply_sent, tool_call_safe_prefix(r.tool_parse, *reply, *reply_sent));
          text = reply->substr(*reply_sent, safe - *reply_sent);
          *reply_sent = safe;
        }
        if (!text.empty() || !reasoning.empty() || (r.logprobs && !lps.empty())) {
          auto chunk = stream_chunk(r, id, created, text, nullptr, false);
          if (!reasoning.empty()) chunk["choices"][0]["delta"][r.reasoning_field] = reasoning;
          if (r.logprobs && !lps.empty())
            chunk["choices"][0]["logprobs"] = logprobs_json(r, lps, gen_.vocab(), *text_offset);
          if (!send(chunk)) return false;
        }
        if (!done) {
          // An SSE comment while nothing else is sent (queued, prefilling): a client that left is
          // noticed by the failed write, and its request is cancelled even before it starts.
          if (!generated && !sink.write(": waiting\n\n", 11)) return false;
          return sink.is_writable();
        }
        const Expected<GuardedResult>& out = ticket->result();
        if (!out) {
          send(generation_error(out.message()).body());
        } else {
          final_usage = &out->result;
          if (r.reasoning) final_reasoning = out->report.reasoning_tokens;
          const ReplyParts parts = reply_parts(r, out->result);
          if (!r.tool_choice.empty() || r.tool_parse != ToolCallFormat::None) {
            const nlohmann::ordered_json& calls = parts.calls;
            // What is left to send as content: a forced call's text if it is no call; with
            // tool_choice "auto" the held-back rest of the reply if it holds no calls, or the
            // part of the content after what already went out.
            std::string rest = calls.is_null() ? parts.content : "";
            if (r.tool_parse != ToolCallFormat::None) {
              const std::string sent = reply->substr(0, *reply_sent);
              const size_t lead = sent.find_first_not_of(" \t\r\n");
              const std::string sent_trimmed = lead == std::string::npos ? "" : sent.substr(lead);
              if (calls.is_null())
                rest = reply->substr(*reply_sent);
              else if (parts.content.size() > sent_trimmed.size() &&
                       parts.content.compare(0, sent_trimmed.size(), sent_trimmed) == 0)
                rest = parts.content.substr(sent_trimmed.size());
            }
            auto chunk = stream_chunk(r, id, created, rest, nullptr, false);
            if (!calls.is_null()) {
              nlohmann::ordered_json deltas = nlohmann::ordered_json::array();
              for (size_t i = 0; i < calls.size(); ++i) {
                nlohmann::ordered_json d = calls[i];
                d["index"] = i;
                deltas.push_back(std::move(d));
              }
              chunk["choices"][0]["delta"]["tool_calls"] = std::move(deltas);
            }
            send(chunk);
          }
          auto last = stream_chunk(r, id, created, "", parts.finish_reason.c_str(), false);
          if (r.chat) last["choices"][0]["delta"] = nlohmann::ordered_json::object();
          last["choices"][0]["stop_reason"] = stop_reason_json(r, out->result);
          last["coda"] = out->report.to_json();
          send(last);
          if (r.include_usage) {
            auto u = stream_chunk(r, id, created, "", nullptr, false);
            u["choices"] = nlohmann::ordered_json::array();
            u["usage"] = usage_json(out->result, final_reasoning);
            send(u);
          }
        }
        const std::string end = "data: [DONE]\n\n";
        sink.write(end.data(), end.size());
        sink.done();
        return true;
      },
      [ticket](bool success) {
        if (!success) ticket->cancelled = true;  // the client went away: stop generating for it
      });
}

// The prompt's tokens as a generation would see them, for clients that count before they send.
// vLLM's shape ({"prompt"} or chat {"messages"}, "add_special_tokens", "return_token_strs";
// answers "count", "max_model_len", "tokens", "token_strs") and llama.cpp's ({"content"},
// "add_special", "with_pieces"; answers "tokens"). A prompt longer than the context is counted,
// not refused: knowing by how much is the point.
void Server::tokenize(const httplib::Request& req, httplib::Response& res) {
  if (auto e = check_request_limits(req.body, opts_.limits)) return send_error(res, *e);
  auto body = parse_ordered_json(req.body);
  auto bad = [&](const std::string& param, const std::string& message) {
    ApiError e;
    e.param = param;
    e.message = message;
    send_error(res, e);
  };
  if (body.is_discarded() || !body.is_object()) return bad("", "the body is not a JSON object");
  const bool chat = body.contains("messages");
  const bool llama_cpp = !chat && !body.contains("prompt") && body.contains("content");
  if (!chat && !body.contains("prompt")) {
    if (!body.contains("content"))
      return bad("prompt", "expected \"prompt\" (or llama.cpp's \"content\") with the text, or chat \"messages\"");
    body["prompt"] = body["content"];
  }
  if (!chat && !body["prompt"].is_string()) return bad("prompt", "prompt: expected a string");
  auto flag = [&](const char* key, bool fallback) -> std::optional<bool> {
    if (!body.contains(key)) return fallback;
    if (!body[key].is_boolean()) return std::nullopt;
    return body[key].get<bool>();
  };
  // A BOS as the model adds one: vLLM's default for a prompt, not llama.cpp's; a chat template
  // writes its own.
  const auto add_special =
      flag(body.contains("add_special") ? "add_special" : "add_special_tokens", !chat && !llama_cpp);
  const auto pieces = flag(body.contains("with_pieces") ? "with_pieces" : "return_token_strs", false);
  if (!add_special || !pieces)
    return bad("add_special_tokens", "add_special_tokens, return_token_strs: expected booleans");
  for (const char* k : {"add_special", "add_special_tokens", "with_pieces", "return_token_strs", "content"})
    body.erase(k);
  auto parsed = parse_api_request(dump_json(body), chat, opts_.defaults);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  const ApiRequest& r = std::get<ApiRequest>(parsed);
  auto prompt = gen_.prepare(r.gen);
  if (!prompt) return send_error(res, generation_error(prompt.message()));
  std::vector<int32_t> ids = prompt->tokens;
  const Vocab& vocab = gen_.vocab();
  if (!chat && !*add_special && !ids.empty() && ids.front() == vocab.bos()) ids.erase(ids.begin());
  nlohmann::ordered_json out{{"count", ids.size()}, {"max_model_len", gen_.n_ctx()}, {"tokens", ids}};
  if (*pieces) {
    nlohmann::ordered_json strs = nlohmann::ordered_json::array();
    for (int32_t id : ids) strs.push_back(vocab.piece(id));
    out["token_strs"] = std::move(strs);
  }
  res.set_content(dump_json(out), "application/json");
}

void Server::apply_template(const httplib::Request& req, httplib::Response& res) {
  if (auto e = check_request_limits(req.body, opts_.limits)) return send_error(res, *e);
  // The chat route's parser reads the body (messages, tools, chat_template_kwargs, ...), so the
  // prompt shown is the one a chat completion of the same body would run on.
  const auto body = parse_ordered_json(req.body);
  if (body.is_object() && !body.contains("messages"))
    return send_error(res, invalid_request("messages", "messages: required (the conversation to render)"));
  auto parsed = parse_api_request(req.body, true, opts_.defaults);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  auto prompt = gen_.prepare(std::get<ApiRequest>(parsed).gen);
  if (!prompt) return send_error(res, generation_error(prompt.message()));
  res.set_content(dump_json(nlohmann::ordered_json{{"prompt", prompt->text}}), "application/json");
}

void Server::responses(const httplib::Request& req, httplib::Response& res) {
  const TrimAfterLargeBody trim(req.body.size());
  auto reject = [&](const ApiError& e) { refuse(res, e); };
  if (auto e = check_request_limits(req.body, opts_.limits)) return reject(*e);
  const auto in = parse_ordered_json(req.body);
  if (in.is_discarded()) return reject(invalid_request("", "The request body is not valid JSON."));
  ResponsesEcho echo;
  auto body = responses_to_chat(in, echo, responses_.get());
  if (auto* e = std::get_if<ApiError>(&body)) return reject(*e);
  // The chat route's limits hold for what the translation made too (a stored conversation counts).
  const auto& chat_request = std::get<nlohmann::ordered_json>(body);
  const std::string chat_body = dump_json(chat_request);
  if (auto e = check_request_limits(chat_body, opts_.limits)) return reject(*e);
  auto parsed = parse_api_request(chat_body, true, opts_.defaults);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reject(*e);
  ApiRequest r = std::move(std::get<ApiRequest>(parsed));
  if (Status s = gen_.check(r.gen); !s.ok()) return reject(generation_error(s.message()));
  auto ticket = scheduler_->submit(r);
  if (!ticket) return refuse_at_capacity(res, "; retry shortly.");
  const std::string chat_id = response_id(req, res, true);
  // Unique even when a client sends one X-Request-Id for a whole conversation: previous_response_id
  // names a response by it.
  const std::string id = "resp_" + random_hex_id();
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  // The conversation this response ends and the response, kept for a later previous_response_id
  // and GET /v1/responses/{id}.
  auto remember = [store = responses_.get(), echo, id, turns = chat_request["messages"]](
                      const nlohmann::ordered_json& chat_answer, const nlohmann::ordered_json& response) {
    keep_response(store, id, echo, turns, chat_answer, response);
  };
  if (!r.stream) {
    const Expected<GuardedResult>& out = *result_unless_client_leaves({ticket}, ClientWatch(req))[0];
    if (!out) return send_error(res, generation_error(out.message()));
    const auto answer = completion_body(r, *out, chat_id, created, gen_.vocab());
    const auto final = response_object(answer, echo, id, created);
    remember(answer, final);
    res.set_content(dump_json(final), "application/json");
    return;
  }
  // The stream's events, in OpenAI's order: created, in_progress, a reasoning model's thinking as
  // a reasoning item, the message item with the first visible text of the answer and its deltas,
  // then each item's done events, each function call, and the whole response completed (or
  // incomplete); ResponseStream (server/responses_api.h) decides them. Each is `event: TYPE` with
  // its JSON as data. With tools, text that may start a call in the model's format waits for the
  // end, as on the chat route, and a forced call is all held.
  res.set_header("Cache-Control", "no-cache");
  struct State {
    State(bool thinking_opened, const std::string& id_suffix) : items(id_suffix), thinking(thinking_opened) {}
    int64_t seq = 0;
    bool started = false;
    ResponseStream items;
    std::string reply;  // tool_choice auto: the answer so far, and how much of it went out
    size_t reply_sent = 0;
    ReasoningSplitter thinking;
  };
  auto st = std::make_shared<State>(r.reasoning_opened, id.substr(5));
  const std::string model = r.model.empty() ? opts_.defaults.model_id : r.model;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, ticket, r, echo, id, chat_id, model, created, st, remember](size_t, httplib::DataSink& sink) {
        auto event = [&](const std::string& type, const nlohmann::ordered_json& j) {
          nlohmann::ordered_json all{{"type", type}, {"sequence_number", st->seq++}};
          all.update(j);
          const std::string e = "event: " + type + "\ndata: " + dump_json(all) + "\n\n";
          return sink.write(e.data(), e.size());
        };
        auto events = [&](const ResponseEvents& ev) {
          for (const auto& [type, j] : ev)
            if (!event(type, j)) return false;
          return true;
        };
        if (!st->started) {
          st->started = true;
          const auto skeleton = response_in_progress(echo, id, created, model);
          if (!event("response.created", {{"response", skeleton}}) ||
              !event("response.in_progress", {{"response", skeleton}}))
            return false;
        }
        std::string text, reasoning;
        std::vector<TokenLogprob> lps;
        bool done = false;
        ticket->wait(text, lps, done, std::chrono::milliseconds(200));
        const bool generated = !text.empty();
        if (r.reasoning) {  // the <think> block is the reasoning item's, not the answer's
          std::string answer;
          st->thinking.feed(text, reasoning, answer);
          if (done) st->thinking.finish(reasoning, answer);
          text = std::move(answer);
        }
        if (!r.tool_choice.empty()) text.clear();  // a forced call comes whole at the end
        if (r.tool_parse != ToolCallFormat::None) {
          st->reply += text;
          const size_t safe = std::max(st->reply_sent, tool_call_safe_prefix(r.tool_parse, st->reply, st->reply_sent));
          text = st->reply.substr(st->reply_sent, safe - st->reply_sent);
          st->reply_sent = safe;
        }
        ResponseEvents ev = st->items.reasoning(reasoning);
        for (auto& e : st->items.answer(text)) ev.push_back(std::move(e));
        if (!events(ev)) return false;
        // An SSE comment while nothing else is sent (queued, prefilling): notices a client that left.
        if (ev.empty() && !done && !generated && !sink.write(": waiting\n\n", 11)) return false;
        if (!done) return sink.is_writable();
        const Expected<GuardedResult>& out = ticket->result();
        if (!out) {
          event("error", {{"code", nullptr}, {"message", out.message()}, {"param", nullptr}});
          sink.done();
          return true;
        }
        const auto answer = completion_body(r, *out, chat_id, created, gen_.vocab());
        const auto final = response_object(answer, echo, id, created);
        remember(answer, final);
        events(st->items.finish(final));
        sink.done();
        return true;
      },
      [ticket](bool success) {
        if (!success) ticket->cancelled = true;
      });
}

void Server::embeddings(const httplib::Request& req, httplib::Response& res) {
  const TrimAfterLargeBody trim(req.body.size());
  auto reject = [&](ApiError e) {
    if (e.code == "context_length_exceeded") e.param = "input";
    refuse(res, e);
  };
  if (auto e = check_request_limits(req.body, opts_.limits)) return reject(*e);
  auto parsed = parse_embedding_request(req.body, opts_.pooling, gen_.model().config().dim, opts_.defaults.model_id);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reject(*e);
  const EmbeddingRequest& r = std::get<EmbeddingRequest>(parsed);
  for (size_t i = 0; i < r.inputs.size(); ++i)
    if (Status s = gen_.check(r.inputs[i]); !s.ok()) {
      ApiError e =
          generation_error(r.inputs.size() > 1 ? "input[" + std::to_string(i) + "]: " + s.message() : s.message());
      if (s.message().rfind("This model's maximum context length", 0) == 0) e.code = "context_length_exceeded";
      return reject(e);
    }
  // The inputs go through the scheduler like any prompt, batched with whatever runs. At most a
  // batch's worth of them wait at once, so a request of 2,048 inputs neither fills the queue that
  // other clients share nor is refused for its size; it is refused only when the queue is full
  // before any of its inputs got in.
  const size_t n = r.inputs.size();
  std::vector<std::shared_ptr<Ticket>> tickets(n);
  auto cancel_all = [&] {
    for (auto& t : tickets)
      if (t) t->cancelled = true;
  };
  const ClientWatch watch(req);
  size_t next = 0;
  for (size_t oldest = 0; oldest < n; ++oldest) {
    while (next < n && next - oldest < std::max<size_t>(opts_.max_batch, 1)) {
      ApiRequest one;
      one.gen = r.inputs[next];
      auto t = scheduler_->submit(std::move(one));
      if (!t) break;
      tickets[next++] = std::move(t);
    }
    if (next == oldest) {
      cancel_all();
      return refuse_at_capacity(res, "; retry shortly.");
    }
    while (!tickets[oldest]->wait_result(std::chrono::milliseconds(100)))
      if (watch.gone()) return cancel_all();
    const Expected<GuardedResult>& out = tickets[oldest]->result();
    if (!out) {
      cancel_all();
      return send_error(res, generation_error(out.message()));
    }
    for (float x : out->result.embedding)
      if (!std::isfinite(x)) {
        ApiError e;
        e.status = 500;
        e.type = "server_error";
        e.message = "The model's hidden states for input " + std::to_string(oldest) +
                    " are not finite numbers (infinite or NaN): the model file's weights are damaged or out of range.";
        cancel_all();
        return send_error(res, e);
      }
  }
  // Written entry by entry (embeddings_api.h): the vectors stay in the tickets, never all as text.
  int64_t tokens = 0;
  for (const auto& t : tickets) tokens += t->result()->result.prompt_tokens;
  const std::string model = r.model.empty() ? opts_.defaults.model_id : r.model;
  res.set_chunked_content_provider("application/json", [tickets, base64 = r.base64, model, tokens, i = size_t{0}](
                                                           size_t, httplib::DataSink& sink) mutable {
    std::string part = i == 0 ? embedding_head() : std::string();
    // About 64 KiB per write: a vector or several.
    while (i < tickets.size() && part.size() < (64 << 10))
      part += embedding_entry(i, tickets[i]->result()->result.embedding, base64), ++i;
    if (i == tickets.size()) part += embedding_tail(model, tokens);
    if (!sink.write(part.data(), part.size())) return false;
    if (i == tickets.size()) sink.done();
    return true;
  });
}

// Token ids back to text ({"tokens": [...]}), answered as vLLM's "prompt" and llama.cpp's "content".
void Server::detokenize(const httplib::Request& req, httplib::Response& res) {
  if (auto e = check_request_limits(req.body, opts_.limits)) return send_error(res, *e);
  const auto body = parse_ordered_json(req.body);
  ApiError e;
  e.param = "tokens";
  if (body.is_discarded() || !body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
    e.message = "expected {\"tokens\": [token ids]}";
    return send_error(res, e);
  }
  const Vocab& vocab = gen_.vocab();
  std::vector<int32_t> ids;
  for (size_t i = 0; i < body["tokens"].size(); ++i) {
    const auto& t = body["tokens"][i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab.size()) {
      e.message = "tokens[" + std::to_string(i) + "]: " + t.dump() + " is not a token id; allowed 0.." +
                  std::to_string(vocab.size() - 1);
      return send_error(res, e);
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  const std::string text = vocab.decode(ids);
  res.set_content(dump_json({{"prompt", text}, {"content", text}}), "application/json");
}

// n > 1 or a batch of prompts (not streamed): every choice is a request of its own to the
// scheduler, so they run batched like concurrent requests; the body holds them in order, each with
// its own guard report (`coda` inside the choice), and usage counts each prompt once.
void Server::serve_choices(ApiRequest r, bool chat, const httplib::Request& req, httplib::Response& res) {
  // The choices leave `r` first, so that each part copies only what they share (not every other
  // choice, nor the shared conversation that each choice already holds).
  std::vector<GenerationRequest> gens = std::move(r.choices);
  r.choices.clear();
  r.gen = GenerationRequest{};
  std::vector<ApiRequest> parts;
  for (GenerationRequest& g : gens) {
    if (Status s = gen_.check(g); !s.ok()) {
      metrics_.add("coda:request_rejected_total", 1, "status", "400");
      return send_error(res, generation_error(s.message()));
    }
    ApiRequest one = r;
    one.gen = std::move(g);
    parts.push_back(std::move(one));
  }
  std::vector<std::shared_ptr<Ticket>> tickets;
  for (ApiRequest& one : parts) {
    auto t = scheduler_->submit(one);
    if (!t) {
      for (auto& other : tickets) other->cancelled = true;
      return refuse_at_capacity(
          res, " for this request's " + std::to_string(parts.size()) + " choices; retry shortly or ask for fewer.");
    }
    tickets.push_back(std::move(t));
  }
  const std::string id = response_id(req, res, chat);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  nlohmann::ordered_json body;
  auto choices = nlohmann::ordered_json::array();
  GenerationResult total;
  const auto results = result_unless_client_leaves(tickets, ClientWatch(req));
  for (size_t i = 0; i < tickets.size(); ++i) {
    const Expected<GuardedResult>& out = *results[i];
    if (!out) {
      for (auto& t : tickets) t->cancelled = true;
      return send_error(res, generation_error(out.message()));
    }
    nlohmann::ordered_json one = completion_body(parts[i], *out, id, created, gen_.vocab());
    nlohmann::ordered_json choice = std::move(one["choices"][0]);
    choice["index"] = i;
    choice["coda"] = std::move(one["coda"]);
    choices.push_back(std::move(choice));
    if (body.is_null()) body = std::move(one);
    if (i % static_cast<size_t>(r.n) == 0) {  // each prompt once, as OpenAI and vLLM count it
      total.prompt_tokens += out->result.prompt_tokens;
      total.cached_tokens += out->result.cached_tokens;
    }
    total.completion_tokens += out->result.completion_tokens;
  }
  body["choices"] = std::move(choices);
  body["usage"] = usage_json(total);
  body.erase("coda");
  res.set_content(dump_json(body), "application/json");
}

}  // namespace coda
