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
// coda serve keeps recent conversations in memory (server/response_store.h), so a request may name
// the response it follows with `previous_response_id` instead of sending the conversation again.
//
// What a text model cannot do is refused with a 400 that says so: images and files in `input`, and
// hosted tools (web or file search, computer use).
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "server/openai_api.h"
#include "server/response_store.h"

namespace coda {

// What the answer repeats from the request (OpenAI's response object echoes its settings).
struct ResponsesEcho {
  nlohmann::ordered_json instructions = nullptr, max_output_tokens = nullptr, temperature = nullptr, top_p = nullptr,
                         metadata = nlohmann::ordered_json::object(), text = {{"format", {{"type", "text"}}}},
                         tools = nlohmann::ordered_json::array(), tool_choice = "auto", parallel_tool_calls = true,
                         previous_response_id = nullptr;
  bool store = true;  // keep the conversation for a later previous_response_id (OpenAI's default)
};

// The chat completions body for a /v1/responses request, or the error that names the field. With
// a `store`, previous_response_id puts the conversation it names between the instructions and the
// input (the earlier instructions are not carried over, as OpenAI specifies); without one the field
// is refused.
std::variant<nlohmann::ordered_json, ApiError> responses_to_chat(const nlohmann::ordered_json& in, ResponsesEcho& echo,
                                                                 ResponseStore* store = nullptr);

// Keeps response `id` in `store` (when there is one and the request did not say store: false):
// the chat turns of its request (`messages`, the translated body's) without the instructions'
// system turn, then its answer as an assistant turn (text and tool calls), and the response object.
void keep_response(ResponseStore* store, const std::string& id, const ResponsesEcho& echo,
                   const nlohmann::ordered_json& messages, const nlohmann::ordered_json& chat_body,
                   const nlohmann::ordered_json& response);

// A response object from a chat completion body (completion_body's). `status` follows the finish:
// "completed" (a stop or tool calls), or "incomplete" with incomplete_details.reason
// ("max_output_tokens", or the guard's reason such as "repetition"); coda's guard report rides
// along as `coda`. `output` holds a reasoning item (a reasoning model's thinking, when there is
// some), the message (when there is text, or no call) and then one function_call item per call.
nlohmann::ordered_json response_object(const nlohmann::ordered_json& chat_body, const ResponsesEcho& echo,
                                       const std::string& id, int64_t created);

// The skeleton of a response still running (response.created / response.in_progress).
nlohmann::ordered_json response_in_progress(const ResponsesEcho& echo, const std::string& id, int64_t created,
                                            const std::string& model);

// GET (`remove` false) and DELETE (`remove` true) /v1/responses/{id}, answered from `store` (null:
// none kept): the stored response object, or {"id", "object": "response.deleted", "deleted":
// true}; a 404 that says why when it is not kept.
void answer_stored_response(ResponseStore* store, const std::string& id, bool remove, httplib::Response& res);

// A stream's events as (type, fields); the writer adds `type` and `sequence_number`.
using ResponseEvents = std::vector<std::pair<std::string, nlohmann::ordered_json>>;

// The output items of one streamed response as its text arrives, shared by coda serve and coda
// proxy. A reasoning model's thinking streams as a `reasoning` item (response.reasoning_text.delta,
// as vLLM and OpenAI's open-weight models send it), closed when the answer starts. The message item
// opens with the first visible text of the answer, so an answer that is only tool calls has none.
// finish() sends, from the final response object, what the deltas have not: the rest of the text,
// each item's done events, each function call (its item, its arguments whole, done), and
// response.completed or response.incomplete. It writes nothing itself.
class ResponseStream {
 public:
  explicit ResponseStream(const std::string& id_suffix) : rs_id_("rs_" + id_suffix), msg_id_("msg_" + id_suffix) {}
  ResponseEvents reasoning(const std::string& text);
  ResponseEvents answer(const std::string& text);
  ResponseEvents finish(const nlohmann::ordered_json& final);

 private:
  ResponseEvents close_reasoning();
  std::string rs_id_, msg_id_, thought_, sent_, pending_;
  bool thinking_ = false, thought_closed_ = false, opened_ = false;
};

}  // namespace coda
