#include "proxy/session.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "proxy/stream_guard.h"

namespace coda::proxy {

namespace {

int64_t max_tokens_of(const nlohmann::ordered_json& body) {
  for (const char* k : {"max_tokens", "max_completion_tokens"})
    if (body.contains(k) && body[k].is_number_integer()) return body[k].get<int64_t>();
  return 1 << 30;
}

double number_or(const nlohmann::ordered_json& body, const char* key, double fallback) {
  return body.contains(key) && body[key].is_number() ? body[key].get<double>() : fallback;
}

std::string content_text(const nlohmann::ordered_json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array())
    for (const auto& part : content)
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        if (!out.empty()) out += '\n';
        out += part["text"].get<std::string>();
      }
  return out;
}

// The completion prompt as one string, when it is one (a token-id prompt cannot be continued as text).
const nlohmann::ordered_json* prompt_string(const nlohmann::ordered_json& body) {
  if (!body.contains("prompt")) return nullptr;
  const auto& p = body["prompt"];
  if (p.is_string()) return &p;
  if (p.is_array() && p.size() == 1 && p[0].is_string()) return &p[0];
  return nullptr;
}

// Whether the request holds its output to a format (structured output in any engine's spelling).
// A continuation would start the format over after text already inside it, so such a request is
// stopped rather than repaired.
bool has_output_format(const nlohmann::ordered_json& body) {
  for (const char* k : {"guided_json", "guided_choice", "guided_regex", "guided_grammar", "json_schema", "grammar",
                        "structured_outputs"})
    if (body.contains(k) && !body[k].is_null()) return true;
  // A forced tool call is held to the call's JSON the same way.
  if (body.contains("tool_choice") && (body["tool_choice"].is_object() || body["tool_choice"] == "required"))
    return true;
  if (!body.contains("response_format") || !body["response_format"].is_object()) return false;
  const auto& rf = body["response_format"];
  return !(rf.contains("type") && rf["type"] == "text");
}

bool can_continue(const nlohmann::ordered_json& body, bool chat) {
  if (has_output_format(body)) return false;
  if (!chat) return prompt_string(body) != nullptr;
  return body.contains("messages") && body["messages"].is_array() && !body["messages"].empty();
}

void drop_logprobs(nlohmann::ordered_json& b) {
  b.erase("logprobs");
  b.erase("top_logprobs");
}

// The request that continues `accepted` (everything the generation has kept so far).
nlohmann::ordered_json continuation(const nlohmann::ordered_json& base, const nlohmann::ordered_json& original,
                                    bool chat, const std::string& accepted, int64_t max_tokens) {
  nlohmann::ordered_json b = base;
  if (chat) {
    nlohmann::ordered_json messages = original["messages"];
    const bool continuing = original.value("continue_final_message", false) && messages.back().is_object() &&
                            messages.back().value("role", "") == "assistant";
    if (continuing)
      messages.back()["content"] = content_text(messages.back().value("content", nlohmann::ordered_json())) + accepted;
    else
      messages.push_back({{"role", "assistant"}, {"content", accepted}});
    b["messages"] = std::move(messages);
    b["continue_final_message"] = true;
    b["add_generation_prompt"] = false;
  } else {
    b["prompt"] = prompt_string(original)->get<std::string>() + accepted;
  }
  b.erase("max_completion_tokens");
  b["max_tokens"] = max_tokens;
  return b;
}

// Budget fields the proxy enforces itself: not sent upstream (an engine that knows one would close
// the thinking its own way, one that does not may refuse it).
void drop_budget_fields(nlohmann::ordered_json& b) {
  b.erase("thinking_token_budget");
  b.erase("thinking_budget_tokens");
}

// The request in which the upstream writes the answer after `reasoning`, the thinking kept so far
// (a loop dropped, or cut at the budget). On a chat route that continues a final assistant message
// (vLLM, coda serve), that message carries the reasoning under both names (vLLM now reads
// `reasoning`, chat templates `reasoning_content`) and no content yet. llama.cpp's server renders the
// conversation with POST /apply-template, and the answer is a completion of that prompt, the
// thinking and its close: that works on every version of it, including those without
// continue_final_message. Null when the upstream could not render the conversation.
nlohmann::ordered_json answer_continuation(const client::OpenAIClient& upstream, client::Engine engine,
                                           const nlohmann::ordered_json& base, const nlohmann::ordered_json& original,
                                           const std::string& reasoning, int64_t max_tokens, bool& as_chat) {
  nlohmann::ordered_json b = base;
  drop_budget_fields(b);
  b.erase("max_completion_tokens");
  b["max_tokens"] = max_tokens;
  if (engine != client::Engine::LlamaCpp) {
    as_chat = true;
    // A model that tries to end right after the close writes a few tokens of answer first (vLLM's
    // and coda's min_tokens; an engine not known to read it is not sent it).
    if (engine == client::Engine::Vllm || engine == client::Engine::Coda)
      if (!b.contains("min_tokens") || !b["min_tokens"].is_number_integer() || b["min_tokens"].get<int64_t>() < 4)
        b["min_tokens"] = std::min<int64_t>(4, max_tokens);
    nlohmann::ordered_json messages = original["messages"];
    messages.push_back(
        {{"role", "assistant"}, {"content", ""}, {"reasoning", reasoning}, {"reasoning_content", reasoning}});
    b["messages"] = std::move(messages);
    b["continue_final_message"] = true;
    b["add_generation_prompt"] = false;
    return b;
  }
  nlohmann::ordered_json render{{"messages", original["messages"]}};
  for (const char* k : {"tools", "chat_template_kwargs"})
    if (original.contains(k)) render[k] = original[k];
  int status = 0;
  auto rendered = upstream.post_json("/apply-template", render.dump(), &status);
  if (!rendered || status != 200 || !rendered->is_object() || !(*rendered)["prompt"].is_string()) return nullptr;
  std::string prompt = (*rendered)["prompt"].get<std::string>();
  // A template whose generation prompt opens the block (DeepSeek-R1's) already holds "<think>".
  std::string_view tail = prompt;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.remove_suffix(1);
  const bool opened = tail.size() >= 7 && tail.substr(tail.size() - 7) == "<think>";
  prompt += (opened ? "" : "<think>\n") + reasoning;
  if (prompt.empty() || prompt.back() != '\n') prompt += '\n';
  prompt += "</think>\n\n";
  for (const char* k : {"messages", "tools", "tool_choice", "chat_template_kwargs", "continue_final_message",
                        "add_generation_prompt", "response_format", "parallel_tool_calls", "top_logprobs"})
    b.erase(k);
  if (b.contains("logprobs")) {  // the completions shape: a number of alternatives
    const bool on = b["logprobs"].is_boolean() ? b["logprobs"].get<bool>() : !b["logprobs"].is_null();
    if (on)
      b["logprobs"] = base.value("top_logprobs", 0);
    else
      b.erase("logprobs");
  }
  b["prompt"] = std::move(prompt);
  as_chat = false;
  return b;
}

// Whether llama.cpp's server renders this conversation's generation prompt ending in "<think>"
// (DeepSeek-R1's templates open the block themselves), so that the reply starts inside it.
bool prompt_opens_thinking(const client::OpenAIClient& upstream, const nlohmann::ordered_json& body) {
  if (!body.contains("messages")) return false;
  nlohmann::ordered_json render{{"messages", body["messages"]}};
  for (const char* k : {"tools", "chat_template_kwargs"})
    if (body.contains(k)) render[k] = body[k];
  int status = 0;
  auto rendered = upstream.post_json("/apply-template", render.dump(), &status);
  if (!rendered || status != 200 || !rendered->is_object() || !rendered->contains("prompt") ||
      !(*rendered)["prompt"].is_string())
    return false;
  std::string_view t = (*rendered)["prompt"].get_ref<const std::string&>();
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
  return t.size() >= 7 && t.substr(t.size() - 7) == "<think>";
}

}  // namespace

// The tokens generated so far as a streamed chunk reports them: vLLM's usage (with
// continuous_usage_stats), llama.cpp's timings (with timings_per_token); -1 when it does not.
int64_t reported_completion_tokens(const nlohmann::ordered_json& chunk) {
  if (!chunk.is_object()) return -1;
  const auto usage = chunk.find("usage");
  if (usage != chunk.end() && usage->is_object()) {
    const auto c = usage->find("completion_tokens");
    if (c != usage->end() && c->is_number_integer()) return c->get<int64_t>();
  }
  const auto timings = chunk.find("timings");
  if (timings != chunk.end() && timings->is_object()) {
    const auto p = timings->find("predicted_n");
    if (p != timings->end() && p->is_number_integer()) return p->get<int64_t>();
  }
  return -1;
}

std::string prompt_text_of(const nlohmann::ordered_json& body, bool chat) {
  if (!chat) {
    const auto* p = prompt_string(body);
    return p ? p->get<std::string>() : std::string();
  }
  std::string out;
  if (body.contains("messages") && body["messages"].is_array())
    for (const auto& m : body["messages"])
      if (m.is_object() && m.contains("content")) out += content_text(m["content"]) + "\n";
  return out;
}

SessionResult run_session(const client::OpenAIClient& upstream, const nlohmann::ordered_json& body,
                          const ClientView& view, const SessionOptions& opt, const Emit& emit) {
  SessionResult r;
  const bool chat = view.chat;
  const int64_t max_tokens = max_tokens_of(body);
  GuardConfig gc = opt.guard;
  // A reasoning model's thinking comes in its own field (chat): the proxy says where it is, and
  // closes it with a continuation request.
  gc.thinking.watch = chat;
  gc.thinking.external = true;
  if (opt.forward_budget) gc.thinking.budget = -1;
  if (gc.policy == GuardPolicy::Repair && !can_continue(body, chat)) gc.policy = GuardPolicy::Stop;
  const bool repair = gc.policy == GuardPolicy::Repair;
  const size_t hold = repair ? static_cast<size_t>(std::max(0, gc.stream_delay_tokens)) : 0;
  StreamGuard sg(gc, prompt_text_of(body, chat), view.logprobs ? view.top_logprobs : -1);
  // Units past which the upstream has overrun max_tokens: with logprobs a unit is a token; on text
  // alone it is a word piece, which only approximates one, so the cap is generous there.
  const auto overrun_limit = [&] { return sg.text_only() ? 4 * max_tokens + 64 : max_tokens; };

  // The upstream always streams (to be cancellable) and reports usage; coda's own options stay here.
  nlohmann::ordered_json base = body;
  base.erase("coda");
  if (!opt.forward_budget) drop_budget_fields(base);
  base["stream"] = true;
  if (!base.contains("stream_options") || !base["stream_options"].is_object())
    base["stream_options"] = nlohmann::ordered_json::object();
  base["stream_options"]["include_usage"] = true;
  // A guard that stops a generation closes its stream before the closing usage chunk, which held
  // the prompt's token count. Engines that can tell it as they stream are asked to: vLLM's (and coda
  // serve's) continuous_usage_stats puts usage in every chunk; llama.cpp's timings_per_token puts
  // its timings there (the prompt's tokens processed and cached). Others may refuse fields they do not know.
  const client::Engine engine = opt.engine ? opt.engine() : client::Engine::Unknown;
  switch (engine) {
    case client::Engine::Vllm:
    case client::Engine::Coda:
      base["stream_options"]["continuous_usage_stats"] = true;
      break;
    case client::Engine::LlamaCpp:
      base["timings_per_token"] = true;
      break;
    case client::Engine::Unknown:
      break;
  }
  // A client's vLLM-named penalty reaches llama.cpp's server, which reads only its own name.
  if (base.contains("repetition_penalty") && engine == client::Engine::LlamaCpp) client::add_llamacpp_names(base);
  const int top = std::max(opt.top_logprobs, view.top_logprobs);
  nlohmann::ordered_json with_lp = base;
  if (opt.top_logprobs > 0) client::ask_logprobs(with_lp, chat, top);

  // The guard sees the generation's text in order: reasoning, content and tool-call arguments
  // alike. Each span of it remembers where it goes back to (channel; the call for arguments).
  enum class Channel { Content, Reasoning, ToolArgs };
  struct Span {
    size_t end;
    Channel channel;
    size_t call;
  };
  struct Call {
    nlohmann::ordered_json index;  // as the upstream numbered it
    std::string id, type = "function", name, arguments;
    bool announced = false;  // its id and name went to the client
  };
  std::vector<Span> spans;
  std::vector<Call> calls;
  std::map<std::string, size_t> call_at;  // a call's index (as JSON text) -> its place in `calls`
  size_t fed = 0;                         // bytes given to the guard (its accepted text, until a stop drops the rest)
  bool side_channel = false;              // reasoning or tool calls were seen: the guard stops instead of repairing
  size_t released_units = 0, released_bytes = 0;
  // The tool-call delta entry for call `c` carrying `args` (its id, type and name the first time).
  auto call_delta = [&](size_t c, const std::string& args) {
    Call& k = calls[c];
    nlohmann::ordered_json fn{{"arguments", args}};
    nlohmann::ordered_json e{{"index", k.index}};
    if (!k.announced) {
      if (!k.id.empty()) e["id"] = k.id;
      e["type"] = k.type;
      fn = {{"name", k.name}, {"arguments", args}};
      k.announced = true;
    }
    e["function"] = std::move(fn);
    k.arguments += args;
    return e;
  };
  // Bytes [from, to) of the accepted text, split back into their channels. Releases move forward,
  // so the search starts at the first span not yet wholly released.
  size_t span_from = 0;
  auto split = [&](size_t from, size_t to, Released& out) {
    while (span_from < spans.size() && spans[span_from].end <= from) ++span_from;
    for (size_t i = span_from; i < spans.size(); ++i) {
      const Span& sp = spans[i];
      const size_t start = i == 0 ? 0 : spans[i - 1].end;
      if (start >= to) break;
      const size_t a = std::max(from, start), b = std::min(to, sp.end);
      if (a >= b) continue;
      std::string part = sg.slice(a, b);
      if (sp.channel == Channel::Content) {
        out.content += part;
      } else if (sp.channel == Channel::Reasoning) {
        out.reasoning += part;
      } else {
        if (out.tool_calls.is_null()) out.tool_calls = nlohmann::ordered_json::array();
        out.tool_calls.push_back(call_delta(sp.call, part));
      }
    }
  };
  // After a rollback: the spans past the accepted text are gone with it.
  auto drop_spans_past = [&](size_t bytes) {
    fed = bytes;
    while (!spans.empty() && (spans.size() > 1 ? spans[spans.size() - 2].end : 0) >= fed) spans.pop_back();
    if (!spans.empty()) spans.back().end = std::min(spans.back().end, fed);
    span_from = 0;
  };
  // Hands the client what is final: everything (observe, stop, the end) or all but the held units.
  auto release = [&](bool all, const nlohmann::ordered_json& chunk) {
    size_t units_to = sg.units(), bytes_to = sg.text_size();
    // Repair holds its units back; a reasoning model's thinking is held while a loop there may
    // still be dropped.
    const size_t held = repair ? hold : sg.hold_back();
    if (!all && held > 0) {
      units_to = std::max(released_units, sg.units() > held ? sg.units() - held : 0);
      bytes_to = std::max(released_bytes, sg.text_end(units_to));
    }
    const bool unannounced = all && std::any_of(calls.begin(), calls.end(), [](const Call& k) { return !k.announced; });
    if (bytes_to <= released_bytes && units_to <= released_units && !unannounced) return true;
    std::vector<client::TokenLogprob> lps;
    if (view.logprobs) lps = sg.logprobs(released_units, units_to);  // trimmed to the client's top_logprobs
    Released out;
    out.reasoning_key = r.reasoning_key;
    if (bytes_to > released_bytes) split(released_bytes, bytes_to, out);
    if (all)  // calls with no arguments at all still reach the client
      for (size_t c = 0; c < calls.size(); ++c)
        if (!calls[c].announced) {
          if (out.tool_calls.is_null()) out.tool_calls = nlohmann::ordered_json::array();
          out.tool_calls.push_back(call_delta(c, ""));
        }
    released_units = std::max(released_units, units_to);
    released_bytes = std::max(released_bytes, bytes_to);
    r.text += out.content;
    r.reasoning += out.reasoning;
    if (out.empty() && lps.empty()) return true;
    r.emitted = true;
    if (!emit(out, lps, chunk)) {
      r.client_gone = true;
      return false;
    }
    return true;
  };

  nlohmann::ordered_json request = opt.top_logprobs > 0 ? with_lp : base;
  bool request_chat = chat;        // a llama.cpp answer continuation is a completion
  bool answered_thinking = false;  // the proxy closed the thinking: the rest is the answer
  // The thinking inside the content ("<think> ... </think>"), as a server without a reasoning parser
  // streams it (llama.cpp's server before it parsed reasoning in streams). A template whose
  // generation prompt opens the block (DeepSeek-R1's) starts the reply inside it: llama.cpp's server
  // is asked (POST /apply-template) when the proxy may have to close the thinking.
  enum class TagThinking { Undecided, Inside, Closed, None };
  TagThinking tags = TagThinking::Undecided;
  std::string content_seen;  // the content so far while the thinking may be in it
  const bool may_close = gc.policy != GuardPolicy::Observe && (gc.thinking.answer_on_loop || gc.thinking.budget >= 0);
  if (chat && (may_close || gc.thinking.budget >= 0) && engine == client::Engine::LlamaCpp &&
      prompt_opens_thinking(upstream, body))
    tags = TagThinking::Inside;
  auto follow_tags = [&](const std::string& text) {
    if (tags == TagThinking::Closed || tags == TagThinking::None || text.empty()) return;
    const size_t from = content_seen.size() > 8 ? content_seen.size() - 8 : 0;
    content_seen += text;
    if (tags == TagThinking::Undecided) {
      const size_t lead = std::min(content_seen.find_first_not_of(" \t\r\n"), content_seen.size());
      const std::string_view head = std::string_view(content_seen).substr(lead, 7);
      if (head.size() < 7 && std::string_view("<think>").substr(0, head.size()) == head) return;
      tags = head == "<think>" ? TagThinking::Inside : TagThinking::None;
    }
    if (tags == TagThinking::Inside && content_seen.find("</think>", from) != std::string::npos)
      tags = TagThinking::Closed;
  };
  bool hot = false;
  int64_t first_prompt_tokens = -1, derived_prompt_tokens = -1;
  size_t units_at_segment_start = 0;
  for (;;) {
    StepVerdict verdict;
    bool acted = false;
    std::string seg_finish, seg_stop;
    auto on_delta = [&](const client::Delta& d) {
      if (d.chunk) r.last_chunk = *d.chunk;
      if (!d.finish_reason.empty()) seg_finish = d.finish_reason;
      if (!d.stop_reason.empty()) seg_stop = d.stop_reason;
      std::string all;
      auto add = [&](const std::string& t, Channel ch, size_t call) {
        if (t.empty()) return;
        all += t;
        spans.push_back({fed + all.size(), ch, call});
      };
      if (d.reasoning_key) r.reasoning_key = d.reasoning_key;
      // Once the proxy has closed the thinking, what the upstream still calls reasoning is the
      // answer (a reasoning parser that takes a reply for thinking until it sees </think>, which
      // the continuation's prompt already holds).
      if (answered_thinking) {
        add(d.reasoning, Channel::Content, 0);
      } else {
        add(d.reasoning, Channel::Reasoning, 0);
      }
      add(d.text, Channel::Content, 0);
      if (d.tool_calls.is_array())
        for (const auto& tc : d.tool_calls) {
          if (!tc.is_object()) continue;
          const nlohmann::ordered_json index =
              tc.contains("index") ? tc["index"] : nlohmann::ordered_json(calls.size());
          // Found by index in a map: an upstream that streams thousands of calls costs log n each.
          const auto [at, added] = call_at.try_emplace(index.dump(), calls.size());
          const size_t c = at->second;
          if (added) {
            Call k;
            k.index = index;
            calls.push_back(std::move(k));
          }
          if (tc.contains("id") && tc["id"].is_string()) calls[c].id = tc["id"].get<std::string>();
          if (tc.contains("type") && tc["type"].is_string()) calls[c].type = tc["type"].get<std::string>();
          const auto fn = tc.find("function");
          if (fn == tc.end() || !fn->is_object()) continue;
          if (fn->contains("name") && (*fn)["name"].is_string() && !(*fn)["name"].get<std::string>().empty())
            calls[c].name = (*fn)["name"].get<std::string>();
          if (fn->contains("arguments") && (*fn)["arguments"].is_string())
            add((*fn)["arguments"].get<std::string>(), Channel::ToolArgs, c);
        }
      if (!side_channel && (!d.reasoning.empty() || !calls.empty())) {
        side_channel = true;
        sg.stop_instead_of_repair();
      }
      if (gc.thinking.watch && !all.empty()) {
        const bool was_in_tags = tags == TagThinking::Inside;
        if (!answered_thinking) follow_tags(d.text);
        if (was_in_tags || tags == TagThinking::Inside) {
          sg.set_thinking(true);  // this delta's units belong to the thinking, the close's included
        } else {
          const bool answer_started =
              !d.text.empty() || d.tool_calls.is_array() || (answered_thinking && !d.reasoning.empty());
          sg.set_thinking(!answer_started && !d.reasoning.empty());
        }
      }
      StepVerdict v = sg.feed(all, d.logprobs);
      fed += all.size();
      if (tags == TagThinking::Closed) sg.set_thinking(false);  // the model closed it in this delta
      if (d.chunk) sg.upstream_count(reported_completion_tokens(*d.chunk));
      if (v.stop || v.repair || v.inject) {
        verdict = std::move(v);
        acted = true;
        return false;  // closes the upstream connection: the upstream aborts the generation
      }
      if (static_cast<int64_t>(sg.units()) > overrun_limit()) {
        // An upstream that writes past the max_tokens it was sent (a broken server): ended here
        // as "length", as a server that kept to it would have ended.
        verdict = StepVerdict{true, "length", std::nullopt, std::nullopt};
        acted = true;
        r.upstream_overrun = true;
        return false;
      }
      return release(false, r.last_chunk);
    };
    ++r.upstream_requests;
    const std::string id = opt.request_id.empty() || r.upstream_requests == 1
                               ? opt.request_id
                               : opt.request_id + "-r" + std::to_string(r.upstream_requests - 1);
    const client::Completion c = upstream.complete(request, request_chat, on_delta, nullptr, opt.client_left, id);
    if (c.reasoning_tokens >= 0 && r.upstream_requests == 1) r.upstream_reasoning_tokens = c.reasoning_tokens;
    if (c.error_kind == client::ErrorKind::Cancelled && !r.client_gone && !acted && opt.client_left &&
        opt.client_left())
      r.client_gone = true;  // left while the upstream was silent
    if (c.prompt_tokens >= 0) {
      if (r.upstream_requests == 1)
        first_prompt_tokens = c.prompt_tokens;
      else if (derived_prompt_tokens < 0)
        derived_prompt_tokens = std::max<int64_t>(0, c.prompt_tokens - static_cast<int64_t>(units_at_segment_start));
    }
    if (r.client_gone) {
      ++r.upstream_cancellations;
      r.finish_reason = "abort";
      break;
    }
    if (acted && c.error_kind == client::ErrorKind::Cancelled) ++r.upstream_cancellations;
    // A segment the upstream called "stop" at its max_tokens was cut (client::stopped_at_limit):
    // "length", so the client learns its text was cut, and a repair's hot stretch is continued
    // instead of taken for the end of the text.
    if (seg_finish == "stop" && client::stopped_at_limit(c, max_tokens_of(request))) seg_finish = "length";
    if (!acted) {
      if (!c.ok) {
        // An upstream that refuses the logprobs the proxy asked for: once more as the client asked,
        // which is without logprobs (the guard then works on text alone) or with the client's own
        // smaller number. A refusal of what the client itself asked for is the client's answer.
        if (c.error_kind == client::ErrorKind::Http && c.status == 400 && !r.logprobs_refused &&
            r.upstream_requests == 1 && opt.top_logprobs > 0 && sg.units() == 0 && sg.text().empty() &&
            (!view.logprobs || top > view.top_logprobs)) {
          r.logprobs_refused = true;
          if (!view.logprobs) drop_logprobs(base);
          request = base;
          continue;
        }
        r.failure = c;
        r.text_only = sg.text_only();
        r.report = sg.report();
        return r;
      }
      StepVerdict v = sg.finish();
      if (v.stop || v.repair) {
        verdict = std::move(v);
        acted = true;
      } else if (gc.perpetual_min_tokens > 0 && seg_finish == "stop" && seg_stop.empty() && !side_channel &&
                 static_cast<int64_t>(sg.units()) < std::min(gc.perpetual_min_tokens, max_tokens) &&
                 r.perpetual_backsteps < gc.max_repairs && can_continue(body, chat)) {
        // Perpetual generation: the model ended by itself before the minimum. Step back (never
        // behind what the client has: the last backstep + 1 units were held), and continue hotter,
        // then with the request's own sampling, as a repair's continuation does.
        ++r.perpetual_backsteps;
        const size_t units = sg.units();
        const size_t kept =
            sg.rollback(units > static_cast<size_t>(gc.eos_backstep) ? units - static_cast<size_t>(gc.eos_backstep) : 0,
                        released_units);
        drop_spans_past(sg.text_size());
        const RepairAction& a = gc.perpetual;
        // One request has one temperature: the hot stretch's mean, over the tokens the factor takes
        // to decay back to 1.
        const auto stretch = static_cast<int64_t>(std::ceil((a.factor - 1.0f) / std::max(a.decay, 0.001f)));
        const int64_t remaining = max_tokens - static_cast<int64_t>(kept);
        nlohmann::ordered_json next = continuation(r.logprobs_refused ? base : with_lp, body, chat, sg.text(),
                                                   std::min<int64_t>(remaining, std::max<int64_t>(1, stretch)));
        const double t0 = number_or(body, "temperature", 1.0);
        next["temperature"] =
            std::min(2.0, std::max(t0, static_cast<double>(a.min_temperature)) * (1.0 + (a.factor - 1.0) / 2.0));
        hot = true;
        units_at_segment_start = kept;
        sg.begin_segment();
        request = std::move(next);
        continue;
      } else if (hot && seg_finish == "length" && static_cast<int64_t>(sg.units()) < max_tokens) {
        // The hot stretch is over: the rest with the request's own sampling.
        hot = false;
        units_at_segment_start = sg.units();
        sg.begin_segment();
        request = continuation(r.logprobs_refused ? base : with_lp, body, chat, sg.text(),
                               max_tokens - static_cast<int64_t>(sg.units()));
        continue;
      } else {
        r.finish_reason = seg_finish.empty() ? "stop" : seg_finish;
        r.stop_reason = seg_stop;
        if (!release(true, r.last_chunk)) r.finish_reason = "abort";
        if (r.upstream_requests == 1 && c.completion_tokens >= 0) r.completion_tokens = c.completion_tokens;
        break;
      }
    }
    if (verdict.inject && !verdict.stop && !verdict.repair) {
      // Close the thinking and let the model answer: back to before the loop (never before what the
      // client has), then a request in which the upstream writes the answer after that thinking.
      const size_t kept = sg.rollback(static_cast<size_t>(std::max<int64_t>(0, verdict.inject->keep)), released_units);
      drop_spans_past(sg.text_size());
      std::string thought;
      const bool in_tags = tags == TagThinking::Inside;
      for (size_t i = 0; i < spans.size(); ++i)
        if (spans[i].channel == (in_tags ? Channel::Content : Channel::Reasoning))
          thought += sg.slice(i == 0 ? 0 : spans[i - 1].end, spans[i].end);
      if (in_tags) {  // the thinking without its opening tag
        const size_t open = thought.find("<think>");
        if (open != std::string::npos) thought.erase(0, open + 7);
        while (!thought.empty() && (thought.front() == '\n' || thought.front() == ' ')) thought.erase(0, 1);
      }
      // (In the content's tags the close becomes one unit of the text too.)
      const int64_t remaining = max_tokens - static_cast<int64_t>(kept) - (in_tags ? 1 : 0);
      bool as_chat = chat;
      nlohmann::ordered_json next;
      if (remaining > 0)
        next = answer_continuation(upstream, engine, r.logprobs_refused ? base : with_lp, body, thought, remaining,
                                   as_chat);
      if (next.is_null()) {  // no room left, or the conversation could not be rendered: stopped
        r.finish_reason = remaining > 0 ? "repetition" : "length";
        r.tokens_saved = std::max<int64_t>(0, remaining);
        if (!release(true, r.last_chunk)) r.finish_reason = "abort";
        break;
      }
      sg.set_thinking(false);
      if (in_tags) {
        // The client reads the thinking in the content: it gets the close there too, and the answer after.
        const std::string close =
            std::string(sg.text().empty() || sg.text().back() != '\n' ? "\n" : "") + "</think>\n\n";
        std::vector<client::TokenLogprob> as_token;  // one unit, so that a guard on tokens stays on tokens
        if (!sg.text_only()) {
          client::TokenLogprob lp;
          lp.token = close;
          as_token.push_back(std::move(lp));
        }
        sg.feed(close, as_token);
        spans.push_back({fed + close.size(), Channel::Content, 0});
        fed += close.size();
        tags = TagThinking::Closed;
      }
      answered_thinking = true;
      hot = false;
      request_chat = as_chat;
      units_at_segment_start = kept;
      sg.begin_segment();
      request = std::move(next);
      continue;
    }
    if (verdict.stop || !verdict.repair) {
      if (r.upstream_overrun) sg.rollback(static_cast<size_t>(overrun_limit()), released_units);
      r.finish_reason = verdict.finish_reason.empty() ? "stop" : verdict.finish_reason;
      r.tokens_saved = std::max<int64_t>(0, max_tokens - static_cast<int64_t>(sg.units()));
      if (!release(true, r.last_chunk)) r.finish_reason = "abort";
      break;
    }
    // Repair: back to before the loop (never before what the client has), then continue hotter.
    const size_t kept = sg.rollback(static_cast<size_t>(std::max<int64_t>(0, verdict.repair->keep)), released_units);
    drop_spans_past(sg.text_size());  // all content: see side_channel
    const int64_t remaining = max_tokens - static_cast<int64_t>(kept);
    if (remaining <= 0) {
      r.finish_reason = "length";
      if (!release(true, r.last_chunk)) r.finish_reason = "abort";
      break;
    }
    const RepairAction& a = *verdict.repair;
    const double t0 = number_or(body, "temperature", 1.0);
    // coda's repair starts at `factor` and decays to 1 over the hot stretch; one request has one
    // temperature, so it gets the stretch's mean.
    const double factor = 1.0 + (a.factor - 1.0) / 2.0;
    nlohmann::ordered_json next = continuation(r.logprobs_refused ? base : with_lp, body, chat, sg.text(),
                                               std::min<int64_t>(remaining, opt.hot_tokens));
    next["temperature"] = std::min(2.0, std::max(t0, static_cast<double>(a.min_temperature)) * factor);
    next["repetition_penalty"] = std::max(number_or(body, "repetition_penalty", 1.0), static_cast<double>(a.penalty));
    if (engine == client::Engine::LlamaCpp)
      next["repeat_penalty"] =
          std::max(number_or(body, "repeat_penalty", 1.0), next["repetition_penalty"].get<double>());
    hot = true;
    units_at_segment_start = kept;
    sg.begin_segment();
    request = std::move(next);
  }
  r.ok = true;
  for (const Call& k : calls)
    if (k.announced) {
      if (r.tool_calls.is_null()) r.tool_calls = nlohmann::ordered_json::array();
      r.tool_calls.push_back(
          {{"id", k.id}, {"type", k.type}, {"function", {{"name", k.name}, {"arguments", k.arguments}}}});
    }
  r.text_only = sg.text_only();
  r.report = sg.report();
  if (r.completion_tokens < 0) {
    r.completion_tokens = static_cast<int64_t>(released_units);
    r.usage_estimated = r.text_only;
  }
  r.prompt_tokens = first_prompt_tokens >= 0 ? first_prompt_tokens : derived_prompt_tokens;
  if (first_prompt_tokens < 0) r.usage_estimated = true;
  return r;
}

}  // namespace coda::proxy
