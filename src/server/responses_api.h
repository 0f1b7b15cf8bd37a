// OpenAI's Responses API (POST /v1/responses), which the newer SDK examples, the Agents SDK and
// coding agents speak, for text: the request is read into the chat completions body coda serves
// (`instructions` as the system turn, `input` as the conversation, `max_output_tokens`, `text.format`
// as response_format), and the result is written back as a `response` object, or as its stream of
// typed events (response.created ... response.output_text.delta ... response.completed).
//
// Function tools work as on the chat route: `tools` and `tool_choice` are read in the Responses
// shape, `function_call` and `function_call_output` items in `input` become the assistant's calls
// and the tool's answers, and the calls the model makes come back as `function_call` items.
//
// What a text model cannot do is refused with a 400 that says so: images and files in `input`,
// hosted tools (web or file search, computer use), and `previous_response_id` (coda serve stores no
// responses; send the conversation in `input`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "server/openai_api.h"

namespace coda {

// What the answer repeats from the request (OpenAI's response object echoes its settings).
struct ResponsesEcho {
  nlohmann::ordered_json instructions = nullptr, max_output_tokens = nullptr, temperature = nullptr, top_p = nullptr,
                         metadata = nlohmann::ordered_json::object(), text = {{"format", {{"type", "text"}}}},
                         tools = nlohmann::ordered_json::array(), tool_choice = "auto", parallel_tool_calls = true;
};

// The chat completions body for a /v1/responses request, or the error that names the field.
std::variant<nlohmann::ordered_json, ApiError> responses_to_chat(const nlohmann::ordered_json& in, ResponsesEcho& echo);

// A response object from a chat completion body (completion_body's). `status` follows the finish:
// "completed" (a stop or tool calls), or "incomplete" with incomplete_details.reason
// ("max_output_tokens", or the guard's reason such as "repetition"); coda's guard report rides
// along as `coda`. `output` holds the message (when there is text, or no call) and then one
// function_call item per tool call.
nlohmann::ordered_json response_object(const nlohmann::ordered_json& chat_body, const ResponsesEcho& echo,
                                       const std::string& id, int64_t created);

// The skeleton of a response still running (response.created / response.in_progress).
nlohmann::ordered_json response_in_progress(const ResponsesEcho& echo, const std::string& id, int64_t created,
                                            const std::string& model);

// A stream's events as (type, fields); the writer adds `type` and `sequence_number`.
using ResponseEvents = std::vector<std::pair<std::string, nlohmann::ordered_json>>;

// The events that open the message item: output_item.added and content_part.added. A stream
// opens it with its first visible text, so an answer that is only tool calls has no message.
ResponseEvents response_message_opening(const std::string& msg_id);

// The events that end a stream, from the final response object: for the message, the text that
// `sent` (the deltas so far) lacks and its done events (opened first when `opened` is false); for
// each function call, its item added, its arguments and its item done; then response.completed or
// response.incomplete.
ResponseEvents response_closing(const nlohmann::ordered_json& final, const std::string& sent, bool opened);

}  // namespace coda
