// OpenAI's Responses API (POST /v1/responses), which the newer SDK examples, the Agents SDK and
// coding agents speak, for text: the request is read into the chat completions body coda serves
// (`instructions` as the system turn, `input` as the conversation, `max_output_tokens`, `text.format`
// as response_format), and the result is written back as a `response` object, or as its stream of
// typed events (response.created ... response.output_text.delta ... response.completed).
//
// What a text model cannot do is refused with a 400 that says so: images and files in `input`,
// `tools` and their call items, and `previous_response_id` (coda serve stores no responses; send
// the conversation in `input`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "server/openai_api.h"

namespace coda {

// What the answer repeats from the request (OpenAI's response object echoes its settings).
struct ResponsesEcho {
  nlohmann::ordered_json instructions = nullptr, max_output_tokens = nullptr, temperature = nullptr, top_p = nullptr,
                         metadata = nlohmann::ordered_json::object(), text = {{"format", {{"type", "text"}}}};
};

// The chat completions body for a /v1/responses request, or the error that names the field.
std::variant<nlohmann::ordered_json, ApiError> responses_to_chat(const nlohmann::ordered_json& in, ResponsesEcho& echo);

// A response object from a chat completion body (completion_body's). `status` follows the finish:
// "completed", or "incomplete" with incomplete_details.reason ("max_output_tokens", or the guard's
// reason such as "repetition"); coda's guard report rides along as `coda`.
nlohmann::ordered_json response_object(const nlohmann::ordered_json& chat_body, const ResponsesEcho& echo,
                                       const std::string& id, int64_t created);

// The skeleton of a response still running (response.created / response.in_progress).
nlohmann::ordered_json response_in_progress(const ResponsesEcho& echo, const std::string& id, int64_t created,
                                            const std::string& model);

}  // namespace coda
