// Limits on what one API request may contain, checked before the request is built into a JSON
// document: one streaming pass (nlohmann's SAX interface) over the body that allocates nothing per
// element, so a hostile body (100,000 messages, a million nested arrays, a stop list of a million
// strings) is refused at the cost of reading it, not at many times its size. What passes is
// bounded by these numbers and by the body limit. Each refusal is a 400 that names the limit and
// the field; invalid JSON gets the byte offset of the error.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "server/openai_api.h"

namespace coda {

struct RequestLimits {
  size_t max_messages = 4096;                  // chat messages per conversation
  size_t max_message_bytes = size_t{4} << 20;  // string bytes inside one message (content, parts, tool calls)
  size_t max_tools = 128;                      // tool definitions (OpenAI's limit)
  size_t max_depth = 32;                       // nesting of objects and arrays
  size_t max_prompt_tokens = 131072;           // a prompt given as token ids
  size_t max_list = 1024;                      // stop, stop_token_ids, bad_words, logit_bias entries
  size_t max_array = 65536;                    // any other array
};

// nullopt when the body is within the limits (and is JSON); else the error to answer.
std::optional<ApiError> check_request_limits(const std::string& body, const RequestLimits& limits);

}  // namespace coda
