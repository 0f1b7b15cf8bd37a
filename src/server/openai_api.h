// The OpenAI wire format: request parsing with OpenAI's and vLLM's field names and ranges, errors
// in OpenAI's shape, and the response and stream-chunk bodies.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>

#include "chat/tool_calls.h"
#include "engine/request.h"
#include "guard/guard.h"

namespace coda {

// {"error": {"message", "type", "param", "code"}} with its HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
  nlohmann::ordered_json body() const;
};

// A 400 invalid_request_error about `param` ("" for the body as a whole).
ApiError invalid_request(const std::string& param, const std::string& message);

// 404 model_not_found for a request (or GET /v1/models/{id}) that names another model than the one
// served; the message names both (the asked name cut to 200 characters).
ApiError model_not_found(const std::string& asked, const std::string& served);

// Choices one request may ask for (n x prompts): each is a generation of its own (in coda serve's
// scheduler, or an upstream request of its own through coda proxy).
inline constexpr size_t kMaxChoices = 128;
// What the copies of a request for its choices may hold in all (a conversation is copied per choice).
inline constexpr size_t kMaxChoiceBytes = size_t{64} << 20;

struct ApiRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  // vLLM's stream_options.continuous_usage_stats (with include_usage): every chunk carries the
  // usage so far.
  bool continuous_usage = false;
  bool logprobs = false;  // chat: logprobs=true; completions: logprobs >= 0
  int top_logprobs = 0;
  bool echo = false;         // completions: the prompt before the completion (and, with logprobs, its logprobs)
  int prompt_logprobs = -1;  // vLLM's field: -1 off, else the prompt's logprobs with this many top ones
  // vLLM's return_tokens_as_token_ids: logprobs name each token "token_id:N" rather than by its
  // text, so a client can tell apart tokens whose text is the same (or is not whole UTF-8).
  bool tokens_as_ids = false;
  // n > 1 or a batch of prompts: the generation of each choice, in order (`gen` then holds only
  // what they share); empty for one choice, which `gen` is. `n` samples per prompt.
  std::vector<GenerationRequest> choices;
  int n = 1;
  // A forced tool call (chat `tool_choice`): "" none, else the one function's name ("named") or
  // every tool ("required"); the output is held to the call's JSON and answered as `tool_calls`.
  std::string tool_choice;
  bool tool_named = false;
  // tool_choice "auto" (or absent) with tools: the format in which the model writes its calls, read
  // from its reply at the end and answered as `tool_calls` (chat/tool_calls.h); None: plain text.
  ToolCallFormat tool_parse = ToolCallFormat::None;
  // Tool-call ids of 9 letters and digits: Mistral's chat templates refuse any other id when the
  // conversation comes back with the calls (vLLM makes them so for Mistral too).
  bool nine_char_call_ids = false;
  // The reply's <think> block goes out as `reasoning_content` (chat/reasoning.h); `reasoning_opened`:
  // the chat template's generation prompt opened it, so the reply starts inside.
  bool reasoning = false;
  bool reasoning_opened = false;
  std::string reasoning_field = "reasoning";  // the message and delta field the thinking goes out in
  std::string model;
  GenerationRequest gen;
  GuardConfig guard;
};

struct ServerDefaults {
  std::string model_id = "coda";
  GuardConfig guard;                                  // the policy and its scope; a request's coda.guard replaces both
  ToolCallFormat tool_parser = ToolCallFormat::None;  // --tool-call-parser (or the chat template's)
  bool reasoning = false;                             // --reasoning-parser (or a chat template that knows </think>)
  bool reasoning_opened = false;                      // the template's generation prompt ends inside <think>
  // --reasoning-field: vLLM's current name for the thinking ("reasoning"), or "reasoning_content"
  // (llama.cpp's, and vLLM's before).
  std::string reasoning_field = "reasoning";
  // Thinking budgets for reasoning_effort low (and minimal), medium and high (-1: unlimited).
  int64_t effort_budgets[3] = {1024, 4096, -1};
};

// Parses a /v1/completions (chat = false) or /v1/chat/completions body. Unknown fields are ignored.
std::variant<ApiRequest, ApiError> parse_api_request(const std::string& body, bool chat, const ServerDefaults& d);

// vLLM's `repetition_detection` object ({max_pattern_size, min_pattern_size, min_count}) into the
// guard's exact-loop stop; an error names the field.
std::optional<ApiError> parse_repetition_detection(const nlohmann::ordered_json& v, GuardConfig& guard);
// coda's `perpetual` request object ({min_tokens, backstep, start_factor, decay}) into the guard's
// perpetual generation; an error names the field.
std::optional<ApiError> parse_perpetual(const nlohmann::ordered_json& v, GuardConfig& guard);
// The request's length fields that coda serve and coda proxy read alike: thinking budgets under
// every name clients send (vLLM's thinking_token_budget, llama.cpp's thinking_budget_tokens,
// OpenAI's reasoning_effort mapped to `effort_budgets`: low, medium, high) and the shorthand
// perpetual_min_tokens; an error names the field.
std::optional<ApiError> parse_length_fields(const nlohmann::ordered_json& body, const int64_t effort_budgets[3],
                                            GuardConfig& guard);

// A token's bytes as the JSON array of numbers that logprobs carry (`bytes`).
nlohmann::ordered_json bytes_of(const std::string& s);

// Response bodies.
nlohmann::ordered_json completion_body(const ApiRequest& r, const GuardedResult& g, const std::string& id,
                                       int64_t created, const class Vocab& vocab);
nlohmann::ordered_json stream_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                                    const std::string& text, const char* finish_reason, bool first);
// `reasoning_tokens` >= 0: also completion_tokens_details.reasoning_tokens.
nlohmann::ordered_json usage_json(const GenerationResult& g, int64_t reasoning_tokens = -1);
// vLLM's `stop_reason`: the stop string or stop_token_ids id that ended the text; null for the
// model's own end of generation or any other finish.
nlohmann::ordered_json stop_reason_json(const ApiRequest& r, const GenerationResult& g);
// A chat reply as the API answers it, split once: the <think> block apart (when the request splits
// reasoning), the tool calls (a forced call's JSON, or with tool_choice "auto" the calls the model
// wrote in its format; null if none), the content left, and the finish_reason OpenAI gives it.
// Completions keep their text and finish_reason.
struct ReplyParts {
  std::string reasoning;
  std::string content;
  nlohmann::ordered_json calls;
  std::string finish_reason;
};
ReplyParts reply_parts(const ApiRequest& r, const GenerationResult& g);
// Logprobs in the route's shape: chat `content[]`, or the legacy arrays with `text_offset` counted
// from `text_offset` (advanced past these tokens, so a stream's chunks continue the count).
nlohmann::ordered_json logprobs_json(const ApiRequest& r, const std::vector<TokenLogprob>& logprobs,
                                     const class Vocab& vocab, size_t& text_offset);

// JSON text that is always valid UTF-8 (invalid bytes become U+FFFD).
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace coda
