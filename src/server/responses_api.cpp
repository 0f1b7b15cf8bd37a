#include "server/responses_api.h"

#include "server/http_api.h"

namespace coda {

namespace {

using Json = nlohmann::ordered_json;

// One input item's text: a string, or parts of type input_text / output_text (text models read
// nothing else).
std::variant<std::string, ApiError> item_text(const Json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return invalid_request("input", where + ".content: expected a string or an array of parts");
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const Json& part = content[k];
    const std::string at = where + ".content[" + std::to_string(k) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return invalid_request("input", at + ": expected an object with a type");
    const std::string type = part["type"].get<std::string>();
    if (type != "input_text" && type != "output_text")
      return invalid_request("input", at + ": type '" + type.substr(0, 40) +
                                          "' is not supported; coda serves text models (input_text, output_text)");
    if (!part.contains("text") || !part["text"].is_string())
      return invalid_request("input", at + ".text: expected a string");
    text += part["text"].get<std::string>();
  }
  return text;
}

// The Responses API's function tools ({type, name, description, parameters, strict}) as chat's
// ({type, function: {...}}); the chat parser then checks names and schemas as it does for chat.
std::variant<Json, ApiError> chat_tools(const Json& tools) {
  if (!tools.is_array())
    return invalid_request("tools", "tools: expected an array of {\"type\": \"function\", \"name\": ...}");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("type") || !t["type"].is_string())
      return invalid_request("tools", where + ": expected an object with a type");
    const std::string type = t["type"].get<std::string>();
    if (type != "function")
      return invalid_request("tools",
                             where + ".type: '" + type.substr(0, 40) +
                                 "' is not supported; coda serve offers function tools, which the client runs");
    Json fn = Json::object();
    for (const char* k : {"name", "description", "parameters", "strict"})
      if (t.contains(k) && !t[k].is_null()) fn[k] = t[k];
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice: "auto", "none", "required", or {"type": "function", "name"} (chat nests the name).
std::variant<Json, ApiError> chat_tool_choice(const Json& tc) {
  if (tc.is_string()) return tc;
  if (tc.is_object() && tc.value("type", Json()) == "function" && tc.contains("name") && tc["name"].is_string())
    return Json{{"type", "function"}, {"function", {{"name", tc["name"]}}}};
  return invalid_request("tool_choice",
                         "tool_choice: expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                         "\"name\": ...}");
}

// A string field of an input item, or the error that names it.
std::variant<std::string, ApiError> item_string(const Json& item, const char* key, const std::string& where) {
  if (!item.contains(key) || !item[key].is_string())
    return invalid_request("input", where + "." + key + ": expected a string");
  return item[key].get<std::string>();
}

}  // namespace

std::variant<Json, ApiError> responses_to_chat(const Json& in, ResponsesEcho& echo, ResponseStore* store) {
  if (!in.is_object()) return invalid_request("", "The request body must be a JSON object.");
  auto field = [&](const char* k) -> const Json* {
    auto it = in.find(k);
    return it == in.end() || it->is_null() ? nullptr : &*it;
  };
  if (const auto* st = field("store")) {
    if (!st->is_boolean()) return invalid_request("store", "store: expected true or false");
    echo.store = st->get<bool>();
  }
  Json messages = Json::array();
  if (const auto* ins = field("instructions")) {
    if (!ins->is_string()) return invalid_request("instructions", "instructions: expected a string");
    messages.push_back({{"role", "system"}, {"content", *ins}});
    echo.instructions = *ins;
  }
  if (const auto* prev = field("previous_response_id")) {
    if (store == nullptr)
      return invalid_request("previous_response_id",
                             "previous_response_id: this server keeps no responses (coda serve --responses-store 0, "
                             "or coda proxy); send the whole conversation in input");
    if (!prev->is_string()) return invalid_request("previous_response_id", "previous_response_id: expected a string");
    const auto kept = store->get(prev->get<std::string>());
    if (!kept) {
      ApiError e = invalid_request(
          "previous_response_id",
          "previous_response_id: no stored response '" + prev->get<std::string>().substr(0, 80) +
              "' (made with store: false, evicted from the --responses-store memory, or before a restart); send "
              "the whole conversation in input");
      e.code = "previous_response_not_found";
      return e;
    }
    for (const Json& m : (*kept)["messages"]) messages.push_back(m);
    echo.previous_response_id = *prev;
  }
  const auto* input = field("input");
  if (input == nullptr) return invalid_request("input", "input: required (a string, or an array of message items)");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array() && !input->empty()) {
    for (size_t i = 0; i < input->size(); ++i) {
      const Json& item = (*input)[i];
      const std::string where = "input[" + std::to_string(i) + "]";
      if (!item.is_object()) return invalid_request("input", where + ": expected a message object");
      const std::string type =
          item.contains("type") && item["type"].is_string() ? item["type"].get<std::string>() : "message";
      if (type == "function_call") {
        // A call from an earlier response: an assistant turn's tool call, joined to the assistant
        // turn just before it (the text and the calls of one response are one turn).
        auto call_id = item_string(item, "call_id", where), name = item_string(item, "name", where),
             arguments = item_string(item, "arguments", where);
        for (auto* v : {&call_id, &name, &arguments})
          if (auto* e = std::get_if<ApiError>(v)) return *e;
        Json call{
            {"id", std::get<std::string>(call_id)},
            {"type", "function"},
            {"function", {{"name", std::get<std::string>(name)}, {"arguments", std::get<std::string>(arguments)}}}};
        if (messages.empty() || messages.back()["role"] != "assistant")
          messages.push_back({{"role", "assistant"}, {"content", nullptr}});
        Json& turn = messages.back();
        if (!turn.contains("tool_calls")) turn["tool_calls"] = Json::array();
        turn["tool_calls"].push_back(std::move(call));
        continue;
      }
      if (type == "function_call_output") {
        auto call_id = item_string(item, "call_id", where);
        if (auto* e = std::get_if<ApiError>(&call_id)) return *e;
        if (!item.contains("output")) return invalid_request("input", where + ".output: required");
        // The output is a string, or input_text parts.
        auto output = item_text(item["output"], where);
        if (auto* e = std::get_if<ApiError>(&output)) return *e;
        messages.push_back({{"role", "tool"},
                            {"tool_call_id", std::get<std::string>(call_id)},
                            {"content", std::get<std::string>(output)}});
        continue;
      }
      if (type != "message")
        return invalid_request("input", where + ": items of type '" + type.substr(0, 40) +
                                            "' are not supported; send messages (role and content), function_call "
                                            "and function_call_output items");
      if (!item.contains("role") || !item["role"].is_string())
        return invalid_request("input", where + ".role: expected user, assistant, system or developer");
      const std::string role = item["role"].get<std::string>();
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        return invalid_request(
            "input", where + ".role: '" + role.substr(0, 40) + "' is not one of user, assistant, system, developer");
      if (!item.contains("content")) return invalid_request("input", where + ".content: required");
      auto text = item_text(item["content"], where);
      if (auto* e = std::get_if<ApiError>(&text)) return *e;
      messages.push_back({{"role", role == "developer" ? "system" : role}, {"content", std::get<std::string>(text)}});
    }
  } else {
    return invalid_request("input", "input: expected a string or a non-empty array of message items");
  }
  Json chat{{"messages", std::move(messages)}};
  // Fields with the same meaning on both routes; the chat parser checks their types and ranges.
  for (const char* k : {"model",
                        "temperature",
                        "top_p",
                        "stream",
                        "seed",
                        "user",
                        "top_k",
                        "min_p",
                        "repetition_penalty",
                        "frequency_penalty",
                        "presence_penalty",
                        "stop",
                        "coda",
                        "ignore_eos",
                        "min_tokens",
                        "logit_bias",
                        "guided_json",
                        "guided_choice",
                        "guided_regex",
                        "guided_grammar",
                        "grammar",
                        "structured_outputs"})
    if (const auto* v = field(k)) chat[k] = *v;
  if (const auto* t = field("tools")) {
    auto tools = chat_tools(*t);
    if (auto* e = std::get_if<ApiError>(&tools)) return *e;
    if (!std::get<Json>(tools).empty()) chat["tools"] = std::move(std::get<Json>(tools));
    echo.tools = *t;
  }
  if (const auto* tc = field("tool_choice")) {
    auto choice = chat_tool_choice(*tc);
    if (auto* e = std::get_if<ApiError>(&choice)) return *e;
    chat["tool_choice"] = std::move(std::get<Json>(choice));
    echo.tool_choice = *tc;
  }
  if (const auto* p = field("parallel_tool_calls")) {
    if (!p->is_boolean()) return invalid_request("parallel_tool_calls", "parallel_tool_calls: expected true or false");
    echo.parallel_tool_calls = *p;
  }
  if (const auto* m = field("max_output_tokens")) {
    chat["max_tokens"] = *m;
    echo.max_output_tokens = *m;
  }
  if (const auto* v = field("temperature")) echo.temperature = *v;
  if (const auto* v = field("top_p")) echo.top_p = *v;
  if (const auto* v = field("metadata")) {
    if (!v->is_object()) return invalid_request("metadata", "metadata: expected an object");
    echo.metadata = *v;
  }
  if (const auto* text = field("text")) {
    if (!text->is_object()) return invalid_request("text", "text: expected an object with a format");
    if (auto f = text->find("format"); f != text->end() && !f->is_null()) {
      if (!f->is_object() || !f->contains("type") || !(*f)["type"].is_string())
        return invalid_request("text", "text.format: expected an object with a type");
      const std::string type = (*f)["type"].get<std::string>();
      if (type == "json_schema") {
        // The Responses API flattens what chat nests under response_format.json_schema.
        Json js = Json::object();
        for (const char* k : {"name", "schema", "strict", "description"})
          if (f->contains(k)) js[k] = (*f)[k];
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
      } else if (type == "json_object") {
        chat["response_format"] = {{"type", "json_object"}};
      } else if (type != "text") {
        return invalid_request(
            "text", "text.format.type: '" + type.substr(0, 40) + "' is not one of text, json_schema, json_object");
      }
      echo.text = {{"format", *f}};
    }
  }
  return chat;
}

void keep_response(ResponseStore* store, const std::string& id, const ResponsesEcho& echo, const Json& messages,
                   const Json& chat_body, const Json& response) {
  if (store == nullptr || !echo.store) return;
  Json turns = Json::array();
  for (size_t i = echo.instructions.is_string() ? 1 : 0; i < messages.size(); ++i) turns.push_back(messages[i]);
  const Json none = Json::object();
  const Json& choices = chat_body.contains("choices") ? chat_body["choices"] : none;
  const Json message = choices.is_array() && !choices.empty() ? choices[0].value("message", Json::object()) : none;
  Json answer{{"role", "assistant"}, {"content", message.value("content", Json(""))}};
  if (message.contains("tool_calls")) answer["tool_calls"] = message["tool_calls"];
  turns.push_back(std::move(answer));
  store->put(id, {{"messages", std::move(turns)}, {"response", response}});
}

Json response_in_progress(const ResponsesEcho& echo, const std::string& id, int64_t created, const std::string& model) {
  return Json{{"id", id},
              {"object", "response"},
              {"created_at", created},
              {"status", "in_progress"},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"instructions", echo.instructions},
              {"max_output_tokens", echo.max_output_tokens},
              {"model", model},
              {"output", Json::array()},
              {"parallel_tool_calls", echo.parallel_tool_calls},
              {"previous_response_id", echo.previous_response_id},
              {"store", echo.store},
              {"temperature", echo.temperature},
              {"text", echo.text},
              {"tool_choice", echo.tool_choice},
              {"tools", echo.tools},
              {"top_p", echo.top_p},
              {"metadata", echo.metadata},
              {"usage", nullptr}};
}

Json response_object(const Json& chat_body, const ResponsesEcho& echo, const std::string& id, int64_t created) {
  Json out = response_in_progress(echo, id, created, chat_body.value("model", "coda"));
  // Read with defaults throughout: a field missing from the chat body must not be a crash.
  const Json none = Json::object();
  const Json& choices = chat_body.contains("choices") ? chat_body["choices"] : none;
  const Json& choice = choices.is_array() && !choices.empty() ? choices[0] : none;
  const std::string finish = choice.value("finish_reason", "stop");
  const Json message = choice.value("message", Json::object());
  const Json text = message.value("content", Json(""));
  const Json calls = message.value("tool_calls", Json::array());
  if (finish == "stop" || finish == "tool_calls") {
    out["status"] = "completed";
  } else {
    out["status"] = "incomplete";
    out["incomplete_details"] = {{"reason", finish == "length" ? "max_output_tokens" : finish}};
  }
  // A reasoning item when the model thought, the message item when there is text or nothing
  // else, then one function_call item per call.
  out["output"] = Json::array();
  const std::string suffix = id.substr(id.find('_') + 1);
  // vLLM's reasoning parsers write reasoning_content, newer releases `reasoning` (coda proxy keeps
  // the upstream's name).
  const Json thought = message.value("reasoning_content", message.value("reasoning", Json()));
  if (thought.is_string() && !thought.empty()) {
    Json item{{"type", "reasoning"}, {"id", "rs_" + suffix}, {"summary", Json::array()}, {"content", Json::array()}};
    item["content"].push_back({{"type", "reasoning_text"}, {"text", thought}});
    out["output"].push_back(std::move(item));
  }
  const bool has_text = text.is_string() && !text.get<std::string>().empty();
  if (has_text || !calls.is_array() || calls.empty()) {
    Json content = Json::array();
    content.push_back({{"type", "output_text"}, {"text", has_text ? text : Json("")}, {"annotations", Json::array()}});
    out["output"].push_back({{"type", "message"},
                             {"id", "msg_" + suffix},
                             {"status", out["status"]},
                             {"role", "assistant"},
                             {"content", std::move(content)}});
  }
  if (calls.is_array())
    for (const Json& c : calls) {
      if (!c.is_object()) continue;
      const std::string call_id = c.value("id", std::string());
      const Json fn = c.value("function", Json::object());
      out["output"].push_back({{"type", "function_call"},
                               {"id", "fc_" + (call_id.rfind("call_", 0) == 0 ? call_id.substr(5) : call_id)},
                               {"call_id", call_id},
                               {"name", fn.value("name", std::string())},
                               {"arguments", fn.value("arguments", std::string())},
                               {"status", "completed"}});
    }
  const Json u = chat_body.value("usage", Json::object());
  const Json cached = u.value("prompt_tokens_details", Json::object()).value("cached_tokens", Json(0));
  out["usage"] = {
      {"input_tokens", u.value("prompt_tokens", Json(0))},
      {"input_tokens_details", {{"cached_tokens", cached}}},
      {"output_tokens", u.value("completion_tokens", Json(0))},
      {"output_tokens_details",
       {{"reasoning_tokens", u.value("completion_tokens_details", Json::object()).value("reasoning_tokens", Json(0))}}},
      {"total_tokens", u.value("total_tokens", Json(0))}};
  if (chat_body.contains("coda")) out["coda"] = chat_body["coda"];
  return out;
}

namespace {

Json output_text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}};
}

}  // namespace

ResponseEvents ResponseStream::reasoning(const std::string& text) {
  ResponseEvents ev;
  if (text.empty() || thought_closed_) return ev;
  if (!thinking_) {
    thinking_ = true;
    const Json item{{"id", rs_id_}, {"type", "reasoning"}, {"summary", Json::array()}, {"content", Json::array()}};
    ev.push_back({"response.output_item.added", {{"output_index", 0}, {"item", item}}});
  }
  thought_ += text;
  ev.push_back({"response.reasoning_text.delta",
                {{"item_id", rs_id_}, {"output_index", 0}, {"content_index", 0}, {"delta", text}}});
  return ev;
}

ResponseEvents ResponseStream::close_reasoning() {
  ResponseEvents ev;
  if (!thinking_ || thought_closed_) return ev;
  thought_closed_ = true;
  ev.push_back({"response.reasoning_text.done",
                {{"item_id", rs_id_}, {"output_index", 0}, {"content_index", 0}, {"text", thought_}}});
  Json item{{"id", rs_id_}, {"type", "reasoning"}, {"summary", Json::array()}, {"content", Json::array()}};
  item["content"].push_back({{"type", "reasoning_text"}, {"text", thought_}});
  ev.push_back({"response.output_item.done", {{"output_index", 0}, {"item", std::move(item)}}});
  return ev;
}

ResponseEvents ResponseStream::answer(const std::string& text) {
  ResponseEvents ev;
  pending_ += text;
  if (!opened_ && pending_.find_first_not_of(" \t\r\n") != std::string::npos) {
    ev = close_reasoning();
    opened_ = true;
    const int index = thinking_ ? 1 : 0;
    const Json item{{"id", msg_id_},
                    {"type", "message"},
                    {"status", "in_progress"},
                    {"role", "assistant"},
                    {"content", Json::array()}};
    ev.push_back({"response.output_item.added", {{"output_index", index}, {"item", item}}});
    ev.push_back(
        {"response.content_part.added",
         {{"item_id", msg_id_}, {"output_index", index}, {"content_index", 0}, {"part", output_text_part("")}}});
  }
  if (opened_ && !pending_.empty()) {
    ev.push_back(
        {"response.output_text.delta",
         {{"item_id", msg_id_}, {"output_index", thinking_ ? 1 : 0}, {"content_index", 0}, {"delta", pending_}}});
    sent_ += pending_;
    pending_.clear();
  }
  return ev;
}

ResponseEvents ResponseStream::finish(const Json& final) {
  ResponseEvents ev = close_reasoning();
  const Json& output = final["output"];
  for (size_t k = 0; k < output.size(); ++k) {
    const Json& item = output[k];
    const std::string type = item.value("type", std::string()), item_id = item.value("id", std::string());
    if (type == "reasoning") {
      if (thinking_) continue;  // streamed and closed above
      const Json text = item["content"][0]["text"];
      Json added = item;
      added["content"] = Json::array();
      ev.push_back({"response.output_item.added", {{"output_index", k}, {"item", std::move(added)}}});
      ev.push_back({"response.reasoning_text.delta",
                    {{"item_id", item_id}, {"output_index", k}, {"content_index", 0}, {"delta", text}}});
      ev.push_back({"response.reasoning_text.done",
                    {{"item_id", item_id}, {"output_index", k}, {"content_index", 0}, {"text", text}}});
    } else if (type == "message") {
      const std::string text = item["content"][0].value("text", std::string());
      if (!opened_) {
        opened_ = true;
        Json added = item;
        added["status"] = "in_progress";
        added["content"] = Json::array();
        ev.push_back({"response.output_item.added", {{"output_index", k}, {"item", std::move(added)}}});
        ev.push_back(
            {"response.content_part.added",
             {{"item_id", item_id}, {"output_index", k}, {"content_index", 0}, {"part", output_text_part("")}}});
      }
      // What the deltas have not carried yet. The text before a tool call may have been sent with
      // leading whitespace that the parsed content no longer has.
      std::string rest;
      const size_t lead = sent_.find_first_not_of(" \t\r\n");
      const std::string trimmed = lead == std::string::npos ? "" : sent_.substr(lead);
      if (text.compare(0, sent_.size(), sent_) == 0)
        rest = text.substr(sent_.size());
      else if (text.compare(0, trimmed.size(), trimmed) == 0)
        rest = text.substr(trimmed.size());
      if (!rest.empty())
        ev.push_back({"response.output_text.delta",
                      {{"item_id", item_id}, {"output_index", k}, {"content_index", 0}, {"delta", rest}}});
      ev.push_back({"response.output_text.done",
                    {{"item_id", item_id}, {"output_index", k}, {"content_index", 0}, {"text", text}}});
      ev.push_back({"response.content_part.done",
                    {{"item_id", item_id}, {"output_index", k}, {"content_index", 0}, {"part", item["content"][0]}}});
    } else {
      // A function call streams as OpenAI's do: the item added, its arguments (whole: a call is
      // parsed once the model has written all of it), and done.
      Json added = item;
      added["status"] = "in_progress";
      added["arguments"] = "";
      ev.push_back({"response.output_item.added", {{"output_index", k}, {"item", std::move(added)}}});
      ev.push_back({"response.function_call_arguments.delta",
                    {{"item_id", item_id}, {"output_index", k}, {"delta", item["arguments"]}}});
      ev.push_back({"response.function_call_arguments.done",
                    {{"item_id", item_id}, {"output_index", k}, {"arguments", item["arguments"]}}});
    }
    ev.push_back({"response.output_item.done", {{"output_index", k}, {"item", item}}});
  }
  ev.push_back({final["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", final}}});
  return ev;
}

void answer_stored_response(ResponseStore* store, const std::string& id, bool remove, httplib::Response& res) {
  std::optional<Json> entry = store ? store->get(id) : std::nullopt;
  if (!entry || (remove && !store->erase(id)))
    return send_api_error(res, 404,
                          "No response with id '" + id.substr(0, 80) +
                              "' is kept (made with store: false, evicted from the --responses-store memory, deleted, "
                              "or before a restart)",
                          "invalid_request_error", "not_found");
  const Json body = remove ? Json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}} : (*entry)["response"];
  res.set_content(dump_json(body), "application/json");
}

}  // namespace coda
