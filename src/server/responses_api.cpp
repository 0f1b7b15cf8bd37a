#include "server/responses_api.h"

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

}  // namespace

std::variant<Json, ApiError> responses_to_chat(const Json& in, ResponsesEcho& echo) {
  if (!in.is_object()) return invalid_request("", "The request body must be a JSON object.");
  auto field = [&](const char* k) -> const Json* {
    auto it = in.find(k);
    return it == in.end() || it->is_null() ? nullptr : &*it;
  };
  if (field("previous_response_id"))
    return invalid_request(
        "previous_response_id",
        "previous_response_id: coda serve stores no responses; send the whole conversation in input");
  if (const auto* t = field("tools"); t && !(t->is_array() && t->empty()))
    return invalid_request("tools", "tools: not supported on /v1/responses; use /v1/chat/completions for tool calls");
  Json messages = Json::array();
  if (const auto* ins = field("instructions")) {
    if (!ins->is_string()) return invalid_request("instructions", "instructions: expected a string");
    messages.push_back({{"role", "system"}, {"content", *ins}});
    echo.instructions = *ins;
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
      if (type != "message")
        return invalid_request("input", where + ": items of type '" + type.substr(0, 40) +
                                            "' are not supported; send messages (role and content)");
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
  for (const char* k :
       {"model", "temperature", "top_p", "stream", "seed", "user", "top_k", "min_p", "repetition_penalty",
        "frequency_penalty", "presence_penalty", "stop", "coda", "ignore_eos", "min_tokens", "logit_bias"})
    if (const auto* v = field(k)) chat[k] = *v;
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
              {"parallel_tool_calls", false},
              {"previous_response_id", nullptr},
              {"store", false},
              {"temperature", echo.temperature},
              {"text", echo.text},
              {"tool_choice", "none"},
              {"tools", Json::array()},
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
  Json content = Json::array();
  content.push_back(
      {{"type", "output_text"}, {"text", text.is_string() ? text : Json("")}, {"annotations", Json::array()}});
  if (finish == "stop") {
    out["status"] = "completed";
  } else {
    out["status"] = "incomplete";
    out["incomplete_details"] = {{"reason", finish == "length" ? "max_output_tokens" : finish}};
  }
  out["output"] = Json::array({Json{{"type", "message"},
                                    {"id", "msg_" + id.substr(id.find('_') + 1)},
                                    {"status", out["status"]},
                                    {"role", "assistant"},
                                    {"content", std::move(content)}}});
  const Json u = chat_body.value("usage", Json::object());
  const Json cached = u.value("prompt_tokens_details", Json::object()).value("cached_tokens", Json(0));
  out["usage"] = {{"input_tokens", u.value("prompt_tokens", Json(0))},
                  {"input_tokens_details", {{"cached_tokens", cached}}},
                  {"output_tokens", u.value("completion_tokens", Json(0))},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", u.value("total_tokens", Json(0))}};
  if (chat_body.contains("coda")) out["coda"] = chat_body["coda"];
  return out;
}

}  // namespace coda
