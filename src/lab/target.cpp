#include "lab/target.h"

#include <chrono>

namespace coda::lab {

bool HttpTarget::speaks_llamacpp() {
  std::call_once(probe_once_, [this] { llamacpp_ = client::says_llamacpp(client_, 10); });
  return llamacpp_;
}

bool HttpTarget::takes_chat(std::string& why) {
  int status = 0;
  auto props = client_.get_json("/props", &status, 10);
  if (props && status / 100 == 2 && props->is_object() && props->contains("chat_template") &&
      (*props)["chat_template"].is_string()) {
    // coda says whether the template is the model's; a built-in one stands in for a base model's.
    if (props->contains("chat_template_source") && (*props)["chat_template_source"] == "builtin") {
      why = "/props: the model has no chat template of its own";
      return false;
    }
    const bool has = !(*props)["chat_template"].get<std::string>().empty();
    why = has ? "/props has a chat_template" : "/props has no chat_template";
    return has;
  }
  nlohmann::ordered_json probe = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 1}};
  const client::Completion c = client_.complete(probe, true, {}, nullptr);
  why = c.ok ? "a chat request was answered" : "a chat request was refused (HTTP " + std::to_string(c.status) + ")";
  return c.ok;
}

bool EngineTarget::takes_chat(std::string& why) {
  const bool has = gen_.chat_template_chosen();
  why = has ? "the model has a chat template" : "the GGUF has no chat template";
  return has;
}

client::Completion HttpTarget::send(const nlohmann::ordered_json& body, bool chat, const std::atomic<bool>* cancel) {
  if (body.contains("repetition_penalty") && speaks_llamacpp()) {
    nlohmann::ordered_json named = body;
    if (client::add_llamacpp_names(named)) return client_.complete(named, chat, {}, cancel);
  }
  return client_.complete(body, chat, {}, cancel);
}

EngineTarget::EngineTarget(Generator& gen, EngineTargetOptions opts) : gen_(gen) {
  defaults_.model_id = opts.model_id;
  defaults_.guard = opts.guard;
  // The lab is its own only client: the queue is unbounded so no request of a load test is refused
  // by the harness itself; the batch and KV budget are the server's.
  scheduler_ = std::make_unique<Scheduler>(
      gen, metrics_, SchedulerOptions{size_t{1} << 30, opts.max_batch, opts.kv_budget_tokens, 64});
}

client::Completion EngineTarget::send(const nlohmann::ordered_json& body, bool chat, const std::atomic<bool>* cancel) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto since = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  client::Completion c;
  auto reject = [&](const ApiError& e) {
    c.status = e.status;
    c.error_kind = client::ErrorKind::Http;
    c.error = "HTTP " + std::to_string(e.status) + ": " + e.message;
    c.error_body = e.body();
    c.e2e_ms = since();
    return c;
  };
  auto parsed = parse_api_request(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), chat, defaults_);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reject(*e);
  ApiRequest r = std::move(std::get<ApiRequest>(parsed));
  if (Status s = gen_.check(r.gen); !s.ok()) {
    ApiError e;
    e.message = s.message();
    return reject(e);
  }
  auto ticket = scheduler_->submit(r);
  if (!ticket) {
    ApiError e;
    e.status = 429;
    e.message = "the in-process queue is full";
    return reject(e);
  }
  std::string text;
  std::vector<TokenLogprob> logprobs;  // unused: the lab reads the result's
  bool done = false;
  while (!done) {
    ticket->wait(text, logprobs, done, std::chrono::milliseconds(50));
    if (!text.empty()) {
      const double at = since();
      if (c.ttft_ms < 0) c.ttft_ms = at;
      c.chunk_ms.push_back(at);
      c.text += text;
    }
    if (!done && cancel && cancel->load()) ticket->cancelled = true;  // the scheduler ends it next step
  }
  c.e2e_ms = since();
  const Expected<GuardedResult>& out = ticket->result();
  c.status = 200;
  if (!out) {
    c.error_kind = ticket->cancelled ? client::ErrorKind::Cancelled : client::ErrorKind::Upstream;
    c.error = out.message();
    return c;
  }
  c.ok = true;
  c.finish_reason = out->result.finish_reason;
  c.prompt_tokens = out->result.prompt_tokens;
  c.completion_tokens = out->result.completion_tokens;
  c.coda = nlohmann::json::parse(dump_json(out->report.to_json()));
  if (r.guard.trace) c.coda["trace"] = nlohmann::json::parse(dump_json(out->trace));
  // The tokens' text and logprobs, when the request asked for them, as a server would send them.
  for (const auto& t : out->result.logprobs) {
    client::TokenLogprob lp;
    lp.token = t.text;
    lp.logprob = t.logprob;
    for (const auto& [id, l] : t.top) lp.top.push_back({gen_.vocab().token_bytes(id), l});
    c.logprobs.push_back(std::move(lp));
  }
  if (c.ttft_ms < 0) c.ttft_ms = c.e2e_ms;
  return c;
}

}  // namespace coda::lab
